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
// known.
func (w *WriteThrough) reconcileInputs(ctx context.Context, known map[string]bool) (reconciled, error) {
	octx, cancel := w.op(ctx)
	remote, err := w.backing.ListInputs(octx)
	cancel()
	if err != nil {
		return reconciled{}, fmt.Errorf("list inputs: %w", err)
	}
	res := reconciled{read: len(remote)}
	for name, s := range remote {
		known[name] = true
		if err := w.primary.PutInput(ctx, name, s); err != nil {
			return res, fmt.Errorf("copy input %q: %w", name, err)
		}
	}
	local, err := w.primary.ListInputs(ctx)
	if err != nil {
		return res, fmt.Errorf("list inputs in memory: %w", err)
	}
	for name, s := range local {
		known[name] = true
		if r, ok := remote[name]; !ok || s.Version() > r.Version() {
			res.requeue = append(res.requeue, inputKey(name))
		}
	}
	return res, nil
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

// reconcileOutputs copies the backing store's outputs of the named clusters
// into memory, LoadParallelism clusters at a time, and returns the outputs
// only memory holds, or holds otherwise, that this replica wrote itself.
func (w *WriteThrough) reconcileOutputs(ctx context.Context, clusters []string) (reconciled, error) {
	var (
		mu   sync.Mutex
		res  reconciled
		errs []error
		wg   sync.WaitGroup
		sem  = make(chan struct{}, w.opts.LoadParallelism)
	)
	for _, name := range clusters {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			read, requeue, err := w.reconcileCluster(ctx, name)
			mu.Lock()
			defer mu.Unlock()
			res.read += read
			res.requeue = append(res.requeue, requeue...)
			if err != nil {
				errs = append(errs, err)
			}
		})
	}
	wg.Wait()
	return res, errors.Join(errs...)
}

func (w *WriteThrough) reconcileCluster(ctx context.Context, name string) (int, []pendingKey, error) {
	octx, cancel := w.op(ctx)
	defer cancel()
	remote, err := w.backing.ListOutputs(octx, name)
	if err != nil {
		return 0, nil, fmt.Errorf("list outputs %q: %w", name, err)
	}
	for backend, s := range remote {
		if w.queue.has(outputsDeletedKey(name)) {
			continue
		}
		if _, err := w.copyOutput(ctx, name, backend, s); err != nil {
			return 0, nil, fmt.Errorf("copy output %q/%q: %w", name, backend, err)
		}
	}
	local, err := w.primary.ListOutputs(ctx, name)
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
