package store

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/store/internal/feed"
)

// Health states reported by WriteThrough.Health.
const (
	// HealthOK: the backing store is reachable and the queue drains.
	HealthOK = "ok"
	// HealthDegraded: the backing store failed; the server keeps serving
	// from memory and retries.
	HealthDegraded = "degraded"
)

// WriteThroughOptions configures a WriteThrough. Zero fields take the
// defaults given.
type WriteThroughOptions struct {
	// Logger receives state changes (degraded, recovered); slog.Default()
	// when nil.
	Logger *slog.Logger
	// MinBackoff and MaxBackoff bound the wait between retries of a failed
	// flush or reload: 100ms and 5s.
	MinBackoff, MaxBackoff time.Duration
	// PingInterval is how often Run checks the backing store while it has
	// nothing to write: 1s.
	PingInterval time.Duration
	// OpTimeout bounds each call to the backing store made by Run and Load:
	// 10s.
	OpTimeout time.Duration
	// LoadParallelism is how many clusters' outputs Load reads at once: 16.
	LoadParallelism int
}

func (o *WriteThroughOptions) setDefaults() {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = 100 * time.Millisecond
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 5 * time.Second
	}
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = o.MinBackoff
	}
	if o.PingInterval <= 0 {
		o.PingInterval = time.Second
	}
	if o.OpTimeout <= 0 {
		o.OpTimeout = 10 * time.Second
	}
	if o.LoadParallelism <= 0 {
		o.LoadParallelism = 16
	}
}

// WriteThrough is a Store that serves from a primary (memory) store and
// writes through to a backing (Redis) store, as docs/architecture.md
// describes.
//
// Reads (GetInput, ListInputs, GetOutput, ListOutputs, GetCluster,
// ListClusters, GetCA) are the primary's, as they are. Writes act on the
// primary and return at once; they are then queued for the backing store,
// coalesced per key (only the latest value of an input, output, registry
// record or the CA is written, read from the primary when it is flushed).
// CompareAndPutCluster and the trust state go to the backing store first
// (see those methods). Run flushes the queue in order, retries with
// backoff when the backing store fails, and reports HealthDegraded until it
// succeeds again. Run also follows the backing store's change feed: other
// replicas' writes are copied into the primary before they are passed on to
// this store's watchers. Events already waiting are taken together, and a
// run of registry changes (another replica's heartbeat touches every
// record it serves) is read in one round trip where the backing store
// reads many records at once (redis.Store.GetClusters).
//
// When the backing store comes back after a failure (its feed sends
// EventResync), Run reconciles both ways: what the backing store holds newer
// is copied into memory, and what only memory holds, or holds newer, is
// queued again, so that a Redis that restarted empty is refilled; inputs
// are never lost. A deregistration made by another replica meanwhile is
// not undone: the inputs and outputs of a cluster whose registry record in
// the backing store is revoked are dropped from memory instead of queued,
// and a queued write of them is dropped when it is flushed: a backing
// store that checks the registry record in the same atomic step as the
// write (redis.Store's PutInputUnlessRevoked) refuses it, any other is
// read before and after the write. A registry record is never written
// over a newer version of itself.
//
// The code follows those jobs: this file serves the Store methods, the
// write queue and its flush are writeQueue (writequeue.go), reloads are
// reconcile.go and following the change feed is follow.go.
type WriteThrough struct {
	// Reads are the primary's, served as they are: memory holds every
	// write once it returns, and every copy from the backing store. Only
	// the reading interfaces are embedded, so that a write added to Store
	// cannot reach the primary alone: WriteThrough would not compile until
	// it queues it.
	primaryInputs
	primaryOutputs
	primaryRegistry

	*mirror
	queue *writeQueue
	hub   *feed.Hub[Event]

	closing chan struct{} // closed by Close

	// watch subscribes to the backing store's feed for as long as the
	// WriteThrough is open; Load subscribes before it reads, so that
	// nothing written meanwhile is missed, and Run takes over the channel.
	watch     func() (<-chan Event, error)
	stopWatch context.CancelFunc

	mu      sync.Mutex
	events  <-chan Event // subscribed by Load, taken by Run
	state   string
	lastErr error
	closed  bool
	// own holds the hash of each output memory holds from this replica's
	// own PutOutput, until a copy from the backing store replaces it: a
	// reconcile writes back to the backing store only those. Another
	// replica's output copied into memory may be older than what that
	// replica, its writer, holds; written back after the backing store lost
	// it (a Redis restart), it would overwrite the newer one there and in
	// every replica's memory, while the agent holds the newer.
	own map[pendingKey]snapshot.Hash
	// outputMu orders this replica's output writes into memory with the
	// copies from the backing store (copyOutput), so that a copy never
	// lands between an own write and its being marked own.
	outputMu sync.Mutex
}

// setOwn records that memory holds this replica's own write of key, or
// with a zero hash, that it no longer does.
func (w *WriteThrough) setOwn(key pendingKey, h snapshot.Hash) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if h.IsZero() {
		delete(w.own, key)
		return
	}
	if w.own == nil {
		w.own = map[pendingKey]snapshot.Hash{}
	}
	w.own[key] = h
}

// copied records that memory now holds s for key, copied from the backing
// store: unless it is this replica's own write, the output is no longer
// this replica's to write back.
func (w *WriteThrough) copied(key pendingKey, s *Encoded) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if h, ok := w.own[key]; ok && h != s.Hash() {
		delete(w.own, key)
	}
}

// copyOutput copies an output read from the backing store into memory,
// unless memory holds this replica's own write of it that is newer: of a
// higher version, or of the same version and still queued for the backing
// store. A cluster's output versions only grow, whichever replica writes
// them (the engine numbers the next after the one delivered before), so
// an older copy is a stale write that reached the backing store last, as
// when two replicas write back what they hold after Redis lost its data.
// kept reports that memory's own write stayed; it must go back to the
// backing store again. A primary that keeps outputs encoded
// (encodedOutputs) gets s as it is, decoded when first read.
func (w *WriteThrough) copyOutput(ctx context.Context, cluster, backend string, s *Encoded) (kept bool, err error) {
	key := outputKey(cluster, backend)
	w.outputMu.Lock()
	defer w.outputMu.Unlock()
	if cur, err := w.primaryOutput(ctx, cluster, backend); err == nil && w.owns(key, cur) &&
		(cur.Version() > s.Version() || (cur.Version() == s.Version() && w.queue.has(key))) {
		return true, nil
	}
	if p, ok := w.primary.(encodedOutputs); ok {
		err = p.PutEncodedOutput(ctx, cluster, backend, s)
	} else {
		var snap *snapshot.Snapshot
		if snap, err = s.Snapshot(); err == nil {
			err = w.primary.PutOutput(ctx, cluster, backend, snap)
		}
	}
	if err != nil {
		return false, err
	}
	w.copied(key, s)
	return false, nil
}

// encodedOutputs is a primary store that keeps outputs as the backing
// store read them, decoded when first read (memory.Store): a cold start
// then decodes no output that no one reads.
type encodedOutputs interface {
	// PutEncodedOutput is PutOutput of an Encoded.
	PutEncodedOutput(ctx context.Context, cluster, backend string, e *Encoded) error
	// ListEncodedOutputs is ListOutputs without decoding.
	ListEncodedOutputs(ctx context.Context, cluster string) (map[string]*Encoded, error)
}

// ListEncodedInputs implements EncodedInputs: memory's inputs, without
// decoding those it keeps encoded.
func (w *WriteThrough) ListEncodedInputs(ctx context.Context) (map[string]*Encoded, error) {
	return ListEncodedInputs(ctx, w.primary)
}

// primaryOutputsOf returns memory's outputs of cluster by backend, without
// decoding those it keeps encoded.
func (w *WriteThrough) primaryOutputsOf(ctx context.Context, cluster string) (map[string]*Encoded, error) {
	if p, ok := w.primary.(encodedOutputs); ok {
		return p.ListEncodedOutputs(ctx, cluster)
	}
	all, err := w.primary.ListOutputs(ctx, cluster)
	if err != nil {
		return nil, err
	}
	return DecodedAll(all), nil
}

// primaryOutput returns memory's output of cluster and backend, without
// decoding it if memory keeps it encoded.
func (w *WriteThrough) primaryOutput(ctx context.Context, cluster, backend string) (*Encoded, error) {
	all, err := w.primaryOutputsOf(ctx, cluster)
	if err != nil {
		return nil, err
	}
	e, ok := all[backend]
	if !ok {
		return nil, ErrNotFound
	}
	return e, nil
}

// owns reports whether memory's s for key is this replica's own write.
func (w *WriteThrough) owns(key pendingKey, s *Encoded) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	h, ok := w.own[key]
	return ok && h == s.Hash()
}

// The names under which WriteThrough embeds the primary's reads, unexported
// so that they are not fields a caller could replace.
type (
	primaryInputs   = InputReader
	primaryOutputs  = OutputReader
	primaryRegistry = RegistryReader
)

var _ Store = (*WriteThrough)(nil)

// NewWriteThrough returns a WriteThrough over primary (normally a
// *memory.Store) and backing (normally a *redis.Store). It owns both: Close
// closes them. Call Load to fill memory, then Run.
func NewWriteThrough(primary, backing Store, opts WriteThroughOptions) *WriteThrough {
	opts.setDefaults()
	m := &mirror{primary: primary, backing: backing, opts: opts, logger: opts.Logger.With("store", "write-through")}
	watchCtx, stopWatch := context.WithCancel(context.Background())
	return &WriteThrough{
		primaryInputs:   primary,
		primaryOutputs:  primary,
		primaryRegistry: primary,
		mirror:          m,
		queue:           newWriteQueue(m),
		hub:             feed.New(Event{Kind: EventResync}, ErrClosed),
		closing:         make(chan struct{}),
		watch:           func() (<-chan Event, error) { return backing.Watch(watchCtx) },
		stopWatch:       stopWatch,
		state:           HealthOK,
	}
}

// Health returns HealthOK, or HealthDegraded and the backing store's last
// error. Degraded is not down: reads and writes keep being served.
func (w *WriteThrough) Health() (state string, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.state, w.lastErr
}

// QueueLen returns how many keys wait to be written to the backing store.
func (w *WriteThrough) QueueLen() int {
	return w.queue.size()
}

func (w *WriteThrough) setHealth(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.closed:
		// Failures after Close are the closed stores, not the backing one.
	case err == nil && w.state != HealthOK:
		w.logger.Info("backing store recovered", "queued", w.queue.size())
		w.state, w.lastErr = HealthOK, nil
	case err != nil && w.state != HealthDegraded:
		w.logger.Warn("backing store failed; serving from memory", "err", err, "queued", w.queue.size())
		w.state, w.lastErr = HealthDegraded, err
	case err != nil:
		w.lastErr = err
	}
}

// queueAfter queues k for the backing store once the primary accepted its
// write, that is when err is nil, and returns err.
func (w *WriteThrough) queueAfter(err error, k pendingKey) error {
	if err == nil {
		w.queue.add(k)
	}
	return err
}

// PutInput implements Inputs.
func (w *WriteThrough) PutInput(ctx context.Context, cluster string, s *snapshot.Snapshot) error {
	return w.queueAfter(w.primary.PutInput(ctx, cluster, s), inputKey(cluster))
}

// DeleteInput implements Inputs.
func (w *WriteThrough) DeleteInput(ctx context.Context, cluster string) error {
	return w.queueAfter(w.primary.DeleteInput(ctx, cluster), inputKey(cluster))
}

// PutOutput implements Outputs.
func (w *WriteThrough) PutOutput(ctx context.Context, cluster, backend string, s *snapshot.Snapshot) error {
	w.outputMu.Lock()
	err := w.primary.PutOutput(ctx, cluster, backend, s)
	if err == nil {
		w.setOwn(outputKey(cluster, backend), s.Hash())
	}
	w.outputMu.Unlock()
	return w.queueAfter(err, outputKey(cluster, backend))
}

// DeleteOutputs implements Outputs. Queued writes of the cluster's outputs
// are dropped: the deletion supersedes them.
func (w *WriteThrough) DeleteOutputs(ctx context.Context, cluster string) error {
	if err := w.primary.DeleteOutputs(ctx, cluster); err != nil {
		return err
	}
	w.mu.Lock()
	for k := range w.own {
		if k.cluster == cluster {
			delete(w.own, k)
		}
	}
	w.mu.Unlock()
	w.queue.deleteOutputs(cluster)
	return nil
}

// PutCluster implements Registry.
func (w *WriteThrough) PutCluster(ctx context.Context, c Cluster) error {
	return w.queueAfter(w.primary.PutCluster(ctx, c), clusterKey(c.Name))
}

// CompareAndPutCluster implements Registry. Registry changes are checked
// and written in the backing store itself, which every replica shares, and
// copied into memory after: a revocation can be neither lost to nor
// overwritten by another replica's change. While the backing store is
// unreachable, registry changes fail (reads keep working from memory). On a
// conflict, the backing store's record is copied into memory so that the
// caller's next read sees it.
func (w *WriteThrough) CompareAndPutCluster(ctx context.Context, c Cluster) (Cluster, error) {
	octx, cancel := w.op(ctx)
	defer cancel()
	stored, err := w.backing.CompareAndPutCluster(octx, c)
	if errors.Is(err, ErrConflict) {
		if cur, gerr := w.backing.GetCluster(octx, c.Name); gerr == nil {
			_ = w.copyCluster(ctx, cur)
		}
		return Cluster{}, err
	}
	if err != nil {
		return Cluster{}, err
	}
	if err := w.copyCluster(ctx, stored); err != nil {
		return Cluster{}, err
	}
	return stored, nil
}

// CompareAndPutClusters implements Registry as CompareAndPutCluster does,
// in one call to the backing store: the records stored are copied into
// memory, and for each left out for its version, the backing store's.
func (w *WriteThrough) CompareAndPutClusters(ctx context.Context, cs []Cluster) ([]Cluster, error) {
	octx, cancel := w.op(ctx)
	defer cancel()
	stored, err := w.backing.CompareAndPutClusters(octx, cs)
	if err != nil {
		return nil, err
	}
	done := make(map[string]bool, len(stored))
	for _, c := range stored {
		done[c.Name] = true
		if err := w.copyCluster(ctx, c); err != nil {
			return nil, err
		}
	}
	for _, c := range cs {
		if done[c.Name] {
			continue
		}
		if cur, gerr := w.backing.GetCluster(octx, c.Name); gerr == nil {
			_ = w.copyCluster(ctx, cur)
		}
	}
	return stored, nil
}

// DeleteCluster implements Registry.
func (w *WriteThrough) DeleteCluster(ctx context.Context, name string) error {
	return w.queueAfter(w.primary.DeleteCluster(ctx, name), clusterKey(name))
}

// PutCA implements CA.
func (w *WriteThrough) PutCA(ctx context.Context, certPEM, keyPEM []byte) error {
	return w.queueAfter(w.primary.PutCA(ctx, certPEM, keyPEM), caKey)
}

// GetCA implements CA: from memory, which Load filled.
func (w *WriteThrough) GetCA(ctx context.Context) (certPEM, keyPEM []byte, err error) {
	return w.primary.GetCA(ctx)
}

// GetTrust implements Trust: from the backing store, which replicas share,
// else from memory while it is unreachable. What the backing store returns
// is copied into memory for then.
func (w *WriteThrough) GetTrust(ctx context.Context, name string) (TrustRecord, error) {
	octx, cancel := w.op(ctx)
	defer cancel()
	r, err := w.backing.GetTrust(octx, name)
	switch {
	case err == nil:
		_ = w.copyTrust(ctx, r)
		return r, nil
	case errors.Is(err, ErrNotFound):
		return r, err
	}
	return w.primary.GetTrust(ctx, name)
}

// PutTrust implements Trust: in the backing store, then in memory.
func (w *WriteThrough) PutTrust(ctx context.Context, r TrustRecord) error {
	octx, cancel := w.op(ctx)
	defer cancel()
	if err := w.backing.PutTrust(octx, r); err != nil {
		return err
	}
	return w.primary.PutTrust(ctx, r)
}

// CompareAndPutTrust implements Trust. Trust records are checked and
// written in the backing store itself, synchronously, and copied into
// memory after: a rotation advances only once every replica can read where
// it is, so while the backing store is down it waits, and two replicas
// never both start one. On a conflict the backing store's record is copied
// into memory.
func (w *WriteThrough) CompareAndPutTrust(ctx context.Context, r TrustRecord) (TrustRecord, error) {
	octx, cancel := w.op(ctx)
	defer cancel()
	stored, err := w.backing.CompareAndPutTrust(octx, r)
	if errors.Is(err, ErrConflict) {
		if cur, gerr := w.backing.GetTrust(octx, r.Name); gerr == nil {
			_ = w.copyTrust(ctx, cur)
		}
		return TrustRecord{}, err
	}
	if err != nil {
		return TrustRecord{}, err
	}
	if err := w.copyTrust(ctx, stored); err != nil {
		return TrustRecord{}, err
	}
	return stored, nil
}

// DeleteTrust implements Trust: in the backing store, then in memory.
func (w *WriteThrough) DeleteTrust(ctx context.Context, name string) error {
	octx, cancel := w.op(ctx)
	defer cancel()
	if err := w.backing.DeleteTrust(octx, name); err != nil {
		return err
	}
	return w.primary.DeleteTrust(ctx, name)
}

// copyTrust stores a trust record read from the backing store in memory
// unless memory already holds a newer version of it.
func (w *WriteThrough) copyTrust(ctx context.Context, r TrustRecord) error {
	w.trustMu.Lock()
	defer w.trustMu.Unlock()
	if cur, err := w.primary.GetTrust(ctx, r.Name); err == nil && cur.Version > r.Version {
		return nil
	}
	return w.primary.PutTrust(ctx, r)
}

// Watch implements Watcher: it delivers the backing store's events (other
// replicas' writes) once Run has copied them into memory, so a watcher that
// reloads sees them. It needs Run to be running.
func (w *WriteThrough) Watch(ctx context.Context) (<-chan Event, error) {
	if err := w.primary.Ping(ctx); err != nil {
		return nil, err
	}
	return w.hub.Watch(ctx)
}

// Ping implements Store: it checks the primary only, since the store keeps
// serving while the backing store is down. See Health for the backing store.
func (w *WriteThrough) Ping(ctx context.Context) error {
	return w.primary.Ping(ctx)
}

// Close implements Store: it makes Run return, closes the watchers and both
// stores. Writes still queued are not flushed; call Flush first to try.
func (w *WriteThrough) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	close(w.closing)
	w.mu.Unlock()
	w.stopWatch()
	w.hub.Close()
	return errors.Join(w.primary.Close(), w.backing.Close())
}

// Run flushes queued writes to the backing store and follows its change
// feed until ctx ends or the store is closed. It returns nil then; it does
// not return on backing-store failures, which it retries.
func (w *WriteThrough) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-w.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	var wg sync.WaitGroup
	wg.Go(func() { w.queue.run(ctx, w.setHealth) })
	wg.Go(func() { w.followLoop(ctx) })
	wg.Wait()
	return nil
}

// Flush writes every queued key to the backing store once, in order, and
// returns the first failure; Run does the same with retries.
func (w *WriteThrough) Flush(ctx context.Context) error {
	return w.queue.flush(ctx)
}

// GetRollout implements Rollouts: from the backing store, which replicas
// share. Rollout records are not kept in memory: while the backing store
// is unreachable a rollout holds where it is.
func (w *WriteThrough) GetRollout(ctx context.Context, name string) (RolloutRecord, error) {
	octx, cancel := w.op(ctx)
	defer cancel()
	return w.backing.GetRollout(octx, name)
}

// CompareAndPutRollout implements Rollouts, in the backing store itself,
// synchronously: a rollout takes a step only where every replica reads it.
func (w *WriteThrough) CompareAndPutRollout(ctx context.Context, r RolloutRecord) (RolloutRecord, error) {
	octx, cancel := w.op(ctx)
	defer cancel()
	return w.backing.CompareAndPutRollout(octx, r)
}

// DeleteRollout implements Rollouts, in the backing store.
func (w *WriteThrough) DeleteRollout(ctx context.Context, name string) error {
	octx, cancel := w.op(ctx)
	defer cancel()
	return w.backing.DeleteRollout(octx, name)
}
