package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
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
// writes through to a backing (Redis) store, as docs/architecture.md describes
// ask.
//
// Every method acts on the primary and returns at once; writes are then
// queued for the backing store, coalesced per key (only the latest value of
// an input, output, registry record or the CA is written, read from the
// primary when it is flushed). Run flushes the queue in order, retries with
// backoff when the backing store fails, and reports HealthDegraded until it
// succeeds again. Run also follows the backing store's change feed: other
// replicas' writes are copied into the primary before they are passed on to
// this store's watchers.
//
// When the backing store comes back after a failure (its feed sends
// EventResync), Run reconciles both ways: what the backing store holds newer
// is copied into memory, and what only memory holds, or holds newer, is
// queued again, so that a Redis that restarted empty is refilled; inputs
// are never lost. A deregistration made by another replica meanwhile is
// not undone: the inputs and outputs of a cluster whose registry record in
// the backing store is revoked are dropped from memory instead of queued,
// and a queued write of them is dropped when it is flushed (see write). A
// registry record is never written over a newer version of itself.
type WriteThrough struct {
	// clusterMu orders the copies of registry records into memory, so
	// that an older record never replaces a newer one (see copyCluster).
	clusterMu        sync.Mutex
	primary, backing Store
	opts             WriteThroughOptions
	logger           *slog.Logger
	hub              *feed.Hub[Event]

	wake    chan struct{} // signals Run that the queue grew
	closing chan struct{} // closed by Close

	// watch subscribes to the backing store's feed for as long as the
	// WriteThrough is open; Load subscribes before it reads, so that
	// nothing written meanwhile is missed, and Run takes over the channel.
	watch     func() (<-chan Event, error)
	stopWatch context.CancelFunc

	mu      sync.Mutex
	seq     uint64
	pending map[pendingKey]uint64 // key → sequence number of its last write
	events  <-chan Event          // subscribed by Load, taken by Run
	state   string
	lastErr error
	closed  bool
}

var _ Store = (*WriteThrough)(nil)

type pendingKind int

const (
	pendingInput pendingKind = iota + 1
	pendingOutput
	pendingOutputsDeleted
	pendingCluster
	pendingCA
)

// pendingKey names one queued write. Values are not queued: they are read
// from the primary when flushed.
type pendingKey struct {
	kind    pendingKind
	cluster string
	backend string
}

func (k pendingKey) String() string {
	switch k.kind {
	case pendingInput:
		return fmt.Sprintf("input %q", k.cluster)
	case pendingOutput:
		return fmt.Sprintf("output %q/%q", k.cluster, k.backend)
	case pendingOutputsDeleted:
		return fmt.Sprintf("deletion of outputs %q", k.cluster)
	case pendingCluster:
		return fmt.Sprintf("cluster %q", k.cluster)
	case pendingCA:
		return "ca"
	}
	return "unknown"
}

// NewWriteThrough returns a WriteThrough over primary (normally a
// *memory.Store) and backing (normally a *redis.Store). It owns both: Close
// closes them. Call Load to fill memory, then Run.
func NewWriteThrough(primary, backing Store, opts WriteThroughOptions) *WriteThrough {
	opts.setDefaults()
	watchCtx, stopWatch := context.WithCancel(context.Background())
	return &WriteThrough{
		watch:     func() (<-chan Event, error) { return backing.Watch(watchCtx) },
		stopWatch: stopWatch,
		primary:   primary,
		backing:   backing,
		opts:      opts,
		logger:    opts.Logger.With("store", "write-through"),
		hub:       feed.New(Event{Kind: EventResync}, ErrClosed),
		wake:      make(chan struct{}, 1),
		closing:   make(chan struct{}),
		pending:   make(map[pendingKey]uint64),
		state:     HealthOK,
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
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.pending)
}

func (w *WriteThrough) setHealth(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.closed:
		// Failures after Close are the closed stores, not the backing one.
	case err == nil && w.state != HealthOK:
		w.logger.Info("backing store recovered", "queued", len(w.pending))
		w.state, w.lastErr = HealthOK, nil
	case err != nil && w.state != HealthDegraded:
		w.logger.Warn("backing store failed; serving from memory", "err", err, "queued", len(w.pending))
		w.state, w.lastErr = HealthDegraded, err
	case err != nil:
		w.lastErr = err
	}
}

// enqueue queues keys after the primary accepted a write.
func (w *WriteThrough) enqueue(keys ...pendingKey) {
	w.mu.Lock()
	for _, k := range keys {
		w.seq++
		w.pending[k] = w.seq
	}
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *WriteThrough) isPending(k pendingKey) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.pending[k]
	return ok
}

// PutInput implements Store.
func (w *WriteThrough) PutInput(ctx context.Context, cluster string, s *snapshot.Snapshot) error {
	if err := w.primary.PutInput(ctx, cluster, s); err != nil {
		return err
	}
	w.enqueue(pendingKey{kind: pendingInput, cluster: cluster})
	return nil
}

// GetInput implements Store.
func (w *WriteThrough) GetInput(ctx context.Context, cluster string) (*snapshot.Snapshot, error) {
	return w.primary.GetInput(ctx, cluster)
}

// ListInputs implements Store.
func (w *WriteThrough) ListInputs(ctx context.Context) (map[string]*snapshot.Snapshot, error) {
	return w.primary.ListInputs(ctx)
}

// DeleteInput implements Store.
func (w *WriteThrough) DeleteInput(ctx context.Context, cluster string) error {
	if err := w.primary.DeleteInput(ctx, cluster); err != nil {
		return err
	}
	w.enqueue(pendingKey{kind: pendingInput, cluster: cluster})
	return nil
}

// PutOutput implements Store.
func (w *WriteThrough) PutOutput(ctx context.Context, cluster, backend string, s *snapshot.Snapshot) error {
	if err := w.primary.PutOutput(ctx, cluster, backend, s); err != nil {
		return err
	}
	w.enqueue(pendingKey{kind: pendingOutput, cluster: cluster, backend: backend})
	return nil
}

// GetOutput implements Store.
func (w *WriteThrough) GetOutput(ctx context.Context, cluster, backend string) (*snapshot.Snapshot, error) {
	return w.primary.GetOutput(ctx, cluster, backend)
}

// ListOutputs implements Store.
func (w *WriteThrough) ListOutputs(ctx context.Context, cluster string) (map[string]*snapshot.Snapshot, error) {
	return w.primary.ListOutputs(ctx, cluster)
}

// DeleteOutputs implements Store. Queued writes of the cluster's outputs are
// dropped: the deletion supersedes them.
func (w *WriteThrough) DeleteOutputs(ctx context.Context, cluster string) error {
	if err := w.primary.DeleteOutputs(ctx, cluster); err != nil {
		return err
	}
	w.mu.Lock()
	for k := range w.pending {
		if k.kind == pendingOutput && k.cluster == cluster {
			delete(w.pending, k)
		}
	}
	w.mu.Unlock()
	w.enqueue(pendingKey{kind: pendingOutputsDeleted, cluster: cluster})
	return nil
}

// PutCluster implements Store.
func (w *WriteThrough) PutCluster(ctx context.Context, c Cluster) error {
	if err := w.primary.PutCluster(ctx, c); err != nil {
		return err
	}
	w.enqueue(pendingKey{kind: pendingCluster, cluster: c.Name})
	return nil
}

// CompareAndPutCluster implements Store. Registry changes are checked and
// written in the backing store itself, which every replica shares, and
// copied into memory after: a revocation can be neither lost to nor
// overwritten by another replica's change. While the backing store is
// unreachable, registry changes fail (reads keep working from memory). On a
// conflict, the backing store's record is copied into memory so that the
// caller's next read sees it.
func (w *WriteThrough) CompareAndPutCluster(ctx context.Context, c Cluster) (Cluster, error) {
	octx, cancel := context.WithTimeout(ctx, w.opts.OpTimeout)
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

// copyCluster stores a record read from the backing store in memory
// unless memory already holds a newer version of it: copies made by the
// change feed, a reload and this replica's own writes may finish in any
// order, and a stale copy must not undo a revocation.
func (w *WriteThrough) copyCluster(ctx context.Context, c Cluster) error {
	w.clusterMu.Lock()
	defer w.clusterMu.Unlock()
	if cur, err := w.primary.GetCluster(ctx, c.Name); err == nil && cur.Version > c.Version {
		return nil
	}
	return w.primary.PutCluster(ctx, c)
}

// GetCluster implements Store.
func (w *WriteThrough) GetCluster(ctx context.Context, name string) (Cluster, error) {
	return w.primary.GetCluster(ctx, name)
}

// ListClusters implements Store.
func (w *WriteThrough) ListClusters(ctx context.Context) ([]Cluster, error) {
	return w.primary.ListClusters(ctx)
}

// DeleteCluster implements Store.
func (w *WriteThrough) DeleteCluster(ctx context.Context, name string) error {
	if err := w.primary.DeleteCluster(ctx, name); err != nil {
		return err
	}
	w.enqueue(pendingKey{kind: pendingCluster, cluster: name})
	return nil
}

// PutCA implements Store.
func (w *WriteThrough) PutCA(ctx context.Context, certPEM, keyPEM []byte) error {
	if err := w.primary.PutCA(ctx, certPEM, keyPEM); err != nil {
		return err
	}
	w.enqueue(pendingKey{kind: pendingCA})
	return nil
}

// GetCA implements Store.
func (w *WriteThrough) GetCA(ctx context.Context) (certPEM, keyPEM []byte, err error) {
	return w.primary.GetCA(ctx)
}

// PutTrust implements Store. Trust state is written to the backing store
// first and synchronously: a rotation advances only once every replica can
// read where it is, so while the backing store is down it waits.
func (w *WriteThrough) PutTrust(ctx context.Context, name string, data []byte) error {
	if err := w.backing.PutTrust(ctx, name, data); err != nil {
		return err
	}
	return w.primary.PutTrust(ctx, name, data)
}

// GetTrust implements Store: from the backing store, which replicas share,
// else from memory while it is unreachable.
func (w *WriteThrough) GetTrust(ctx context.Context, name string) ([]byte, error) {
	data, err := w.backing.GetTrust(ctx, name)
	if err == nil || errors.Is(err, ErrNotFound) {
		return data, err
	}
	return w.primary.GetTrust(ctx, name)
}

// Watch implements Store: it delivers the backing store's events (other
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

func (w *WriteThrough) op(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, w.opts.OpTimeout)
}

func (w *WriteThrough) reconcile(ctx context.Context) (LoadStats, error) {
	var stats LoadStats

	// Inputs: the primary's version rule keeps the newer of the two.
	octx, cancel := w.op(ctx)
	remote, err := w.backing.ListInputs(octx)
	cancel()
	if err != nil {
		return stats, fmt.Errorf("list inputs: %w", err)
	}
	stats.Inputs = len(remote)
	for name, s := range remote {
		if err := w.primary.PutInput(ctx, name, s); err != nil {
			return stats, fmt.Errorf("copy input %q: %w", name, err)
		}
	}
	local, err := w.primary.ListInputs(ctx)
	if err != nil {
		return stats, fmt.Errorf("list inputs in memory: %w", err)
	}
	var requeue []pendingKey
	for name, s := range local {
		if r, ok := remote[name]; !ok || s.Version() > r.Version() {
			requeue = append(requeue, pendingKey{kind: pendingInput, cluster: name})
		}
	}

	// Registry: the backing store wins unless a local write is queued.
	octx, cancel = w.op(ctx)
	remoteClusters, err := w.backing.ListClusters(octx)
	cancel()
	if err != nil {
		return stats, fmt.Errorf("list clusters: %w", err)
	}
	stats.Clusters = len(remoteClusters)
	seen := make(map[string]bool, len(remoteClusters))
	for _, c := range remoteClusters {
		seen[c.Name] = true
		if w.isPending(pendingKey{kind: pendingCluster, cluster: c.Name}) {
			continue
		}
		if err := w.copyCluster(ctx, c); err != nil {
			return stats, fmt.Errorf("copy cluster %q: %w", c.Name, err)
		}
	}
	localClusters, err := w.primary.ListClusters(ctx)
	if err != nil {
		return stats, fmt.Errorf("list clusters in memory: %w", err)
	}
	for _, c := range localClusters {
		if !seen[c.Name] {
			requeue = append(requeue, pendingKey{kind: pendingCluster, cluster: c.Name})
		}
	}
	requeue, err = w.dropRevoked(ctx, remoteClusters, requeue)
	if err != nil {
		return stats, err
	}

	// Outputs of every cluster either side knows.
	names := make(map[string]bool)
	for name := range remote {
		names[name] = true
	}
	for name := range local {
		names[name] = true
	}
	for _, c := range localClusters {
		names[c.Name] = true
	}
	outs, err := w.reconcileOutputs(ctx, slices.Sorted(maps.Keys(names)))
	if err != nil {
		return stats, err
	}
	stats.Outputs = outs.read
	requeue = append(requeue, outs.requeue...)

	// CA.
	octx, cancel = w.op(ctx)
	cert, key, err := w.backing.GetCA(octx)
	cancel()
	switch {
	case err == nil:
		if !w.isPending(pendingKey{kind: pendingCA}) {
			if err := w.primary.PutCA(ctx, cert, key); err != nil {
				return stats, fmt.Errorf("copy ca: %w", err)
			}
		}
	case errors.Is(err, ErrNotFound):
		if _, _, err := w.primary.GetCA(ctx); err == nil {
			requeue = append(requeue, pendingKey{kind: pendingCA})
		}
	default:
		return stats, fmt.Errorf("get ca: %w", err)
	}

	stats.Queued = len(requeue)
	if len(requeue) > 0 {
		w.enqueue(requeue...)
	}
	return stats, nil
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

type outputsResult struct {
	read    int
	requeue []pendingKey
}

// reconcileOutputs copies the backing store's outputs of the named clusters
// into memory, LoadParallelism clusters at a time, and returns the outputs
// only memory holds.
func (w *WriteThrough) reconcileOutputs(ctx context.Context, clusters []string) (outputsResult, error) {
	var (
		mu   sync.Mutex
		res  outputsResult
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
		if w.isPending(pendingKey{kind: pendingOutput, cluster: name, backend: backend}) ||
			w.isPending(pendingKey{kind: pendingOutputsDeleted, cluster: name}) {
			continue
		}
		if err := w.primary.PutOutput(ctx, name, backend, s); err != nil {
			return 0, nil, fmt.Errorf("copy output %q/%q: %w", name, backend, err)
		}
	}
	local, err := w.primary.ListOutputs(ctx, name)
	if err != nil {
		return 0, nil, fmt.Errorf("list outputs %q in memory: %w", name, err)
	}
	var requeue []pendingKey
	for backend, s := range local {
		if r, ok := remote[backend]; !ok || r.Version() != s.Version() || r.Hash() != s.Hash() {
			requeue = append(requeue, pendingKey{kind: pendingOutput, cluster: name, backend: backend})
		}
	}
	return len(remote), requeue, nil
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
	wg.Go(func() { w.flushLoop(ctx) })
	wg.Go(func() { w.followLoop(ctx) })
	wg.Wait()
	return nil
}

// Flush writes every queued key to the backing store once, in order, and
// returns the first failure; Run does the same with retries.
func (w *WriteThrough) Flush(ctx context.Context) error {
	w.mu.Lock()
	batch := make([]pendingKey, 0, len(w.pending))
	for k := range w.pending {
		batch = append(batch, k)
	}
	seqs := maps.Clone(w.pending)
	w.mu.Unlock()
	slices.SortFunc(batch, func(a, b pendingKey) int { return cmp.Compare(seqs[a], seqs[b]) })
	for _, k := range batch {
		if err := w.write(ctx, k); err != nil {
			return fmt.Errorf("write %s to backing store: %w", k, err)
		}
		w.mu.Lock()
		if w.pending[k] == seqs[k] {
			delete(w.pending, k)
		}
		w.mu.Unlock()
	}
	return nil
}

// write copies one key's current value from the primary to the backing
// store, or deletes it there when the primary has none.
func (w *WriteThrough) write(ctx context.Context, k pendingKey) error {
	octx, cancel := w.op(ctx)
	defer cancel()
	switch k.kind {
	case pendingInput:
		s, err := w.primary.GetInput(ctx, k.cluster)
		if errors.Is(err, ErrNotFound) {
			return w.backing.DeleteInput(octx, k.cluster)
		}
		if err != nil {
			return err
		}
		return w.writeUnlessRevoked(ctx, octx, k.cluster, func() error { return w.backing.PutInput(octx, k.cluster, s) })
	case pendingOutput:
		s, err := w.primary.GetOutput(ctx, k.cluster, k.backend)
		if errors.Is(err, ErrNotFound) {
			return nil // deleted since: a queued deletion of all outputs follows
		}
		if err != nil {
			return err
		}
		return w.writeUnlessRevoked(ctx, octx, k.cluster, func() error { return w.backing.PutOutput(octx, k.cluster, k.backend, s) })
	case pendingOutputsDeleted:
		return w.backing.DeleteOutputs(octx, k.cluster)
	case pendingCluster:
		return w.writeCluster(ctx, octx, k.cluster)
	case pendingCA:
		cert, key, err := w.primary.GetCA(ctx)
		if errors.Is(err, ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		return w.backing.PutCA(octx, cert, key)
	}
	return fmt.Errorf("unknown queued write %d", k.kind)
}

// writeUnlessRevoked runs put, which writes an input or output of cluster
// to the backing store, unless the cluster's record there is revoked. A
// deregistration revokes the record, then deletes the inputs and outputs:
// reading the record again after put tells whether that deletion may have
// come before put, and then the write is deleted again. Either way, a
// revoked cluster's inputs and outputs also leave memory.
func (w *WriteThrough) writeUnlessRevoked(ctx, octx context.Context, cluster string, put func() error) error {
	revoked, err := w.backingRevoked(octx, cluster)
	if err != nil {
		return err
	}
	if revoked {
		return w.dropRevokedLocally(ctx, cluster)
	}
	if err := put(); err != nil {
		return err
	}
	if revoked, err = w.backingRevoked(octx, cluster); err != nil || !revoked {
		return err
	}
	w.logger.Info("cluster deregistered by another replica while its write was queued; dropping it", "cluster", cluster)
	return errors.Join(w.backing.DeleteInput(octx, cluster), w.backing.DeleteOutputs(octx, cluster), w.dropRevokedLocally(ctx, cluster))
}

// backingRevoked reports whether cluster's record in the backing store is
// revoked.
func (w *WriteThrough) backingRevoked(ctx context.Context, cluster string) (bool, error) {
	c, err := w.backing.GetCluster(ctx, cluster)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	return err == nil && c.Revoked, err
}

// dropRevokedLocally removes a revoked cluster's input and outputs from
// memory without queuing anything.
func (w *WriteThrough) dropRevokedLocally(ctx context.Context, cluster string) error {
	return errors.Join(w.primary.DeleteInput(ctx, cluster), w.primary.DeleteOutputs(ctx, cluster))
}

// writeCluster copies a registry record from memory to the backing store
// (a backing store that restarted empty is refilled this way), unless the
// backing store holds the same or a newer version, which it copies into
// memory instead: another replica's revocation must survive.
func (w *WriteThrough) writeCluster(ctx, octx context.Context, name string) error {
	c, err := w.primary.GetCluster(ctx, name)
	if errors.Is(err, ErrNotFound) {
		return w.backing.DeleteCluster(octx, name)
	}
	if err != nil {
		return err
	}
	cur, err := w.backing.GetCluster(octx, name)
	switch {
	case err == nil && cur.Version >= c.Version:
		return w.copyCluster(ctx, cur)
	case err != nil && !errors.Is(err, ErrNotFound):
		return err
	}
	return w.backing.PutCluster(octx, c)
}

func (w *WriteThrough) flushLoop(ctx context.Context) {
	backoff := w.opts.MinBackoff
	ping := time.NewTicker(w.opts.PingInterval)
	defer ping.Stop()
	for {
		if w.QueueLen() > 0 {
			err := w.Flush(ctx)
			if ctx.Err() != nil {
				return
			}
			w.setHealth(err)
			if err != nil {
				if !sleep(ctx, backoff) {
					return
				}
				backoff = min(2*backoff, w.opts.MaxBackoff)
				continue
			}
			backoff = w.opts.MinBackoff
			continue
		}
		select {
		case <-w.wake:
		case <-ping.C:
			pctx, cancel := w.op(ctx)
			err := w.backing.Ping(pctx)
			cancel()
			if ctx.Err() != nil {
				return
			}
			w.setHealth(err)
		case <-ctx.Done():
			return
		}
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// followLoop copies other replicas' writes into memory and passes their
// events on. It subscribes before it reloads, so nothing is missed between
// the two; the subscription Load made needs no reload.
func (w *WriteThrough) followLoop(ctx context.Context) {
	backoff := w.opts.MinBackoff
	for ctx.Err() == nil {
		w.mu.Lock()
		events := w.events
		w.events = nil
		w.mu.Unlock()
		if events == nil {
			var err error
			events, err = w.watch()
			if err != nil {
				if errors.Is(err, ErrClosed) || ctx.Err() != nil {
					return
				}
				w.setHealth(err)
				if !sleep(ctx, backoff) {
					return
				}
				backoff = min(2*backoff, w.opts.MaxBackoff)
				continue
			}
			w.apply(ctx, Event{Kind: EventResync})
		}
		backoff = w.opts.MinBackoff
		for {
			select {
			case e, ok := <-events:
				if !ok {
					events = nil
				} else {
					w.apply(ctx, e)
				}
			case <-ctx.Done():
				return
			}
			if events == nil {
				break
			}
		}
	}
}

// apply copies the change e announces into memory, then publishes e. When
// the backing store cannot be read it reconciles everything instead.
func (w *WriteThrough) apply(ctx context.Context, e Event) {
	if e.Kind != EventResync {
		err := w.applyOne(ctx, e)
		if err == nil {
			w.hub.Publish(e)
			return
		}
		if ctx.Err() != nil {
			return
		}
		w.logger.Warn("copy a change from the backing store; reloading everything", "cluster", e.Cluster, "kind", e.Kind.String(), "err", err)
	}
	backoff := w.opts.MinBackoff
	for {
		_, err := w.reconcile(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		w.setHealth(err)
		if !sleep(ctx, backoff) {
			return
		}
		backoff = min(2*backoff, w.opts.MaxBackoff)
	}
	w.hub.Publish(Event{Kind: EventResync, Replica: e.Replica})
}

func (w *WriteThrough) applyOne(ctx context.Context, e Event) error {
	octx, cancel := w.op(ctx)
	defer cancel()
	switch e.Kind {
	case EventInput:
		s, err := w.backing.GetInput(octx, e.Cluster)
		if errors.Is(err, ErrNotFound) {
			if w.isPending(pendingKey{kind: pendingInput, cluster: e.Cluster}) {
				return nil
			}
			return w.primary.DeleteInput(ctx, e.Cluster)
		}
		if err != nil {
			return err
		}
		return w.primary.PutInput(ctx, e.Cluster, s)
	case EventOutput:
		if w.isPending(pendingKey{kind: pendingOutputsDeleted, cluster: e.Cluster}) {
			return nil
		}
		if e.Backend == "" {
			return w.primary.DeleteOutputs(ctx, e.Cluster)
		}
		if w.isPending(pendingKey{kind: pendingOutput, cluster: e.Cluster, backend: e.Backend}) {
			return nil
		}
		s, err := w.backing.GetOutput(octx, e.Cluster, e.Backend)
		if errors.Is(err, ErrNotFound) {
			return nil // deleted since; that deletion's event follows
		}
		if err != nil {
			return err
		}
		return w.primary.PutOutput(ctx, e.Cluster, e.Backend, s)
	case EventCluster:
		if w.isPending(pendingKey{kind: pendingCluster, cluster: e.Cluster}) {
			return nil
		}
		c, err := w.backing.GetCluster(octx, e.Cluster)
		if errors.Is(err, ErrNotFound) {
			return w.primary.DeleteCluster(ctx, e.Cluster)
		}
		if err != nil {
			return err
		}
		return w.copyCluster(ctx, c)
	}
	return nil
}
