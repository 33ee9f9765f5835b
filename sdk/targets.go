package sdk

import (
	"context"
	"crypto/sha256"
	"fmt"
	"maps"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"

	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	translatorv1 "github.com/meshrelay/meshrelay/proto/translator/v1"
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
// A change is matched against the targets through two indexes, so that
// what it costs grows with the targets it concerns, not with the fleet:
// byCluster holds the targets with a read bound to a cluster, and global
// holds, per fleet-wide read (a policy kind, a Shared key, a fleet-wide
// selector, the list of clusters), the targets that made it. A change is
// checked once against each fleet-wide read, however many targets share
// it, and only against the cluster-bound reads of the targets of the
// clusters it changed.
type targets struct {
	state     map[string]*targetState
	byCluster map[string]map[string]bool
	global    map[read]map[string]bool
	// selectors holds the selectors of the fleet-wide select reads in
	// global, by their JSON (the read's name).
	selectors *readSet
	shared    *sharedValues
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
	clusters, _ := st.reads.clusters()
	for _, c := range clusters {
		addTo(ts.byCluster, c, name)
	}
	for _, r := range st.reads.reads {
		if !r.global() {
			continue
		}
		addTo(ts.global, r, name)
		if r.op == readSelect || r.op == readClients {
			ts.selectors.selectors[r.name] = st.reads.selectors[r.name]
		}
	}
}

// drop forgets a target.
func (ts *targets) drop(name string) {
	st, ok := ts.state[name]
	if !ok {
		return
	}
	clusters, _ := st.reads.clusters()
	for _, c := range clusters {
		removeFrom(ts.byCluster, c, name)
	}
	for _, r := range st.reads.reads {
		if !r.global() {
			continue
		}
		if removeFrom(ts.global, r, name) && (r.op == readSelect || r.op == readClients) {
			delete(ts.selectors.selectors, r.name)
		}
	}
	delete(ts.state, name)
}

// addTo adds name to index[k].
func addTo[K comparable](index map[K]map[string]bool, k K, name string) {
	if index[k] == nil {
		index[k] = map[string]bool{}
	}
	index[k][name] = true
}

// removeFrom removes name from index[k] and reports whether k is gone.
func removeFrom[K comparable](index map[K]map[string]bool, k K, name string) bool {
	delete(index[k], name)
	if len(index[k]) == 0 {
		delete(index, k)
		return true
	}
	return false
}

// reset forgets every target and shared value, as a full update does.
func (ts *targets) reset() {
	ts.state = map[string]*targetState{}
	ts.byCluster = map[string]map[string]bool{}
	ts.global = map[read]map[string]bool{}
	ts.selectors = &readSet{selectors: map[string][]policyv1alpha1.DestinationSelector{}}
	ts.shared.reset()
}

// dirty returns the targets of want that must be computed after change c:
// those never computed and those with a read that c concerns.
func (ts *targets) dirty(want []string, c *change) []string {
	hit := map[string]bool{}
	if c.global() {
		for r, names := range ts.global {
			if c.touchesRead(r, ts.selectors) {
				maps.Copy(hit, names)
			}
		}
	}
	for _, cluster := range c.clusters() {
		for name := range ts.byCluster[cluster] {
			if !hit[name] && c.touchesBound(ts.state[name].reads) {
				hit[name] = true
			}
		}
	}
	var out []string
	for _, name := range want {
		if _, ok := ts.state[name]; !ok || hit[name] {
			out = append(out, name)
		}
	}
	return out
}

// targetResult is one target's computation.
type targetResult struct {
	name   string
	groups map[string][]Output // by backend, sorted
	state  *targetState
	err    error
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
	var want []string
	for _, cd := range fleet.clusters {
		if s.scope == nil || s.scope[cd.name] {
			want = append(want, cd.name)
		}
	}
	for name := range ts.state {
		if _, ok := fleet.byName[name]; !ok || (s.scope != nil && !s.scope[name]) {
			ts.drop(name)
		}
	}
	for k := range s.sent {
		if _, ok := fleet.byName[k.cluster]; !ok {
			delete(s.sent, k)
		}
	}
	dirty := ts.dirty(want, s.change)
	// before holds what s.sent held of every set this update sent, to
	// put back when the update fails: the host then drops the answer.
	before := map[outKey]sentBefore{}
	var failed error
	err := s.computeTargets(ctx, fleet, dirty, func(r targetResult) error {
		if r.err != nil {
			failed = r.err
			return r.err
		}
		ts.set(r.name, r.state)
		for _, b := range s.desc.Backends {
			if err := s.sendTarget(r.name, b, r.groups[b], before, send); err != nil {
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
		for k, b := range before {
			if b.had {
				s.sent[k] = b.hash
			} else {
				delete(s.sent, k)
			}
		}
		return send(done(s.generation, failed.Error()))
	}
	if err != nil {
		return err
	}
	diags := slices.Clone(s.diags)
	for _, name := range want {
		diags = append(diags, ts.state[name].diags...)
	}
	if err := s.sendDiagnostics(diags, send); err != nil {
		return err
	}
	return send(done(s.generation, ""))
}

// sentBefore is what session.sent held of a set before an update sent it.
type sentBefore struct {
	hash [sha256.Size]byte
	had  bool
}

// sendTarget sends one output set when it differs from what was sent, or
// always on a full update or when the cluster entered the scope, and
// records in before what s.sent held of it.
func (s *session) sendTarget(cluster, backend string, outs []Output, before map[outKey]sentBefore, send sender) error {
	k := outKey{cluster, backend}
	h := hashOutputs(outs)
	prev, had := s.sent[k]
	switch {
	case had && prev == h && !s.full:
		return nil
	case !had && len(outs) == 0 && !s.full && !s.entered(cluster):
		// Never sent and still empty: nothing changed for the host.
		s.sent[k] = h
		return nil
	}
	if _, ok := before[k]; !ok {
		before[k] = sentBefore{hash: prev, had: had}
	}
	for _, part := range splitOutputs(cluster, backend, outs, protocol.PartBytes) {
		if err := send(&translatorv1.TranslateResponse{Msg: &translatorv1.TranslateResponse_Output{Output: part}}); err != nil {
			return err
		}
	}
	s.sent[k] = h
	return nil
}

// computeTargets runs the targets on every core and hands each result to
// each on the calling goroutine as soon as it is computed, in the order
// they finish. At the first error each returns it starts no more targets,
// cancels those in progress and drops their results, and returns the
// error once they ended.
func (s *session) computeTargets(ctx context.Context, fleet *fleetData, names []string, each func(targetResult) error) error {
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
	for k, outs := range groups {
		res.groups[k.backend] = outs
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

// hashOutputs hashes an output set: identities, sizes and bodies.
func hashOutputs(outs []Output) [sha256.Size]byte {
	h := sha256.New()
	for _, o := range outs {
		fmt.Fprintf(h, "%s/%s/%s/%s/%s\x00%d\x00", o.Group, o.Version, o.Kind, o.Namespace, o.Name, len(o.Body))
		h.Write(o.Body)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}
