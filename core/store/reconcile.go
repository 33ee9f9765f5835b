package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"
)

// LoadStats describes a Load.
type LoadStats struct {
	Inputs, Outputs, Clusters int
	// Queued is how many keys only memory held, queued for the backing
	// store.
	Queued   int
	Duration time.Duration
}

// Load fills memory from the backing store (a cold start) and reports what
// it read and how long it took. Newer versions in memory win; keys only
// memory holds are queued for the backing store. Run calls it again after
// the backing store's feed asks for a resync.
func (w *WriteThrough) Load(ctx context.Context) (LoadStats, error) {
	start := time.Now()
	w.mu.Lock()
	subscribed := w.events != nil
	w.mu.Unlock()
	if !subscribed {
		events, err := w.watch()
		if err != nil {
			w.setHealth(err)
			return LoadStats{Duration: time.Since(start)}, fmt.Errorf("load from backing store: watch: %w", err)
		}
		w.mu.Lock()
		w.events = events
		w.mu.Unlock()
	}
	stats, err := w.reconcile(ctx)
	stats.Duration = time.Since(start)
	if err != nil {
		w.setHealth(err)
		return stats, fmt.Errorf("load from backing store: %w", err)
	}
	return stats, nil
}

// reconciled is what one part of a reconcile read from the backing store,
// and the keys that only memory holds, or holds newer, to queue for it.
type reconciled struct {
	read    int
	requeue []pendingKey
}

// reconcile copies into memory what the backing store holds newer, and
// queues what only memory holds or holds newer, except the inputs and
// outputs of clusters the backing store's registry says are revoked.
func (w *WriteThrough) reconcile(ctx context.Context) (LoadStats, error) {
	var stats LoadStats
	known := make(map[string]bool) // clusters either side knows: their outputs are reconciled
	inputs, err := w.reconcileInputs(ctx, known)
	stats.Inputs = inputs.read
	if err != nil {
		return stats, err
	}
	registry, remote, err := w.reconcileRegistry(ctx, known)
	stats.Clusters = registry.read
	if err != nil {
		return stats, err
	}
	requeue, err := w.dropRevoked(ctx, remote, append(inputs.requeue, registry.requeue...))
	if err != nil {
		return stats, err
	}
	outputs, err := w.reconcileOutputs(ctx, slices.Sorted(maps.Keys(known)))
	if err != nil {
		return stats, err
	}
	stats.Outputs = outputs.read
	requeue = append(requeue, outputs.requeue...)
	ca, err := w.reconcileCA(ctx)
	if err != nil {
		return stats, err
	}
	requeue = append(requeue, ca...)

	stats.Queued = len(requeue)
	if len(requeue) > 0 {
		w.queue.add(requeue...)
	}
	return stats, nil
}

// reconcileInputs copies the backing store's inputs into memory, where the
// primary's version rule keeps the newer of the two, and returns the
// inputs memory holds newer or alone. It adds both sides' clusters to
// known. Inputs stay encoded as the backing store read them where memory
// keeps them so (encodedInputs): a damaged one is then an error of its
// cluster when first read, not of the whole Load.
func (w *WriteThrough) reconcileInputs(ctx context.Context, known map[string]bool) (reconciled, error) {
	octx, cancel := w.op(ctx)
	remote, err := ListEncodedInputs(octx, w.backing)
	cancel()
	if err != nil {
		return reconciled{}, fmt.Errorf("list inputs: %w", err)
	}
	res := reconciled{read: len(remote)}
	for name, e := range remote {
		known[name] = true
		if err := w.copyInput(ctx, name, e); err != nil {
			return res, fmt.Errorf("copy input %q: %w", name, err)
		}
	}
	local, err := ListEncodedInputs(ctx, w.primary)
	if err != nil {
		return res, fmt.Errorf("list inputs in memory: %w", err)
	}
	for name, e := range local {
		known[name] = true
		if r, ok := remote[name]; !ok || e.Version() > r.Version() {
			res.requeue = append(res.requeue, inputKey(name))
		}
	}
	return res, nil
}

// copyInput copies an input read from the backing store into memory, as
// it was read where memory keeps inputs encoded, else decoded.
func (w *WriteThrough) copyInput(ctx context.Context, cluster string, e *Encoded) error {
	if p, ok := w.primary.(encodedInputs); ok {
		return p.PutEncodedInput(ctx, cluster, e)
	}
	s, err := e.Snapshot()
	if err != nil {
		return err
	}
	return w.primary.PutInput(ctx, cluster, s)
}

// encodedInputs is a primary store that keeps inputs as the backing store
// read them, decoded when first read (memory.Store).
type encodedInputs interface {
	// PutEncodedInput is PutInput of an Encoded.
	PutEncodedInput(ctx context.Context, cluster string, e *Encoded) error
}

// reconcileRegistry copies the backing store's registry records into
// memory, unless a write of memory's is queued, and returns the records
// only memory holds, and the backing store's records. It adds memory's
// clusters to known.
func (w *WriteThrough) reconcileRegistry(ctx context.Context, known map[string]bool) (reconciled, []Cluster, error) {
	octx, cancel := w.op(ctx)
	remote, err := w.backing.ListClusters(octx)
	cancel()
	if err != nil {
		return reconciled{}, nil, fmt.Errorf("list clusters: %w", err)
	}
	res := reconciled{read: len(remote)}
	seen := make(map[string]bool, len(remote))
	for _, c := range remote {
		seen[c.Name] = true
		if w.queue.has(clusterKey(c.Name)) {
			continue
		}
		if err := w.copyCluster(ctx, c); err != nil {
			return res, nil, fmt.Errorf("copy cluster %q: %w", c.Name, err)
		}
	}
	local, err := w.primary.ListClusters(ctx)
	if err != nil {
		return res, nil, fmt.Errorf("list clusters in memory: %w", err)
	}
	for _, c := range local {
		known[c.Name] = true
		if !seen[c.Name] {
			res.requeue = append(res.requeue, clusterKey(c.Name))
		}
	}
	return res, remote, nil
}

// reconcileCA copies the backing store's CA into memory unless a write of
// memory's is queued, and returns memory's to queue when the backing store
// has none.
func (w *WriteThrough) reconcileCA(ctx context.Context) ([]pendingKey, error) {
	octx, cancel := w.op(ctx)
	cert, key, err := w.backing.GetCA(octx)
	cancel()
	switch {
	case err == nil:
		if w.queue.has(caKey) {
			return nil, nil
		}
		if err := w.primary.PutCA(ctx, cert, key); err != nil {
			return nil, fmt.Errorf("copy ca: %w", err)
		}
	case errors.Is(err, ErrNotFound):
		if _, _, err := w.primary.GetCA(ctx); err == nil {
			return []pendingKey{caKey}, nil
		}
	default:
		return nil, fmt.Errorf("get ca: %w", err)
	}
	return nil, nil
}

// dropRevoked removes from memory the inputs and outputs of the clusters
// whose record in the backing store is revoked, and from requeue their
// queued writes: another replica deregistered them, and writing them back
// would undo that.
func (w *WriteThrough) dropRevoked(ctx context.Context, remote []Cluster, requeue []pendingKey) ([]pendingKey, error) {
	revoked := map[string]bool{}
	for _, c := range remote {
		if !c.Revoked {
			continue
		}
		revoked[c.Name] = true
		if err := w.primary.DeleteInput(ctx, c.Name); err != nil {
			return requeue, fmt.Errorf("drop input of revoked %q: %w", c.Name, err)
		}
		if err := w.primary.DeleteOutputs(ctx, c.Name); err != nil {
			return requeue, fmt.Errorf("drop outputs of revoked %q: %w", c.Name, err)
		}
	}
	return slices.DeleteFunc(requeue, func(k pendingKey) bool {
		return k.kind != pendingCluster && revoked[k.cluster]
	}), nil
}

// outputsOfLister is a backing store that reads many clusters' outputs at
// once, as redis.Store.ListOutputsOf does in one pipeline: a cold start of
// thousands of clusters then does not wait for a round trip per cluster.
type outputsOfLister interface {
	// ListOutputsOf returns each cluster's outputs by backend, an empty
	// map for a cluster without any, as ListOutputs would, kept encoded
	// until read.
	ListOutputsOf(ctx context.Context, clusters []string) (map[string]map[string]*Encoded, error)
}

// outputsBatch is how many clusters' outputs reconcileOutputs reads in one
// ListOutputsOf.
const outputsBatch = 256

// reconcileOutputs copies the backing store's outputs of the named clusters
// into memory, LoadParallelism clusters (or batches of clusters, when the
// backing store reads many at once) at a time, and returns the outputs
// only memory holds, or holds otherwise, that this replica wrote itself.
func (w *WriteThrough) reconcileOutputs(ctx context.Context, clusters []string) (reconciled, error) {
	var (
		mu   sync.Mutex
		res  reconciled
		errs []error
		wg   sync.WaitGroup
		sem  = make(chan struct{}, w.opts.LoadParallelism)
	)
	read := w.readOutputs
	step := 1
	if _, ok := w.backing.(outputsOfLister); ok {
		step = outputsBatch
	}
	for part := range slices.Chunk(clusters, step) {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			remote, err := read(ctx, part)
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				return
			}
			for _, name := range part {
				n, requeue, err := w.reconcileCluster(ctx, name, remote[name])
				mu.Lock()
				res.read += n
				res.requeue = append(res.requeue, requeue...)
				if err != nil {
					errs = append(errs, err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return res, errors.Join(errs...)
}

// readOutputs reads the backing store's outputs of clusters, by cluster:
// in one call when it reads many at once, else one cluster at a time.
func (w *WriteThrough) readOutputs(ctx context.Context, clusters []string) (map[string]map[string]*Encoded, error) {
	octx, cancel := w.op(ctx)
	defer cancel()
	if l, ok := w.backing.(outputsOfLister); ok {
		all, err := l.ListOutputsOf(octx, clusters)
		if err != nil {
			return nil, fmt.Errorf("list outputs of %d clusters from %q: %w", len(clusters), clusters[0], err)
		}
		return all, nil
	}
	all := make(map[string]map[string]*Encoded, len(clusters))
	for _, name := range clusters {
		remote, err := w.backing.ListOutputs(octx, name)
		if err != nil {
			return nil, fmt.Errorf("list outputs %q: %w", name, err)
		}
		all[name] = DecodedAll(remote)
	}
	return all, nil
}

// reconcileCluster copies a cluster's outputs read from the backing store
// (remote) into memory, and returns how many it read and the outputs to
// queue for the backing store.
func (w *WriteThrough) reconcileCluster(ctx context.Context, name string, remote map[string]*Encoded) (int, []pendingKey, error) {
	for backend, s := range remote {
		if w.queue.has(outputsDeletedKey(name)) {
			continue
		}
		if _, err := w.copyOutput(ctx, name, backend, s); err != nil {
			return 0, nil, fmt.Errorf("copy output %q/%q: %w", name, backend, err)
		}
	}
	local, err := w.primaryOutputsOf(ctx, name)
	if err != nil {
		return 0, nil, fmt.Errorf("list outputs %q in memory: %w", name, err)
	}
	// Only this replica's own writes go back: a copy of another
	// replica's may be older than what its writer holds (see own).
	var requeue []pendingKey
	for backend, s := range local {
		r, ok := remote[backend]
		if (!ok || r.Version() != s.Version() || r.Hash() != s.Hash()) && w.owns(outputKey(name, backend), s) {
			requeue = append(requeue, outputKey(name, backend))
		}
	}
	return len(remote), requeue, nil
}
