package engine

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"strconv"
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
	// Debounce is the engine's window. A change that comes a window or
	// more after the last cycle ended is translated at once. One that
	// comes sooner, or while a cycle runs, is part of a burst: the engine
	// waits until no change has come for a window, at most DebounceMax,
	// and translates the burst in one cycle. Default 50ms.
	Debounce time.Duration
	// DebounceMax bounds the wait for a burst to pause, so that changes
	// that never stop still get cycles. Default 1s.
	DebounceMax time.Duration
	// RetryBackoff is the first delay before retrying a failed translator;
	// it doubles up to a minute. Default 500ms.
	RetryBackoff time.Duration
	// View is the fleet to translate (required): the server's reads the
	// store; an engine used alone reads a [MemView].
	View View
	// Ready receives every cycle's result from Run (required by Run); the
	// receiver delivers the outputs, then calls Advance. Run waits for
	// the receiver.
	Ready chan<- Ready
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
	// Current are the outputs, of clusters the engine held no mark of,
	// whose answer is the one delivered before (View.Delivered), and
	// those not handed on of the clusters named by Resume: nothing to
	// write, but a stream that started without them (its agent may hold
	// an older one) sends the stored copy.
	Current []Current
	// Retry is how long to wait before retrying failed translators; 0
	// when every translator succeeded.
	Retry time.Duration
}

// Current names an output that is current as delivered before.
type Current struct {
	Key  OutputKey
	Hash snapshot.Hash
}

func (o *Options) defaults() {
	if o.Debounce <= 0 {
		o.Debounce = 50 * time.Millisecond
	}
	if o.DebounceMax <= 0 {
		o.DebounceMax = time.Second
	}
	if o.RetryBackoff <= 0 {
		o.RetryBackoff = 500 * time.Millisecond
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// clusterState is one cluster of the engine's view, in the form the
// translators' hosts take it: a cycle hands its view's map to them as it
// is, so a map that read built is never modified afterwards.
type clusterState = pluginhost.Cluster

// translatorState is how one translator fares and what it said last.
// What its session holds is the session's to know (sdk/protocol/host).
type translatorState struct {
	t pluginhost.Translator
	// called is set once the translator was called: from then on it is
	// called every cycle (its session sends nothing when nothing changed),
	// so that it hears of clusters leaving even when its backends no
	// longer run anywhere.
	called bool
	// sessions are the translator's sessions by revision session name
	// ("" is t itself); diags the diagnostics of each.
	sessions map[string]pluginhost.Translator
	diags    map[string][]meta.Diagnostic
	lastErr  error
	failedAt time.Time
	backoff  time.Duration
	lastOK   time.Time
	lastCall time.Duration
}

// Mark is what the engine keeps of an output it handed on: its hash and
// version, and the plugin that produced it. The output itself lives where
// delivery put it (the store).
type Mark struct {
	Hash    snapshot.Hash
	Version uint64
	Plugin  string
}

// Engine coalesces input and policy changes and runs translators. All
// methods are safe for concurrent use.
type Engine struct {
	opts Options

	cycleMu sync.Mutex // serializes Step
	// last is the view the last Step read, and readWhole when it last
	// read every cluster of the view; Step holds cycleMu. A Step that
	// reads only the clusters named changes last in place; one that reads
	// every cluster makes a new map.
	last       map[string]clusterState
	readWhole  time.Time
	wholeReads int
	// seq numbers the views handed to the hosts (pluginhost.View.Seq),
	// and lastSeq is the number of last; 0 before the first.
	seq, lastSeq uint64
	// meshCount counts last's clusters by mesh type.
	meshCount map[string]int

	view   View
	meshes meshCache

	mu sync.Mutex
	// revs are the live revisions of the policies, the previous first:
	// one, or two during a staged rollout (SetRevisions).
	revs []*revision
	// onPrevious are the clusters translated under revs[0] when there
	// are two revisions; the others are translated under revs[1].
	onPrevious map[string]bool
	// sessionSeq names the sessions of new revisions.
	sessionSeq int
	// settled is, by cluster, the hash of the policies its outputs were
	// last computed under, in a cycle where every translator of that
	// revision answered.
	settled map[string]snapshot.Hash
	// settledSeq is the number of the view whose every cluster (or
	// target, when Scoped) a cycle with one revision settled under
	// settledAs, the hash of its policies; 0 when the last cycle did
	// not, or swept settled after.
	settledSeq uint64
	settledAs  snapshot.Hash
	dirty      bool
	// changed are the clusters named by RefreshCluster since the last
	// cycle took them; readAll asks the next cycle to read the whole view
	// (Refresh).
	changed map[string]struct{}
	readAll bool
	// resume are the clusters whose outputs the next cycle to read them
	// reports as current (Resume).
	resume      map[string]struct{}
	translators []*translatorState
	// marks are the outputs handed on, by key.
	marks map[OutputKey]Mark
	// unwritten are outputs delivery handed back with Advance: handed on
	// again by the next cycle while they are current and their cluster a
	// target.
	unwritten map[OutputKey]Output
	// targets are the clusters whose outputs are computed when Scoped;
	// sortedTargets are their names sorted, nil until a cycle needs them
	// after a change of targets.
	targets       map[string]bool
	sortedTargets []string
	// targetsChanged is set when targets change, until a cycle has
	// swept the marks of clusters that stopped being targets.
	targetsChanged bool
	generation     uint64
	wake           chan struct{}
}

// New returns an engine over translators, reading opts.View.
func New(translators []pluginhost.Translator, opts Options) *Engine {
	if opts.View == nil {
		panic("engine: Options.View is required")
	}
	opts.defaults()
	e := &Engine{
		opts:      opts,
		view:      opts.View,
		meshes:    meshCache{byName: map[string]cachedMeshes{}},
		revs:      []*revision{{policies: snapshot.Empty}},
		settled:   map[string]snapshot.Hash{},
		marks:     map[OutputKey]Mark{},
		unwritten: map[OutputKey]Output{},
		targets:   map[string]bool{},
		wake:      make(chan struct{}, 1),
	}
	for _, t := range translators {
		e.translators = append(e.translators, &translatorState{t: t, sessions: map[string]pluginhost.Translator{}, diags: map[string][]meta.Diagnostic{}})
	}
	return e
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
	e.sortedTargets, e.targetsChanged = nil, true
	if e.opts.Scoped {
		e.touch()
	}
}

// revision is one live policy set and the name of its session with
// each translator.
type revision struct {
	policies *snapshot.Snapshot
	session  string
}

// SetPolicies records the management source's policies: every cluster is
// translated under them, with one session per translator.
func (e *Engine) SetPolicies(s *snapshot.Snapshot) {
	e.SetRevisions([]*snapshot.Snapshot{s}, nil)
}

// SetRevisions sets the live revisions of the policies, the previous
// first, and, when there are two, the clusters translated under the
// previous one; the others are translated under the newer one. Each
// revision has its own session with each translator, which a revision
// keeps while it is live (matched by hash), so that moving a cluster from
// one revision to the other is moving a target between sessions. With one
// revision, a change of its policies is sent to its session as a delta,
// as SetPolicies does; a revision no longer live has its sessions closed.
func (e *Engine) SetRevisions(sets []*snapshot.Snapshot, onPrevious []string) {
	if len(sets) == 0 || len(sets) > 2 {
		panic("engine: SetRevisions takes one or two policy sets")
	}
	e.mu.Lock()
	var closing []string
	defer func() {
		e.mu.Unlock()
		for _, name := range closing {
			e.closeSessions(name)
		}
	}()
	var revs []*revision
	for _, s := range sets {
		i := slices.IndexFunc(e.revs, func(r *revision) bool { return r.policies.Hash() == s.Hash() })
		switch {
		case i >= 0 && !slices.Contains(revs, e.revs[i]):
			revs = append(revs, e.revs[i])
		case len(sets) == 1 && len(e.revs) == 1:
			revs = append(revs, &revision{policies: s, session: e.revs[0].session})
		default:
			e.sessionSeq++
			revs = append(revs, &revision{policies: s, session: "r" + strconv.Itoa(e.sessionSeq)})
		}
	}
	prev := map[string]bool{}
	if len(revs) == 2 {
		for _, c := range onPrevious {
			prev[c] = true
		}
	}
	same := len(revs) == len(e.revs) && maps.Equal(prev, e.onPrevious)
	for i := range revs {
		same = same && revs[i].session == e.revs[i].session && revs[i].policies.Hash() == e.revs[i].policies.Hash()
	}
	if same {
		return
	}
	for _, old := range e.revs {
		if !slices.ContainsFunc(revs, func(r *revision) bool { return r.session == old.session }) {
			closing = append(closing, old.session)
			for _, ts := range e.translators {
				delete(ts.sessions, old.session)
				delete(ts.diags, old.session)
			}
		}
	}
	e.revs, e.onPrevious = revs, prev
	e.touch()
}

// closeSessions ends every translator's session of a revision no longer
// live, without holding e.mu: a translator's call in flight finishes
// first.
func (e *Engine) closeSessions(session string) {
	for _, ts := range e.translators {
		if s, ok := ts.t.(pluginhost.Sessions); ok {
			s.CloseSession(session)
		}
	}
}

// session returns the translator on a revision's session.
func (ts *translatorState) session(name string) pluginhost.Translator {
	if t, ok := ts.sessions[name]; ok {
		return t
	}
	t := ts.t
	if s, ok := ts.t.(pluginhost.Sessions); ok {
		t = s.Session(name)
	}
	ts.sessions[name] = t
	return t
}

// Revision returns the hash of the policies a cluster's outputs were last
// computed under, in a cycle where every translator of that revision
// answered; false before the first.
func (e *Engine) Revision(cluster string) (snapshot.Hash, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	h, ok := e.settled[cluster]
	return h, ok
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

// Refresh asks for a cycle that reads the whole view again: the owner of
// Options.View calls it after each change (a cluster's input or
// staleness, the fleet's members) it does not name with RefreshCluster,
// and a caller may call it when nothing changed to wait for a cycle that
// sees the current view.
func (e *Engine) Refresh() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.readAll = true
	e.touch()
}

// RefreshCluster asks for a cycle that reads a cluster of a [Tracked]
// view again: its input, staleness or labels changed, or it joined or
// left the fleet. For a view that is not Tracked it is Refresh.
func (e *Engine) RefreshCluster(cluster string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.markChanged(cluster)
	e.touch()
}

// Resume asks the next cycle that reads a cluster to report its outputs
// as current (Ready.Current) when it does not hand them on: those it
// computed from what it read, or kept as they were when the cluster did
// not change. A stream that waited for its agent's input before its
// cluster was translated gets them so, though the cycle that read that
// input changed nothing.
func (e *Engine) Resume(cluster string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.markResumed(cluster)
	e.markChanged(cluster)
	e.touch()
}

// markResumed names a cluster for the next cycle that reads it to report
// (Resume). Callers hold e.mu.
func (e *Engine) markResumed(cluster string) {
	if e.resume == nil {
		e.resume = map[string]struct{}{}
	}
	e.resume[cluster] = struct{}{}
}

// markChanged names clusters for the next cycle to read. Callers hold e.mu.
func (e *Engine) markChanged(clusters ...string) {
	if e.changed == nil {
		e.changed = map[string]struct{}{}
	}
	for _, c := range clusters {
		e.changed[c] = struct{}{}
	}
}

// Mark returns the mark of the last output handed on for key.
func (e *Engine) Mark(key OutputKey) (Mark, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	m, ok := e.marks[key]
	return m, ok
}

// Marks returns the marks of a cluster's outputs, by backend.
func (e *Engine) Marks(cluster string) map[string]Mark {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[string]Mark{}
	for k, m := range e.marks {
		if k.Cluster == cluster {
			out[k.Backend] = m
		}
	}
	return out
}

// Advance tells the engine that delivery is done with a cycle's outputs,
// and hands back those it did not write (their cluster's agent left this
// replica meanwhile, or the write failed). The engine keeps them and hands
// them on again, after Options.RetryBackoff, while they are the current
// output of a cluster it computes; nothing newer supersedes them.
func (e *Engine) Advance(unwritten []Output) {
	e.mu.Lock()
	defer e.mu.Unlock()
	retry := false
	for _, o := range unwritten {
		m, ok := e.marks[o.Key]
		if !ok || m.Hash != o.Snapshot.Hash() || m.Version != o.Snapshot.Version() {
			continue // superseded, or its cluster left
		}
		e.unwritten[o.Key] = o
		retry = retry || !e.opts.Scoped || e.targets[o.Key.Cluster]
	}
	if retry {
		time.AfterFunc(e.opts.RetryBackoff, e.Refresh)
	}
}

// Run translates whenever the view changes, until ctx ends: a lone
// change at once, a burst once it pauses (Options.Debounce). A lone
// change does not wait out a window: the wait added the window to its
// latency, and the process, gone idle meanwhile, paid again to wake for
// the cycle.
func (e *Engine) Run(ctx context.Context) error {
	var (
		retry <-chan time.Time
		last  time.Time // the end of the last cycle
	)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-e.wake:
		case <-retry:
		}
		if time.Since(last) < e.opts.Debounce && !e.settle(ctx) {
			return nil
		}
		// The cycle sees every change made so far; a wake left by one
		// would only start an empty cycle.
		select {
		case <-e.wake:
		default:
		}
		retry = nil
		r := e.Step(ctx)
		select {
		case e.opts.Ready <- r:
		case <-ctx.Done():
			return nil
		}
		last = time.Now()
		if r.Retry > 0 {
			retry = time.After(r.Retry)
		}
	}
}

// settle waits for a burst of changes to pause for Options.Debounce, at
// most Options.DebounceMax; false when ctx ended first.
func (e *Engine) settle(ctx context.Context) bool {
	quiet := time.NewTimer(e.opts.Debounce)
	defer quiet.Stop()
	deadline := time.NewTimer(e.opts.DebounceMax)
	defer deadline.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-e.wake:
			quiet.Reset(e.opts.Debounce)
		case <-quiet.C:
			return true
		case <-deadline.C:
			return true
		}
	}
}

// Step runs one translation over the current view and returns what it
// produced; the caller delivers it and calls Advance. Run calls it; an
// engine used alone (offline translation, tests) may call it directly.
func (e *Engine) Step(ctx context.Context) Ready {
	e.cycleMu.Lock()
	defer e.cycleMu.Unlock()
	start := time.Now()
	e.mu.Lock()
	e.dirty = false
	e.generation++
	generation := e.generation
	changed, readAll, resume := e.changed, e.readAll, e.resume
	e.changed, e.readAll, e.resume = nil, false, nil
	e.mu.Unlock()
	// Read the view after the generation is taken: a change made before
	// a later Generation call is seen by a cycle with a higher number.
	prev := e.last
	var (
		view map[string]clusterState
		left bool
		// seq numbers this cycle's view; base and names say what may
		// differ from the last one (base 0: anything), and was holds
		// what those clusters were in it.
		seq, base = e.seq + 1, uint64(0)
		names     []string
		was       map[string]clusterState
	)
	e.seq = seq
	tracked, ok := e.view.(Tracked)
	if !ok || readAll || prev == nil || start.Sub(e.readWhole) >= fullReadEvery {
		view = e.read(prev)
		left = clustersLeft(prev, view)
		e.readWhole = start
		e.wholeReads++
		e.meshCount = map[string]int{}
		for _, cs := range view {
			countMeshes(e.meshCount, cs.Meshes, 1)
		}
		if prev != nil {
			// A new map: the last one, unchanged, is what every cluster was.
			base, was = e.lastSeq, prev
			names = differing(prev, view)
		}
	} else {
		base = e.lastSeq
		names = slices.Collect(maps.Keys(changed))
		var unread []string
		view, was, left, unread = e.readChanged(prev, tracked, changed)
		for _, name := range names {
			countMeshes(e.meshCount, was[name].Meshes, -1)
			countMeshes(e.meshCount, view[name].Meshes, 1)
		}
		if len(unread) > 0 {
			e.mu.Lock()
			e.markChanged(unread...)
			for _, c := range unread {
				if _, ok := resume[c]; ok {
					delete(resume, c)
					e.markResumed(c) // for the cycle that reads it
				}
			}
			e.mu.Unlock()
		}
	}
	e.last, e.lastSeq = view, seq
	e.meshes.keep(view)
	e.mu.Lock()
	revs := slices.Clone(e.revs)
	onPrevious := e.onPrevious
	var scope []string
	if e.opts.Scoped {
		// Sorted once per change of targets, not per cycle: the hosts
		// keep the slice with the view and never modify it.
		if e.sortedTargets == nil {
			e.sortedTargets = slices.Sorted(maps.Keys(e.targets))
		}
		scope = e.sortedTargets
	}
	e.mu.Unlock()

	active := make(map[string]bool, len(e.meshCount))
	for m := range e.meshCount {
		active[m] = true
	}
	// wants are the views of the revisions' sessions, keeps their
	// targets when there are two (nil: every cluster of the view).
	wants := make([]pluginhost.View, len(revs))
	keeps := make([]map[string]bool, len(revs))
	if len(revs) == 1 {
		wants[0] = e.hostView(view, revs[0].policies, e.opts.Scoped, scope)
		wants[0].Seq, wants[0].Base, wants[0].Changed, wants[0].Was = seq, base, names, was
	} else {
		all := scope
		if !e.opts.Scoped {
			all = slices.Sorted(maps.Keys(view))
		}
		split := [2][]string{}
		for _, c := range all {
			i := 1
			if onPrevious[c] {
				i = 0
			}
			split[i] = append(split[i], c)
		}
		for i, r := range revs {
			wants[i] = e.hostView(view, r.policies, true, split[i])
			wants[i].Seq, wants[i].Base, wants[i].Changed, wants[i].Was = seq, base, names, was
			keeps[i] = map[string]bool{}
			for _, c := range split[i] {
				keeps[i][c] = true
			}
		}
	}
	type outcome struct {
		ts      *translatorState
		results []pluginhost.Result
		errs    []error
		called  bool
		took    time.Duration
	}
	outcomes := make([]outcome, len(e.translators))
	var wait time.Duration // until the first failed translator's retry
	backingOff := false
	var g errgroup.Group
	e.mu.Lock()
	sessions := make([][]pluginhost.Translator, len(e.translators))
	for i, ts := range e.translators {
		for _, r := range revs {
			sessions[i] = append(sessions[i], ts.session(r.session))
		}
	}
	e.mu.Unlock()
	for i, ts := range e.translators {
		if !runs(ts.t.Backends(), ts.t.Meshes(), active) && !ts.called {
			continue
		}
		if left := ts.backoff - time.Since(ts.failedAt); ts.lastErr != nil && left > 0 {
			// Still backing off. This cycle must ask for its retry all the
			// same: Run waits for the retry this cycle returns, not for one
			// an earlier cycle asked for.
			wait = sooner(wait, left)
			backingOff = true
			continue
		}
		ts.called = true
		g.Go(func() error {
			callStart := time.Now()
			oc := outcome{ts: ts, results: make([]pluginhost.Result, len(revs)), errs: make([]error, len(revs))}
			for r := range revs {
				res, err := sessions[i][r].Translate(ctx, wants[r])
				oc.results[r], oc.errs[r] = res, err
				oc.called = oc.called || err != nil || res.Sent
			}
			oc.took = time.Since(callStart)
			outcomes[i] = oc
			return nil
		})
	}
	_ = g.Wait()
	e.mu.Lock()
	for _, r := range revs {
		if !e.liveSession(r.session) {
			defer e.closeSessions(r.session) // dropped during the calls, which may have opened it again
		}
	}
	e.mu.Unlock()

	var answers []pluginhost.ClusterOutput
	for _, oc := range outcomes {
		for _, res := range oc.results {
			answers = append(answers, res.Outputs...)
		}
	}
	before := e.deliveredBefore(answers)

	stats := CycleStats{Generation: generation}
	var handOn []Output
	var currents []Current
	revFailed := make([]bool, len(revs))
	e.mu.Lock()
	for _, oc := range outcomes {
		ts := oc.ts
		if ts == nil || !oc.called {
			continue
		}
		ts.lastCall = oc.took
		if err := errors.Join(oc.errs...); err != nil {
			// The session may hold a partial update: its next one is full.
			ts.lastErr = err
			ts.failedAt = time.Now()
			ts.backoff = min(max(ts.backoff*2, e.opts.RetryBackoff), time.Minute)
			wait = sooner(wait, ts.backoff)
			stats.Failed = append(stats.Failed, ts.t.Name())
			e.opts.Logger.Warn("translator failed; keeping its last outputs", "plugin", ts.t.Name(), "error", err, "retry_in", ts.backoff)
		} else {
			ts.lastErr, ts.backoff, ts.lastOK = nil, 0, time.Now()
		}
		for r, res := range oc.results {
			if oc.errs[r] != nil {
				revFailed[r] = true
				continue
			}
			if e.liveSession(revs[r].session) {
				ts.diags[revs[r].session] = res.Diagnostics
			}
			stats.ChangedClusters = max(stats.ChangedClusters, res.Clusters)
			if len(res.Resent) > 0 {
				// Their sets delivered had changed since the plugin's last
				// answer, or had not landed yet: the session asked again.
				e.opts.Logger.Debug("translator's kept objects were not delivered as answered; asked for the clusters' sets whole", "plugin", ts.t.Name(), "clusters", len(res.Resent), "first", res.Resent[0])
			}
			changed, current := e.take(ts, view, before, res.Outputs, keeps[r])
			handOn = append(handOn, changed...)
			currents = append(currents, current...)
		}
	}
	settledSeq := uint64(0)
	if !backingOff {
		for r, rev := range revs {
			if revFailed[r] {
				continue
			}
			h := rev.policies.Hash()
			if len(revs) == 1 && base != 0 && e.settledSeq == base && e.settledAs == h && !e.targetsChanged {
				// The last view was settled whole under these policies:
				// only the clusters named since can differ.
				for _, c := range names {
					_, inView := view[c]
					if _, target := slices.BinarySearch(wants[r].Targets, c); wants[r].Scoped && target || !wants[r].Scoped && inView {
						e.settled[c] = h
					}
				}
			} else {
				for _, c := range wants[r].Targets {
					e.settled[c] = h
				}
				if !wants[r].Scoped {
					for c := range view {
						e.settled[c] = h
					}
				}
			}
			if len(revs) == 1 {
				settledSeq, e.settledAs = seq, h
			}
		}
	}
	e.settledSeq = settledSeq
	// Clusters that left the fleet, or stopped being targets, lose their
	// marks; what delivery handed back is handed on again unless
	// superseded. The sweeps look over every cluster's entries, so they
	// run only after a cluster left or the targets changed, not after
	// every change of one cluster.
	if left || e.targetsChanged {
		e.targetsChanged = false
		e.settledSeq = 0 // the next cycle settles the whole view again
		for c := range e.settled {
			if _, ok := view[c]; !ok {
				delete(e.settled, c)
			}
		}
		gone := func(cluster string) bool {
			_, ok := view[cluster]
			return !ok || (e.opts.Scoped && !e.targets[cluster])
		}
		for key := range e.marks {
			if gone(key.Cluster) {
				delete(e.marks, key)
			}
		}
	}
	for key, o := range e.unwritten {
		delete(e.unwritten, key)
		if m, ok := e.marks[key]; ok && m.Hash == o.Snapshot.Hash() && m.Version == o.Snapshot.Version() &&
			!slices.ContainsFunc(handOn, func(h Output) bool { return h.Key == key }) {
			handOn = append(handOn, o)
		}
	}
	if len(resume) > 0 {
		for key, m := range e.marks {
			if _, ok := resume[key.Cluster]; ok &&
				!slices.ContainsFunc(handOn, func(h Output) bool { return h.Key == key }) &&
				!slices.ContainsFunc(currents, func(c Current) bool { return c.Key == key }) {
				currents = append(currents, Current{Key: key, Hash: m.Hash})
			}
		}
	}
	e.mu.Unlock()

	slices.SortFunc(handOn, func(a, b Output) int { return cmp.Compare(a.Key.String(), b.Key.String()) })
	for _, o := range handOn {
		stats.Bytes += o.Snapshot.Size()
	}
	stats.Outputs = len(handOn)
	stats.Duration = time.Since(start)
	return Ready{Outputs: handOn, Current: currents, Stats: stats, Retry: wait}
}

// take records one translator's answer and returns the outputs whose
// content changed, to hand on, and those current as delivered before. A
// set the engine holds no mark of is compared with the one delivered
// before: its cluster's agent may hold an output another replica, or this
// server before a restart, delivered, so a set that changed or emptied
// meanwhile is handed on. Callers hold e.mu.
// keep, when not nil, are the targets of the session that answered: the
// outputs of other clusters are left out.
func (e *Engine) take(ts *translatorState, view map[string]clusterState, before map[OutputKey]Mark, outs []pluginhost.ClusterOutput, keep map[string]bool) (changed []Output, current []Current) {
	for _, co := range outs {
		key := OutputKey{Cluster: co.Cluster, Backend: co.Backend}
		if _, ok := view[co.Cluster]; !ok {
			e.opts.Logger.Warn("translator emitted output for a cluster not in the fleet; dropped", "plugin", ts.t.Name(), "cluster", co.Cluster)
			continue
		}
		if e.opts.Scoped && !e.targets[co.Cluster] {
			continue // no longer a target: its output would be stale when it comes back
		}
		if keep != nil && !keep[co.Cluster] {
			continue // moved to the other revision since the cycle started
		}
		// The host built co.Resources for this answer, which nothing
		// reads after take: the snapshot keeps it.
		s, err := snapshot.NewOwned(0, co.Resources)
		if err != nil {
			e.opts.Logger.Warn("translator emitted an invalid output; keeping the previous one", "plugin", ts.t.Name(), "cluster", co.Cluster, "backend", co.Backend, "error", err)
			continue
		}
		prev, had := e.marks[key]
		marked := had
		if !had {
			prev, had = before[key]
		}
		if had && prev.Hash == s.Hash() {
			if !marked {
				e.marks[key] = Mark{Hash: prev.Hash, Version: prev.Version, Plugin: ts.t.Name()} // delivered before
				current = append(current, Current{Key: key, Hash: prev.Hash})
			}
			continue
		}
		if !had && s.Len() == 0 {
			continue
		}
		var version uint64 = 1
		if had {
			version = prev.Version + 1
		}
		o := Output{Key: key, Snapshot: s.WithVersion(version), Plugin: ts.t.Name()}
		e.marks[key] = Mark{Hash: s.Hash(), Version: version, Plugin: o.Plugin}
		changed = append(changed, o)
	}
	return changed, current
}

// deliveredBefore returns the marks of the outputs delivered before (see
// View.Delivered) of the sets answered that the engine holds no mark of.
// It reads the view, which may read the store, without holding e.mu;
// marks change only in Step, which the caller runs.
func (e *Engine) deliveredBefore(answers []pluginhost.ClusterOutput) map[OutputKey]Mark {
	e.mu.Lock()
	var unknown []OutputKey
	for _, co := range answers {
		key := OutputKey{Cluster: co.Cluster, Backend: co.Backend}
		if _, ok := e.marks[key]; !ok {
			unknown = append(unknown, key)
		}
	}
	e.mu.Unlock()
	before := map[OutputKey]Mark{}
	for _, key := range unknown {
		if s, ok := e.view.Delivered(key.Cluster, key.Backend); ok {
			before[key] = Mark{Hash: s.Hash(), Version: s.Version()}
		}
	}
	return before
}

// clustersLeft reports whether a cluster of prev, the last cycle's view,
// is not in view.
func clustersLeft(prev, view map[string]clusterState) bool {
	if len(prev) > len(view) {
		return true
	}
	for name := range prev {
		if _, ok := view[name]; !ok {
			return true
		}
	}
	return false
}

// hostView is the view every translator is to hold this cycle. It shares
// the cycle's view rather than copying it: a copy of every cluster's
// entry each cycle was a quarter of the engine's own work under churn.
// The engine changes that map in place from cycle to cycle (InPlace), so
// the sessions compare the clusters it names with View.Was.
// Its Delivered is the engine's View's: a translator answers a set by
// what changed since its last answer, and the session takes the rest
// from the set delivered.
func (e *Engine) hostView(view map[string]clusterState, policies *snapshot.Snapshot, scoped bool, scope []string) pluginhost.View {
	return pluginhost.View{Clusters: view, InPlace: true, Policies: policies, Scoped: scoped, Targets: scope, Delivered: e.view.Delivered}
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

// countMeshes adds d to the count of each of a cluster's meshes, and
// forgets those counted by no cluster.
func countMeshes(counts map[string]int, meshes []string, d int) {
	for _, m := range meshes {
		if counts[m] += d; counts[m] == 0 {
			delete(counts, m)
		}
	}
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

// liveSession reports whether a session is one of a live revision's.
// Callers hold e.mu.
func (e *Engine) liveSession(name string) bool {
	return slices.ContainsFunc(e.revs, func(r *revision) bool { return r.session == name })
}

// Diagnostics returns the latest diagnostics of every translator, under
// every live revision, with the plugin name filled in, sorted by policy.
func (e *Engine) Diagnostics() []meta.Diagnostic {
	return e.diagnostics(func(*revision) bool { return true })
}

// RevisionDiagnostics returns the latest diagnostics of every translator
// under the live revision whose policies have the hash h, as Diagnostics.
func (e *Engine) RevisionDiagnostics(h snapshot.Hash) []meta.Diagnostic {
	return e.diagnostics(func(r *revision) bool { return r.policies.Hash() == h })
}

func (e *Engine) diagnostics(of func(*revision) bool) []meta.Diagnostic {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []meta.Diagnostic
	for _, r := range e.revs {
		if !of(r) {
			continue
		}
		for _, ts := range e.translators {
			for _, d := range ts.diags[r.session] {
				d.Plugin = cmp.Or(d.Plugin, ts.t.Name())
				out = append(out, d)
			}
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
		out = append(out, ClusterInfo{Name: name, Meshes: cs.Meshes, Stale: cs.Stale, InputVersion: cs.Input.Version(), InputHash: cs.Input.Hash(), Resources: cs.Input.Len()})
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
