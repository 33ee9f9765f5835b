package memory

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/store"
	"github.com/meshrelay/meshrelay/core/store/internal/feed"
)

// DefaultReplica is the replica ID of a Store returned by New.
const DefaultReplica = "memory"

var _ store.Store = (*Store)(nil)

// Store is an in-memory store.Store. Its methods are safe for concurrent use.
type Store struct {
	replica string
	data    *data
	hub     *feed.Hub[store.Event]

	mu     sync.Mutex
	closed bool
}

// data is what the handles of one store share.
type data struct {
	mu       sync.RWMutex
	inputs   map[string]*store.Encoded            // decoded on first read
	outputs  map[string]map[string]*store.Encoded // decoded on first read
	clusters map[string]store.Cluster
	caCert   []byte
	trust    map[string]store.TrustRecord
	rollouts map[string]store.RolloutRecord
	caKey    []byte
	leases   map[string]store.Lease // see lease.go
	presence map[string]presence    // see lease.go
	handles  map[*Store]struct{}
}

// New returns an empty store with replica ID DefaultReplica.
func New() *Store {
	d := &data{
		inputs:   make(map[string]*store.Encoded),
		outputs:  make(map[string]map[string]*store.Encoded),
		clusters: make(map[string]store.Cluster),
		trust:    make(map[string]store.TrustRecord),
		rollouts: make(map[string]store.RolloutRecord),
		handles:  make(map[*Store]struct{}),
	}
	return d.handle(DefaultReplica)
}

// Replica returns another handle on the same data with the given replica
// ID. Writes through one handle are Watch events for handles with another
// ID. Closing a handle does not close the others.
func (s *Store) Replica(id string) *Store {
	return s.data.handle(id)
}

// ReplicaID returns the handle's replica ID.
func (s *Store) ReplicaID() string { return s.replica }

func (d *data) handle(replica string) *Store {
	s := &Store{replica: replica, data: d, hub: feed.New(store.Event{Kind: store.EventResync}, store.ErrClosed)}
	d.mu.Lock()
	d.handles[s] = struct{}{}
	d.mu.Unlock()
	return s
}

// publish sends e to the handles with another replica ID. d.mu is held.
func (s *Store) publish(e store.Event) {
	e.Replica = s.replica
	for h := range s.data.handles {
		if h.replica != s.replica {
			h.hub.Publish(e)
		}
	}
}

func (s *Store) check(ctx context.Context) error {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return store.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory store: %w", err)
	}
	return nil
}

func checkName(what, name string) error {
	if name == "" {
		return fmt.Errorf("empty %s name", what)
	}
	return nil
}

// PutInput implements store.Inputs.
func (s *Store) PutInput(ctx context.Context, cluster string, snap *snapshot.Snapshot) error {
	var e *store.Encoded
	if snap != nil {
		e = store.Decoded(snap)
	}
	return s.putInput(ctx, cluster, e, true)
}

// PutEncodedInput is PutInput of an input kept as the backing store read
// it: it is decoded when GetInput or ListInputs first returns it
// (store.Encoded), and a damaged one is their error then, for that
// cluster only. ListEncodedInputs reads it without decoding it.
func (s *Store) PutEncodedInput(ctx context.Context, cluster string, e *store.Encoded) error {
	return s.putInput(ctx, cluster, e, false)
}

// putInput stores e unless the stored input is newer. A put of the stored
// version and hash publishes nothing, but a decoded one (PutInput's) takes
// the place of what is kept encoded: an input that turned out damaged when
// first read is replaced so by the same input as its agent sends it again.
func (s *Store) putInput(ctx context.Context, cluster string, e *store.Encoded, decoded bool) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if err := checkName("cluster", cluster); err != nil {
		return fmt.Errorf("put input: %w", err)
	}
	if e == nil {
		return fmt.Errorf("put input %q: nil snapshot", cluster)
	}
	d := s.data
	d.mu.Lock()
	defer d.mu.Unlock()
	if cur, ok := d.inputs[cluster]; ok {
		if e.Version() == cur.Version() && e.Hash() == cur.Hash() {
			if decoded {
				d.inputs[cluster] = e
			}
			return nil
		}
		if e.Version() < cur.Version() {
			return nil
		}
	}
	d.inputs[cluster] = e
	s.publish(store.Event{Kind: store.EventInput, Cluster: cluster, Version: e.Version()})
	return nil
}

// GetInput implements store.Inputs. An input kept encoded is decoded now,
// outside the store's lock; one that cannot be decoded is an error.
func (s *Store) GetInput(ctx context.Context, cluster string) (*snapshot.Snapshot, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	s.data.mu.RLock()
	e, ok := s.data.inputs[cluster]
	s.data.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("input %q: %w", cluster, store.ErrNotFound)
	}
	snap, err := e.Snapshot()
	if err != nil {
		return nil, fmt.Errorf("input %q: %w", cluster, err)
	}
	return snap, nil
}

// ListInputs implements store.Inputs. Inputs kept encoded are decoded now;
// one that cannot be decoded makes the whole answer an error, never a map
// without it.
func (s *Store) ListInputs(ctx context.Context) (map[string]*snapshot.Snapshot, error) {
	all, err := s.ListEncodedInputs(ctx)
	if err != nil {
		return nil, err
	}
	out, err := store.DecodeAll(all)
	if err != nil {
		return nil, fmt.Errorf("list inputs: %w", err)
	}
	return out, nil
}

// ListEncodedInputs returns every input by cluster as ListInputs does,
// without decoding those kept encoded (store.EncodedInputs).
func (s *Store) ListEncodedInputs(ctx context.Context) (map[string]*store.Encoded, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	s.data.mu.RLock()
	defer s.data.mu.RUnlock()
	return maps.Clone(s.data.inputs), nil
}

// DeleteInput implements store.Inputs.
func (s *Store) DeleteInput(ctx context.Context, cluster string) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	d := s.data
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.inputs[cluster]; !ok {
		return nil
	}
	delete(d.inputs, cluster)
	s.publish(store.Event{Kind: store.EventInput, Cluster: cluster, Deleted: true})
	return nil
}

// PutOutput implements store.Outputs.
func (s *Store) PutOutput(ctx context.Context, cluster, backend string, snap *snapshot.Snapshot) error {
	var e *store.Encoded
	if snap != nil {
		e = store.Decoded(snap)
	}
	return s.putOutput(ctx, cluster, backend, e, true)
}

// PutEncodedOutput is PutOutput of an output kept as the backing store
// read it: it is decoded when GetOutput or ListOutputs first returns it
// (store.Encoded), and a corrupt one is their error then.
// ListEncodedOutputs reads it without decoding it.
func (s *Store) PutEncodedOutput(ctx context.Context, cluster, backend string, e *store.Encoded) error {
	return s.putOutput(ctx, cluster, backend, e, false)
}

// putOutput stores e. A put of the stored version and hash changes
// nothing, but a decoded one (PutOutput's) takes the place of what is
// kept encoded: an output that turned out damaged when first read is
// replaced so by the same output computed again.
func (s *Store) putOutput(ctx context.Context, cluster, backend string, e *store.Encoded, decoded bool) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if err := errors.Join(checkName("cluster", cluster), checkName("backend", backend)); err != nil {
		return fmt.Errorf("put output: %w", err)
	}
	if e == nil {
		return fmt.Errorf("put output %q/%q: nil snapshot", cluster, backend)
	}
	d := s.data
	d.mu.Lock()
	defer d.mu.Unlock()
	byBackend := d.outputs[cluster]
	if cur, ok := byBackend[backend]; ok && cur.Version() == e.Version() && cur.Hash() == e.Hash() {
		if decoded {
			byBackend[backend] = e
		}
		return nil
	}
	if byBackend == nil {
		byBackend = make(map[string]*store.Encoded)
		d.outputs[cluster] = byBackend
	}
	byBackend[backend] = e
	s.publish(store.Event{Kind: store.EventOutput, Cluster: cluster, Backend: backend, Version: e.Version()})
	return nil
}

// GetOutput implements store.Outputs. An output kept encoded is decoded
// now, outside the store's lock; one that cannot be decoded is an error.
func (s *Store) GetOutput(ctx context.Context, cluster, backend string) (*snapshot.Snapshot, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	s.data.mu.RLock()
	e, ok := s.data.outputs[cluster][backend]
	s.data.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("output %q/%q: %w", cluster, backend, store.ErrNotFound)
	}
	snap, err := e.Snapshot()
	if err != nil {
		return nil, fmt.Errorf("output %q/%q: %w", cluster, backend, err)
	}
	return snap, nil
}

// ListOutputs implements store.Outputs. Outputs kept encoded are decoded
// now; one that cannot be decoded makes the whole answer an error, never
// a map without it.
func (s *Store) ListOutputs(ctx context.Context, cluster string) (map[string]*snapshot.Snapshot, error) {
	all, err := s.ListEncodedOutputs(ctx, cluster)
	if err != nil {
		return nil, err
	}
	out, err := store.DecodeAll(all)
	if err != nil {
		return nil, fmt.Errorf("list outputs %q: %w", cluster, err)
	}
	return out, nil
}

// ListEncodedOutputs returns cluster's outputs by backend as ListOutputs
// does, without decoding those kept encoded: their versions and hashes,
// and their snapshots when asked (store.Encoded).
func (s *Store) ListEncodedOutputs(ctx context.Context, cluster string) (map[string]*store.Encoded, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	s.data.mu.RLock()
	defer s.data.mu.RUnlock()
	out := maps.Clone(s.data.outputs[cluster])
	if out == nil {
		out = make(map[string]*store.Encoded)
	}
	return out, nil
}

// DeleteOutputs implements store.Outputs.
func (s *Store) DeleteOutputs(ctx context.Context, cluster string) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	d := s.data
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.outputs[cluster]; !ok {
		return nil
	}
	delete(d.outputs, cluster)
	s.publish(store.Event{Kind: store.EventOutput, Cluster: cluster, Deleted: true})
	return nil
}

// PutCluster implements store.Registry.
func (s *Store) PutCluster(ctx context.Context, c store.Cluster) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if err := checkName("cluster", c.Name); err != nil {
		return fmt.Errorf("put cluster: %w", err)
	}
	d := s.data
	d.mu.Lock()
	defer d.mu.Unlock()
	d.clusters[c.Name] = c.Clone()
	s.publish(store.Event{Kind: store.EventCluster, Cluster: c.Name})
	return nil
}

// CompareAndPutCluster implements store.Registry.
func (s *Store) CompareAndPutCluster(ctx context.Context, c store.Cluster) (store.Cluster, error) {
	if err := s.check(ctx); err != nil {
		return store.Cluster{}, err
	}
	if err := checkName("cluster", c.Name); err != nil {
		return store.Cluster{}, fmt.Errorf("put cluster: %w", err)
	}
	d := s.data
	d.mu.Lock()
	defer d.mu.Unlock()
	var cur uint64
	if old, ok := d.clusters[c.Name]; ok {
		cur = old.Version
	}
	if cur != c.Version {
		return store.Cluster{}, fmt.Errorf("put cluster %q: version %d, stored %d: %w", c.Name, c.Version, cur, store.ErrConflict)
	}
	c = c.Clone()
	c.Version = cur + 1
	d.clusters[c.Name] = c
	s.publish(store.Event{Kind: store.EventCluster, Cluster: c.Name})
	return c.Clone(), nil
}

// CompareAndPutClusters implements store.Registry.
func (s *Store) CompareAndPutClusters(ctx context.Context, cs []store.Cluster) ([]store.Cluster, error) {
	stored := make([]store.Cluster, 0, len(cs))
	for _, c := range cs {
		next, err := s.CompareAndPutCluster(ctx, c)
		switch {
		case errors.Is(err, store.ErrConflict):
		case err != nil:
			return nil, err
		default:
			stored = append(stored, next)
		}
	}
	return stored, nil
}

// GetCluster implements store.Registry.
func (s *Store) GetCluster(ctx context.Context, name string) (store.Cluster, error) {
	if err := s.check(ctx); err != nil {
		return store.Cluster{}, err
	}
	s.data.mu.RLock()
	defer s.data.mu.RUnlock()
	c, ok := s.data.clusters[name]
	if !ok {
		return store.Cluster{}, fmt.Errorf("cluster %q: %w", name, store.ErrNotFound)
	}
	return c.Clone(), nil
}

// ListClusters implements store.Registry.
func (s *Store) ListClusters(ctx context.Context) ([]store.Cluster, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	s.data.mu.RLock()
	out := make([]store.Cluster, 0, len(s.data.clusters))
	for _, c := range s.data.clusters {
		out = append(out, c.Clone())
	}
	s.data.mu.RUnlock()
	slices.SortFunc(out, func(a, b store.Cluster) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// DeleteCluster implements store.Registry.
func (s *Store) DeleteCluster(ctx context.Context, name string) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	d := s.data
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.clusters[name]; !ok {
		return nil
	}
	delete(d.clusters, name)
	s.publish(store.Event{Kind: store.EventCluster, Cluster: name, Deleted: true})
	return nil
}

// PutCA implements store.CA.
func (s *Store) PutCA(ctx context.Context, certPEM, keyPEM []byte) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if len(certPEM) == 0 || len(keyPEM) == 0 {
		return errors.New("put ca: empty certificate or key")
	}
	s.data.mu.Lock()
	defer s.data.mu.Unlock()
	s.data.caCert, s.data.caKey = slices.Clone(certPEM), slices.Clone(keyPEM)
	return nil
}

// GetCA implements store.CA.
func (s *Store) GetCA(ctx context.Context) (certPEM, keyPEM []byte, err error) {
	if err := s.check(ctx); err != nil {
		return nil, nil, err
	}
	s.data.mu.RLock()
	defer s.data.mu.RUnlock()
	if s.data.caCert == nil {
		return nil, nil, fmt.Errorf("ca: %w", store.ErrNotFound)
	}
	return slices.Clone(s.data.caCert), slices.Clone(s.data.caKey), nil
}

// GetTrust implements store.Trust.
func (s *Store) GetTrust(ctx context.Context, name string) (store.TrustRecord, error) {
	if err := s.check(ctx); err != nil {
		return store.TrustRecord{}, err
	}
	s.data.mu.RLock()
	defer s.data.mu.RUnlock()
	r, ok := s.data.trust[name]
	if !ok {
		return store.TrustRecord{}, fmt.Errorf("trust %q: %w", name, store.ErrNotFound)
	}
	return r.Clone(), nil
}

// PutTrust implements store.Trust.
func (s *Store) PutTrust(ctx context.Context, r store.TrustRecord) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if r.Name == "" || len(r.Data) == 0 {
		return errors.New("put trust: empty name or data")
	}
	s.data.mu.Lock()
	defer s.data.mu.Unlock()
	s.data.trust[r.Name] = r.Clone()
	return nil
}

// CompareAndPutTrust implements store.Trust.
func (s *Store) CompareAndPutTrust(ctx context.Context, r store.TrustRecord) (store.TrustRecord, error) {
	if err := s.check(ctx); err != nil {
		return store.TrustRecord{}, err
	}
	if r.Name == "" || len(r.Data) == 0 {
		return store.TrustRecord{}, errors.New("put trust: empty name or data")
	}
	s.data.mu.Lock()
	defer s.data.mu.Unlock()
	cur := s.data.trust[r.Name].Version
	if cur != r.Version {
		return store.TrustRecord{}, fmt.Errorf("put trust %q: version %d, stored %d: %w", r.Name, r.Version, cur, store.ErrConflict)
	}
	r = r.Clone()
	r.Version = cur + 1
	s.data.trust[r.Name] = r
	return r.Clone(), nil
}

// DeleteTrust implements store.Trust.
func (s *Store) DeleteTrust(ctx context.Context, name string) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	s.data.mu.Lock()
	defer s.data.mu.Unlock()
	delete(s.data.trust, name)
	return nil
}

// GetRollout implements store.Rollouts.
func (s *Store) GetRollout(ctx context.Context, name string) (store.RolloutRecord, error) {
	if err := s.check(ctx); err != nil {
		return store.RolloutRecord{}, err
	}
	s.data.mu.RLock()
	defer s.data.mu.RUnlock()
	r, ok := s.data.rollouts[name]
	if !ok {
		return store.RolloutRecord{}, fmt.Errorf("rollout %q: %w", name, store.ErrNotFound)
	}
	return r.Clone(), nil
}

// CompareAndPutRollout implements store.Rollouts.
func (s *Store) CompareAndPutRollout(ctx context.Context, r store.RolloutRecord) (store.RolloutRecord, error) {
	if err := s.check(ctx); err != nil {
		return store.RolloutRecord{}, err
	}
	if r.Name == "" || len(r.Data) == 0 {
		return store.RolloutRecord{}, errors.New("put rollout: empty name or data")
	}
	s.data.mu.Lock()
	defer s.data.mu.Unlock()
	cur := s.data.rollouts[r.Name].Version
	if cur != r.Version {
		return store.RolloutRecord{}, fmt.Errorf("put rollout %q: version %d, stored %d: %w", r.Name, r.Version, cur, store.ErrConflict)
	}
	r = r.Clone()
	r.Version = cur + 1
	s.data.rollouts[r.Name] = r
	return r.Clone(), nil
}

// DeleteRollout implements store.Rollouts.
func (s *Store) DeleteRollout(ctx context.Context, name string) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	s.data.mu.Lock()
	defer s.data.mu.Unlock()
	delete(s.data.rollouts, name)
	return nil
}

// Watch implements store.Watcher: it delivers writes made through handles with
// another replica ID (see Replica).
func (s *Store) Watch(ctx context.Context) (<-chan store.Event, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	return s.hub.Watch(ctx)
}

// Ping implements store.Store; it fails only after Close.
func (s *Store) Ping(ctx context.Context) error {
	return s.check(ctx)
}

// Close implements store.Store. It closes this handle only.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.data.mu.Lock()
	delete(s.data.handles, s)
	s.data.mu.Unlock()
	s.hub.Close()
	return nil
}
