package sdk

import (
	"context"
	"fmt"
	"maps"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"

	"github.com/meshrelay/meshrelay/sdk/protocol"
)

// targetState is what the session keeps of one target's last computation:
// what it read and the diagnostics it reported. Its outputs are not kept;
// the hash of what was sent is (session.sent).
type targetState struct {
	reads *readSet
	diags []Diagnostic
}

// targets are the per-target computations of a Translator's session.
//
// A change is matched against the targets through a readIndex, and an
// update visits only the targets its clusters and scope concern, so that
// what it costs grows with what it changed, not with the fleet.
type targets struct {
	state map[string]*targetState
	index readIndex
	// withDiags holds the targets whose last computation reported
	// diagnostics, which every answer repeats.
	withDiags map[string]bool
	// retry holds the targets of a failed update, which the next update
	// computes whatever it changed.
	retry  []string
	shared *sharedValues
	// decoded logs the clusters whose typed objects the last update
	// decoded; they are dropped when it ends.
	decoded decodeLog
	// computed counts target computations, for tests and benchmarks.
	computed int
}

func newTargets() *targets {
	ts := &targets{shared: newSharedValues()}
	ts.reset()
	return ts
}

// set records a target's new state, replacing the old one in the indexes.
func (ts *targets) set(name string, st *targetState) {
	ts.drop(name)
	ts.state[name] = st
	ts.index.set(name, st.reads)
	if len(st.diags) > 0 {
		ts.withDiags[name] = true
	}
}

// drop forgets a target.
func (ts *targets) drop(name string) {
	if _, ok := ts.state[name]; !ok {
		return
	}
	ts.index.drop(name)
	delete(ts.withDiags, name)
	delete(ts.state, name)
}

// reset forgets every target and shared value, as a full update does.
func (ts *targets) reset() {
	ts.state = map[string]*targetState{}
	ts.index = newReadIndex()
	ts.withDiags = map[string]bool{}
	ts.retry = nil
	ts.shared.reset()
}

// dirty returns the targets that must be computed after change c, sorted:
// fresh, the targets never computed, and those with a read that c
// concerns.
func (ts *targets) dirty(fresh []string, c *change) []string {
	hit := ts.index.touched(c)
	for _, name := range fresh {
		hit[name] = true
	}
	return slices.Sorted(maps.Keys(hit))
}

// diagnostics returns every target's diagnostics.
func (ts *targets) diagnostics() []Diagnostic {
	var out []Diagnostic
	for name := range ts.withDiags {
		out = append(out, ts.state[name].diags...)
	}
	return out
}

// targetResult is one target's computation.
type targetResult struct {
	name   string
	groups map[string][]Output // by backend, sorted
	// keys are the groups' keys, by backend: worked out where the target
	// is computed, in parallel, not where it is sent, one set at a time.
	keys  map[string]setKeys
	state *targetState
	err   error
}

// commitTargets answers an update of a Translator: it computes the
// targets the update concerns, in parallel, sends each output set that
// changed as soon as its target is computed, so that the host sees the
// answer progress however many targets there are, and at the end every
// diagnostic.
func (s *session) commitTargets(ctx context.Context, fleet *fleetData, send sender) error {
	ts := s.targets
	if s.full {
		ts.reset()
	} else {
		ts.shared.refresh(fleet, s.change)
	}
	fresh := s.settleTargets(fleet)
	dirty := ts.dirty(fresh, s.change)
	// before holds what s.sent held of every set this update sent, to
	// put back when the update fails: the host then drops the answer.
	before := map[outKey]sentBefore{}
	var failed error
	release := newReleaser(fleet)
	err := s.computeTargets(ctx, fleet, dirty, func(r targetResult) error {
		if r.err != nil {
			failed = r.err
			return r.err
		}
		ts.set(r.name, r.state)
		release.computed(r.name, r.state.reads)
		for _, b := range s.desc.Backends {
			if err := s.sendTarget(r.name, b, r.groups[b], r.keys[b], before, send); err != nil {
				return err
			}
		}
		return nil
	})
	ts.decoded.drop()
	ts.computed += len(dirty)
	if failed != nil {
		// The host keeps none of this update: compute its targets again
		// next time, and send their sets again unless they are what the
		// host held before.
		for _, name := range dirty {
			ts.drop(name)
		}
		ts.retry = dirty
		for k, b := range before {
			if b.had {
				s.sent[k] = b.keys
			} else {
				delete(s.sent, k)
			}
		}
		return send(done(s.generation, failed.Error()))
	}
	if err != nil {
		return err
	}
	if err := s.sendDiagnostics(slices.Concat(s.diags, ts.diagnostics()), send); err != nil {
		return err
	}
	return send(done(s.generation, ""))
}

// releaser drops a cluster's decoded inputs as soon as the update has no
// more use for them, rather than when it ends: in a fleet-wide update
// (a policy edit, a plugin's start) holding every cluster's typed objects
// until the end grows the plugin's heap by about the size of every input,
// and a process pays for fresh pages in page faults and zeroing (a third
// of the Istio plugin's CPU in a 10,000-cluster edit, docs/performance.md).
//
// Most targets read only their own cluster. Once a target is computed, its
// cluster's decoded objects are dropped unless a computed target has read
// them from another cluster; after a fleet-wide read (a Select over the
// fleet) nothing more is dropped before the update ends. A cluster's
// objects are dropped at most once an update, when its own target is
// computed: a foreign reader that comes later decodes them again, once,
// and they are kept from then on. So each cluster decodes at most twice an
// update, never once per target that reads it.
type releaser struct {
	fleet   *fleetData
	foreign map[string]bool
	keepAll bool
}

func newReleaser(fleet *fleetData) *releaser {
	return &releaser{fleet: fleet, foreign: map[string]bool{}}
}

// computed notes target name's reads and drops its cluster's decoded
// inputs if no other target read them so far.
func (rl *releaser) computed(name string, reads *readSet) {
	for _, r := range reads.reads {
		switch {
		case !r.decodes():
		case r.cluster == "":
			rl.keepAll = true
		case r.cluster != name:
			rl.foreign[r.cluster] = true
		}
	}
	if rl.keepAll || rl.foreign[name] {
		return
	}
	if cd := rl.fleet.byName[name]; cd != nil {
		cd.dropDecoded()
	}
}

// settleTargets brings the targets in line with the fleet and the scope:
// it forgets the targets that left either, with what was sent of them, and
// returns the targets that were never computed. It visits the clusters
// the update touched, those that entered or left the scope and those of a
// failed update, unless the update is full or scoping was switched on or
// off, which can change every target.
func (s *session) settleTargets(fleet *fleetData) []string {
	ts := s.targets
	var names []string
	if s.full || (s.scope == nil) != (s.prevScope == nil) {
		names = slices.AppendSeq(slices.Collect(maps.Keys(fleet.byName)), maps.Keys(ts.state))
		for k := range s.sent {
			names = append(names, k.cluster)
		}
	} else {
		names = slices.AppendSeq(slices.Clone(ts.retry), maps.Keys(s.touched))
		if !s.sameScope {
			for name := range s.scope {
				if !s.prevScope[name] {
					names = append(names, name)
				}
			}
			for name := range s.prevScope {
				if !s.scope[name] {
					names = append(names, name)
				}
			}
		}
	}
	ts.retry = nil
	slices.Sort(names)
	var fresh []string
	for _, name := range slices.Compact(names) {
		if _, ok := fleet.byName[name]; ok && (s.scope == nil || s.scope[name]) {
			if _, ok := ts.state[name]; !ok {
				fresh = append(fresh, name)
			}
			continue
		}
		ts.drop(name)
		for _, b := range s.desc.Backends {
			delete(s.sent, outKey{name, b})
		}
	}
	return fresh
}

// sentBefore is what session.sent held of a set before an update sent it.
type sentBefore struct {
	keys protocol.KeySet
	had  bool
}

// sendTarget sends one output set when it differs from what was sent, or
// always on a full update or when the cluster entered the scope or is to
// be sent again, and records in before what s.sent held of it.
func (s *session) sendTarget(cluster, backend string, outs []Output, keys setKeys, before map[outKey]sentBefore, send sender) error {
	k := outKey{cluster, backend}
	prev, had := s.sent[k]
	sent, sending, err := s.sendSet(cluster, backend, outs, keys, send)
	if err != nil {
		return err
	}
	if _, ok := before[k]; sending && !ok {
		before[k] = sentBefore{keys: prev, had: had}
	}
	s.sent[k] = sent
	return nil
}

// computeTargets runs the targets on every core and hands each result to
// each on the calling goroutine as soon as it is computed, in the order
// they finish. At the first error each returns it starts no more targets,
// cancels those in progress and drops their results, and returns the
// error once they ended. A lone target, what most updates concern, runs
// on the calling goroutine: handing it to a worker woke another thread
// of a mostly idle process for each change.
func (s *session) computeTargets(ctx context.Context, fleet *fleetData, names []string, each func(targetResult) error) error {
	if len(names) == 1 {
		return each(s.computeTarget(ctx, fleet, fleet.byName[names[0]]))
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	workers := min(runtime.GOMAXPROCS(0), len(names))
	next := make(chan string)
	results := make(chan targetResult)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for name := range next {
				results <- s.computeTarget(ctx, fleet, fleet.byName[name])
			}
		})
	}
	go func() {
		defer close(next)
		for _, name := range names {
			select {
			case next <- name:
			case <-stop:
				return
			}
		}
	}()
	go func() { wg.Wait(); close(results) }()
	var err error
	for r := range results {
		if err != nil {
			continue
		}
		if err = each(r); err != nil {
			close(stop)
			cancel()
		}
	}
	return err
}

// computeTarget runs one target, recording its reads.
func (s *session) computeTarget(ctx context.Context, fleet *fleetData, cd *clusterData) (res targetResult) {
	res.name = cd.name
	defer func() {
		if r := recover(); r != nil {
			res.err = fmt.Errorf("translate target %q panicked: %v\n%s", cd.name, r, debug.Stack())
		}
	}()
	rec := newRecorder()
	rec.add(read{op: readMeta, cluster: cd.name})
	if !s.hasWork(cd) {
		res.state = &targetState{reads: rec.freeze()}
		return res
	}
	req := &Request{Target: cd.handle(rec), Fleet: fleet.view(rec)}
	resp := NewResponse(s.desc, cd.name)
	if err := s.tt.TranslateTarget(ctx, req, resp); err != nil {
		res.err = fmt.Errorf("translate target %q: %w", cd.name, err)
		return res
	}
	if err := resp.Err(); err != nil {
		res.err = err
		return res
	}
	groups, err := groupOutputs(fleet, s.desc.Backends, resp.Outputs())
	if err != nil {
		res.err = err
		return res
	}
	res.groups = make(map[string][]Output, len(groups))
	res.keys = make(map[string]setKeys, len(groups))
	for k, outs := range groups {
		res.groups[k.backend], res.keys[k.backend] = outs, keysOf(outs)
	}
	res.state = &targetState{reads: rec.freeze(), diags: resp.Diagnostics()}
	return res
}

// hasWork reports whether the translator has work in the cluster: some
// backend of it needs no mesh, or the cluster has the mesh of one that
// does. A target without work is not computed; it depends on its
// cluster's meshes only (the read computeTarget records first).
func (s *session) hasWork(cd *clusterData) bool {
	for _, b := range s.desc.Backends {
		if !slices.Contains(s.desc.Meshes, b) || slices.Contains(cd.meshes, b) {
			return true
		}
	}
	return false
}

// setKeys are the keys of an output set's objects (protocol.KeyOf).
type setKeys struct {
	// each holds them in the outputs' order; set sorted.
	each []protocol.ResourceKey
	set  protocol.KeySet
}

// keysOf returns the keys of outs.
func keysOf(outs []Output) setKeys {
	each := make([]protocol.ResourceKey, len(outs))
	for i := range outs {
		each[i] = protocol.KeyOf(outs[i].ID, outs[i].sum())
	}
	return setKeys{each: each, set: protocol.NewKeySet(slices.Clone(each))}
}
