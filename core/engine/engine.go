package engine

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	discoveryapi "github.com/meshrelay/meshrelay/api/discovery/v1alpha1"
	"github.com/meshrelay/meshrelay/api/meta"
	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/pluginhost"
	"golang.org/x/sync/errgroup"
)

// OutputKey names one output: a backend's resources for one cluster.
type OutputKey struct {
	Cluster, Backend string
}

// String returns "cluster/backend".
func (k OutputKey) String() string { return k.Cluster + "/" + k.Backend }

// Output is a changed output handed on by the engine.
type Output struct {
	Key OutputKey
	// Snapshot is the complete output; its version increases with every change.
	Snapshot *snapshot.Snapshot
	// Plugin produced it.
	Plugin string
}

// Options configure an Engine.
type Options struct {
	// Debounce is how long the engine waits after a change for more changes
	// before translating. Default 50ms.
	Debounce time.Duration
	// RetryBackoff is the first delay before retrying a failed translator;
	// it doubles up to a minute. Default 500ms.
	RetryBackoff time.Duration
	// View is the fleet to translate. Unset, the engine keeps its own,
	// fed with SetInput, SetStale and RemoveCluster.
	View View
	// Ready, when set, receives every cycle's result from Run, which then
	// calls neither OnOutput nor OnCycle: the receiver delivers the
	// outputs. Run waits for the receiver.
	Ready chan<- Ready
	// OnOutput is called by Cycle, and by Run without Ready, from the
	// engine's goroutine, with every output whose content changed.
	OnOutput func(Output)
	// OnCycle is called after every translation cycle with its statistics
	// (by Cycle, and by Run without Ready).
	OnCycle func(CycleStats)
	// Scoped makes the engine compute outputs only for the clusters made
	// targets with SetTarget, as a server replica does for the clusters
	// whose agents are connected to it. Other clusters' inputs still count.
	Scoped bool
	Logger *slog.Logger
}

// CycleStats describe one translation cycle.
type CycleStats struct {
	// Generation numbers the cycle; it grows by one per cycle.
	Generation      uint64
	Duration        time.Duration
	ChangedClusters int
	PoliciesChanged bool
	// Outputs handed on and their total size in bytes.
	Outputs, Bytes int
	Failed         []string
}

// Ready is what one cycle produced, handed on as data.
type Ready struct {
	// Outputs are the outputs whose content changed, sorted by key.
	Outputs []Output
	Stats   CycleStats
	// Retry is how long to wait before retrying failed translators; 0
	// when every translator succeeded.
	Retry time.Duration
}

func (o *Options) defaults() {
	if o.Debounce <= 0 {
		o.Debounce = 50 * time.Millisecond
	}
	if o.RetryBackoff <= 0 {
		o.RetryBackoff = 500 * time.Millisecond
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.OnOutput == nil {
		o.OnOutput = func(Output) {}
	}
	if o.OnCycle == nil {
		o.OnCycle = func(CycleStats) {}
	}
}

type clusterState struct {
	input  *snapshot.Snapshot
	stale  bool
	meshes []string
	labels map[string]string
}

// translatorState is what one translator has seen and said.
type translatorState struct {
	t        pluginhost.Translator
	seen     map[string]clusterState // what the translator's session holds
	policies *snapshot.Snapshot
	// scope is the target list the translator's session last answered for.
	scope    []string
	diags    []meta.Diagnostic
	lastErr  error
	failedAt time.Time
	backoff  time.Duration
	lastOK   time.Time
	lastCall time.Duration
}

// Engine coalesces input and policy changes and runs translators. All
// methods are safe for concurrent use.
type Engine struct {
	opts Options

	cycleMu sync.Mutex // serializes Step
	// last is the view the last Step read; Step holds cycleMu.
	last map[string]clusterState

	view View
	// mem is the engine's own view when Options.View is unset.
	mem    *memView
	meshes meshCache

	mu          sync.Mutex
	policies    *snapshot.Snapshot
	dirty       bool
	translators []*translatorState
	outputs     map[OutputKey]Output
	// targets are the clusters whose outputs are computed when Scoped.
	targets    map[string]bool
	generation uint64
	wake       chan struct{}
}

// New returns an engine over translators.
func New(translators []pluginhost.Translator, opts Options) *Engine {
	opts.defaults()
	e := &Engine{
		opts:     opts,
		view:     opts.View,
		meshes:   meshCache{byName: map[string]cachedMeshes{}},
		policies: snapshot.Empty,
		outputs:  map[OutputKey]Output{},
		targets:  map[string]bool{},
		wake:     make(chan struct{}, 1),
	}
	if e.view == nil {
		e.mem = &memView{clusters: map[string]memCluster{}}
		e.view = e.mem
	}
	for _, t := range translators {
		e.translators = append(e.translators, &translatorState{t: t, seen: map[string]clusterState{}, policies: snapshot.Empty})
	}
	return e
}

// SetInput records a cluster's latest input snapshot in the engine's own
// view. It panics on an engine that reads Options.View: that view's owner
// changes it and calls Refresh.
func (e *Engine) SetInput(cluster string, s *snapshot.Snapshot) {
	if e.ownView().set(cluster, s) {
		e.Refresh()
	}
}

// SetStale marks a cluster's inputs as stale (its agent is away) or fresh
// in the engine's own view. Stale inputs stay in the fleet view.
func (e *Engine) SetStale(cluster string, stale bool) {
	if e.ownView().setStale(cluster, stale) {
		e.Refresh()
	}
}

// RemoveCluster drops a cluster from the engine's own view, as when it is
// deregistered.
func (e *Engine) RemoveCluster(cluster string) {
	if e.ownView().remove(cluster) {
		e.Refresh()
	}
}

func (e *Engine) ownView() *memView {
	if e.mem == nil {
		panic("engine: SetInput, SetStale and RemoveCluster change the engine's own view; this engine reads Options.View")
	}
	return e.mem
}

// SetTarget makes a cluster a target of a Scoped engine, or stops
// computing its outputs; a cluster that stops being a target loses its
// outputs, so that it is computed afresh when it comes back.
func (e *Engine) SetTarget(cluster string, target bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.targets[cluster] == target {
		return
	}
	if target {
		e.targets[cluster] = true
	} else {
		delete(e.targets, cluster)
	}
	if e.opts.Scoped {
		e.touch()
	}
}

// SetPolicies records the management source's policies.
func (e *Engine) SetPolicies(s *snapshot.Snapshot) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.policies.Hash() == s.Hash() {
		return
	}
	e.policies = s
	e.touch()
}

// touch marks the view dirty and wakes Run. Callers hold e.mu.
func (e *Engine) touch() {
	e.dirty = true
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// Generation returns the number of the last cycle started; a cycle with a
// higher number sees every change made before this call.
func (e *Engine) Generation() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.generation
}

// Refresh asks for a cycle that reads the view again: the owner of
// Options.View calls it after each change (a cluster's input or
// staleness, the fleet's members), and a caller may call it when nothing
// changed to wait for a cycle that sees the current view.
func (e *Engine) Refresh() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.touch()
}

// Output returns the last output handed on for key.
func (e *Engine) Output(key OutputKey) (Output, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	o, ok := e.outputs[key]
	return o, ok
}

// Outputs returns every output of a cluster, by backend.
func (e *Engine) Outputs(cluster string) map[string]Output {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[string]Output{}
	for k, o := range e.outputs {
		if k.Cluster == cluster {
			out[k.Backend] = o
		}
	}
	return out
}

// Run translates whenever the view changes, until ctx ends.
func (e *Engine) Run(ctx context.Context) error {
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-e.wake:
		case <-retry:
		}
		// Coalesce: wait for the debounce window to pass without news.
		timer := time.NewTimer(e.opts.Debounce)
	debounce:
		for {
			select {
			case <-ctx.Done():
				timer.Stop()
				return nil
			case <-e.wake:
				timer.Reset(e.opts.Debounce)
			case <-timer.C:
				break debounce
			}
		}
		retry = nil
		r := e.Step(ctx)
		if e.opts.Ready == nil {
			e.handOn(r)
		} else {
			select {
			case e.opts.Ready <- r:
			case <-ctx.Done():
				return nil
			}
		}
		if r.Retry > 0 {
			retry = time.After(r.Retry)
		}
	}
}

// Cycle runs one translation over the current view and hands on changed
// outputs through OnOutput and OnCycle. It returns how long to wait before
// retrying failed translators, or 0 when every translator succeeded.
func (e *Engine) Cycle(ctx context.Context) time.Duration {
	r := e.Step(ctx)
	e.handOn(r)
	return r.Retry
}

// handOn calls OnOutput with every output of r, then OnCycle.
func (e *Engine) handOn(r Ready) {
	for _, o := range r.Outputs {
		e.opts.OnOutput(o)
	}
	e.opts.OnCycle(r.Stats)
}

// Step runs one translation over the current view and returns what it
// produced; the caller delivers it. Run and Cycle call it.
func (e *Engine) Step(ctx context.Context) Ready {
	e.cycleMu.Lock()
	defer e.cycleMu.Unlock()
	start := time.Now()
	e.mu.Lock()
	e.dirty = false
	e.generation++
	generation := e.generation
	e.mu.Unlock()
	// Read the view after the generation is taken: a change made before
	// a later Generation call is seen by a cycle with a higher number.
	view := e.read(e.last)
	e.last = view
	e.meshes.keep(view)
	e.mu.Lock()
	policies := e.policies
	var scope []string
	if e.opts.Scoped {
		scope = slices.Sorted(maps.Keys(e.targets))
	}
	e.mu.Unlock()

	active := activeBackends(view)
	type outcome struct {
		ts      *translatorState
		result  pluginhost.Result
		err     error
		updated bool
		changed int
		took    time.Duration
	}
	outcomes := make([]outcome, len(e.translators))
	var wait time.Duration // until the first failed translator's retry
	var g errgroup.Group
	for i, ts := range e.translators {
		if !runs(ts.t.Backends(), ts.t.Meshes(), active) && len(ts.seen) == 0 {
			continue
		}
		if left := ts.backoff - time.Since(ts.failedAt); ts.lastErr != nil && left > 0 {
			// Still backing off. This cycle must ask for its retry all the
			// same: Run waits for the retry this cycle returns, not for one
			// an earlier cycle asked for.
			wait = sooner(wait, left)
			continue
		}
		g.Go(func() error {
			u, changed := ts.update(view, policies, e.opts.Scoped, scope)
			u.Accepted = e.accepted
			if !u.Full && changed == 0 && len(u.PolicyUpserts)+len(u.PolicyDeletes) == 0 && slices.Equal(ts.scope, scope) {
				outcomes[i] = outcome{ts: ts}
				return nil
			}
			callStart := time.Now()
			res, err := ts.t.Translate(ctx, u)
			if errors.Is(err, pluginhost.ErrNeedFull) && !u.Full {
				u, changed = ts.updateFull(view, policies, e.opts.Scoped, scope)
				u.Accepted = e.accepted
				res, err = ts.t.Translate(ctx, u)
			}
			outcomes[i] = outcome{ts: ts, result: res, err: err, updated: true, changed: changed, took: time.Since(callStart)}
			return nil
		})
	}
	_ = g.Wait()

	stats := CycleStats{Generation: generation}
	var handOn []Output
	e.mu.Lock()
	for _, oc := range outcomes {
		ts := oc.ts
		if ts == nil || !oc.updated {
			continue
		}
		ts.lastCall = oc.took
		if oc.err != nil {
			// The session may hold a partial update: the retry resends
			// everything (see update).
			ts.lastErr = oc.err
			ts.failedAt = time.Now()
			ts.backoff = min(max(ts.backoff*2, e.opts.RetryBackoff), time.Minute)
			wait = sooner(wait, ts.backoff)
			stats.Failed = append(stats.Failed, ts.t.Name())
			e.opts.Logger.Warn("translator failed; keeping its last outputs", "plugin", ts.t.Name(), "error", oc.err, "retry_in", ts.backoff)
			continue
		}
		ts.commit(view, policies, scope)
		ts.lastErr, ts.backoff, ts.lastOK = nil, 0, time.Now()
		ts.diags = oc.result.Diagnostics
		stats.ChangedClusters = max(stats.ChangedClusters, oc.changed)
		for _, o := range e.take(ts, view, oc.result.Outputs) {
			handOn = append(handOn, o)
			stats.Bytes += o.Snapshot.Size()
		}
	}
	// Clusters that left the fleet, or stopped being targets, lose their outputs.
	for key := range e.outputs {
		if _, ok := view[key.Cluster]; !ok || (e.opts.Scoped && !e.targets[key.Cluster]) {
			delete(e.outputs, key)
		}
	}
	e.mu.Unlock()

	slices.SortFunc(handOn, func(a, b Output) int { return cmp.Compare(a.Key.String(), b.Key.String()) })
	stats.Outputs = len(handOn)
	stats.Duration = time.Since(start)
	return Ready{Outputs: handOn, Stats: stats, Retry: wait}
}

// accepted returns the output the engine holds for cluster and backend,
// or nil: what a translator's answer is checked against.
func (e *Engine) accepted(cluster, backend string) *snapshot.Snapshot {
	e.mu.Lock()
	defer e.mu.Unlock()
	if o, ok := e.outputs[OutputKey{Cluster: cluster, Backend: backend}]; ok {
		return o.Snapshot
	}
	return nil
}

// take records one translator's answer and returns the outputs whose
// content changed, to hand on. A set the engine holds no output of is
// compared with the one delivered before: its cluster's agent may hold an
// output another replica, or this server before a restart, delivered, so
// a set that changed or emptied meanwhile is handed on. Callers hold e.mu.
func (e *Engine) take(ts *translatorState, view map[string]clusterState, outs []pluginhost.ClusterOutput) []Output {
	var changed []Output
	for _, co := range outs {
		key := OutputKey{Cluster: co.Cluster, Backend: co.Backend}
		if _, ok := view[co.Cluster]; !ok {
			e.opts.Logger.Warn("translator emitted output for a cluster not in the fleet; dropped", "plugin", ts.t.Name(), "cluster", co.Cluster)
			continue
		}
		if e.opts.Scoped && !e.targets[co.Cluster] {
			continue // no longer a target: its output would be stale when it comes back
		}
		s, err := snapshot.New(0, co.Resources)
		if err != nil {
			e.opts.Logger.Warn("translator emitted an invalid output; keeping the previous one", "plugin", ts.t.Name(), "cluster", co.Cluster, "backend", co.Backend, "error", err)
			continue
		}
		prev, had := e.previous(key)
		if had && prev.Hash() == s.Hash() {
			if _, ok := e.outputs[key]; !ok {
				e.outputs[key] = Output{Key: key, Snapshot: prev, Plugin: ts.t.Name()} // delivered before
			}
			continue
		}
		if !had && s.Len() == 0 {
			continue
		}
		var version uint64 = 1
		if had {
			version = prev.Version() + 1
		}
		o := Output{Key: key, Snapshot: s.WithVersion(version), Plugin: ts.t.Name()}
		e.outputs[key] = o
		changed = append(changed, o)
	}
	return changed
}

// previous returns the output key had before this answer: the one the
// engine handed on last, or else the one delivered before. Callers hold
// e.mu.
func (e *Engine) previous(key OutputKey) (*snapshot.Snapshot, bool) {
	if o, ok := e.outputs[key]; ok {
		return o.Snapshot, true
	}
	return e.view.Delivered(key.Cluster, key.Backend)
}

// update builds the translator's next update from the view: what changed
// since its session last saw the view, or everything when the last call
// failed (the session may hold part of that update). Whether the session
// itself still holds a view is the translator's to say: it answers
// pluginhost.ErrNeedFull, and the caller sends updateFull. It reports how
// many clusters the update carries.
func (ts *translatorState) update(view map[string]clusterState, policies *snapshot.Snapshot, scoped bool, scope []string) (pluginhost.Update, int) {
	if ts.lastErr != nil {
		return ts.updateFull(view, policies, scoped, scope)
	}
	return ts.build(pluginhost.Update{Scoped: scoped, Targets: scope}, view, policies)
}

// updateFull builds an update that replaces the session's whole view.
func (ts *translatorState) updateFull(view map[string]clusterState, policies *snapshot.Snapshot, scoped bool, scope []string) (pluginhost.Update, int) {
	return ts.build(pluginhost.Update{Full: true, Scoped: scoped, Targets: scope}, view, policies)
}

func (ts *translatorState) build(u pluginhost.Update, view map[string]clusterState, policies *snapshot.Snapshot) (pluginhost.Update, int) {
	seen := ts.seen
	basePolicies := ts.policies
	if u.Full {
		seen = map[string]clusterState{}
		basePolicies = snapshot.Empty
	}
	for _, name := range slices.Sorted(maps.Keys(view)) {
		cs := view[name]
		old, had := seen[name]
		if had && old.input.Hash() == cs.input.Hash() && old.stale == cs.stale && maps.Equal(old.labels, cs.labels) {
			continue
		}
		var base *snapshot.Snapshot = snapshot.Empty
		if had {
			base = old.input
		}
		d := snapshot.Diff(base, cs.input)
		u.Clusters = append(u.Clusters, pluginhost.ClusterUpdate{
			Name: name, Stale: cs.stale, Meshes: cs.meshes, Labels: cs.labels, Upserts: d.Upserts, Deletes: d.Deletes,
		})
	}
	for _, name := range slices.Sorted(maps.Keys(seen)) {
		if _, ok := view[name]; !ok {
			u.Clusters = append(u.Clusters, pluginhost.ClusterUpdate{Name: name, Removed: true})
		}
	}
	pd := snapshot.Diff(basePolicies, policies)
	u.PolicyUpserts, u.PolicyDeletes = pd.Upserts, pd.Deletes
	return u, len(u.Clusters)
}

// commit records that the translator's session now holds the view.
func (ts *translatorState) commit(view map[string]clusterState, policies *snapshot.Snapshot, scope []string) {
	ts.seen = maps.Clone(view)
	ts.policies = policies
	ts.scope = scope
}

// Meshes returns the mesh types found in a cluster's inputs, from the Mesh
// resources discovery computed, sorted.
func Meshes(s *snapshot.Snapshot) []string {
	var out []string
	for r := range s.All() {
		if r.ID.Group != discoveryapi.Group || r.ID.Kind != "Mesh" {
			continue
		}
		var m discoveryapi.Mesh
		if err := r.Decode(&m); err == nil && m.Spec.Type != "" {
			out = append(out, m.Spec.Type)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func activeBackends(view map[string]clusterState) map[string]bool {
	active := map[string]bool{}
	for _, cs := range view {
		for _, m := range cs.meshes {
			active[m] = true
		}
	}
	return active
}

// runs reports whether a translator with these backends has work: one of
// its backends is a mesh found in the fleet, or a backend that does not
// need its mesh (meshes lists those that do): a custom backend such as
// plain NetworkPolicy runs everywhere.
func runs(backends, meshes []string, active map[string]bool) bool {
	for _, b := range backends {
		if active[b] || !slices.Contains(meshes, b) {
			return true
		}
	}
	return false
}

// PluginStatus is one translator's health.
type PluginStatus struct {
	Name     string
	Backends []string
	Healthy  bool
	Error    string
	LastOK   time.Time
	// LastCall is how long the last Translate call took.
	LastCall time.Duration
}

// Status returns every translator's health, by name.
func (e *Engine) Status() []PluginStatus {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []PluginStatus
	for _, ts := range e.translators {
		ps := PluginStatus{Name: ts.t.Name(), Backends: ts.t.Backends(), Healthy: ts.lastErr == nil, LastOK: ts.lastOK, LastCall: ts.lastCall}
		if ts.lastErr != nil {
			ps.Error = ts.lastErr.Error()
		}
		out = append(out, ps)
	}
	slices.SortFunc(out, func(a, b PluginStatus) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// Diagnostics returns the latest diagnostics of every translator, with the
// plugin name filled in, sorted by policy.
func (e *Engine) Diagnostics() []meta.Diagnostic {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []meta.Diagnostic
	for _, ts := range e.translators {
		for _, d := range ts.diags {
			d.Plugin = cmp.Or(d.Plugin, ts.t.Name())
			out = append(out, d)
		}
	}
	slices.SortStableFunc(out, func(a, b meta.Diagnostic) int {
		return a.Policy.Compare(b.Policy)
	})
	return out
}

// Clusters returns the names of the clusters in the view with their meshes
// and staleness, sorted by name.
func (e *Engine) Clusters() []ClusterInfo {
	var out []ClusterInfo
	for name, cs := range e.read(nil) {
		out = append(out, ClusterInfo{Name: name, Meshes: cs.meshes, Stale: cs.stale, InputVersion: cs.input.Version(), InputHash: cs.input.Hash(), Resources: cs.input.Len()})
	}
	slices.SortFunc(out, func(a, b ClusterInfo) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// ClusterInfo summarizes one cluster of the view.
type ClusterInfo struct {
	Name         string
	Meshes       []string
	Stale        bool
	InputVersion uint64
	InputHash    snapshot.Hash
	Resources    int
}

// sooner returns the shorter of two waits, where 0 is no wait asked.
func sooner(wait, d time.Duration) time.Duration {
	if wait == 0 {
		return d
	}
	return min(wait, d)
}
