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

// targets are the per-target computations of a TargetTranslator's session.
type targets struct {
	state map[string]*targetState
	// byCluster indexes the targets by the clusters their reads are
	// bound to; global holds the targets with fleet-wide reads.
	byCluster map[string]map[string]bool
	global    map[string]bool
	shared    *sharedValues
	// computed counts target computations, for tests and benchmarks.
	computed int
}

func newTargets() *targets {
	return &targets{state: map[string]*targetState{}, byCluster: map[string]map[string]bool{}, global: map[string]bool{}, shared: newSharedValues()}
}

// set records a target's new state, replacing the old one in the indexes.
func (ts *targets) set(name string, st *targetState) {
	ts.drop(name)
	ts.state[name] = st
	clusters, global := st.reads.clusters()
	for _, c := range clusters {
		if ts.byCluster[c] == nil {
			ts.byCluster[c] = map[string]bool{}
		}
		ts.byCluster[c][name] = true
	}
	if global {
		ts.global[name] = true
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
		delete(ts.byCluster[c], name)
		if len(ts.byCluster[c]) == 0 {
			delete(ts.byCluster, c)
		}
	}
	delete(ts.global, name)
	delete(ts.state, name)
}

// reset forgets every target and shared value, as a full update does.
func (ts *targets) reset() {
	ts.state = map[string]*targetState{}
	ts.byCluster = map[string]map[string]bool{}
	ts.global = map[string]bool{}
	ts.shared.reset()
}

// dirty returns the targets of want that must be computed after change c:
// those never computed and those with a read that c concerns.
func (ts *targets) dirty(want []string, c *change) []string {
	candidates := map[string]bool{}
	if c.global() {
		maps.Copy(candidates, ts.global)
	}
	for _, name := range c.clusters() {
		maps.Copy(candidates, ts.byCluster[name])
	}
	var out []string
	for _, name := range want {
		st, ok := ts.state[name]
		if !ok || (candidates[name] && c.touches(st.reads)) {
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

// commitTargets answers an update of a TargetTranslator: it computes the
// targets the update concerns, in parallel, and sends the output sets that
// changed and every diagnostic.
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
	results := s.computeTargets(ctx, fleet, dirty)
	ts.computed += len(dirty)
	for _, r := range results {
		if r.err != nil {
			// Nothing of this update was sent: compute its targets again next time.
			for _, name := range dirty {
				ts.drop(name)
			}
			return send(done(s.generation, r.err.Error()))
		}
	}
	for _, r := range results {
		ts.set(r.name, r.state)
		for _, b := range s.desc.Backends {
			if err := s.sendTarget(r.name, b, r.groups[b], send); err != nil {
				return err
			}
		}
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

// sendTarget sends one output set when it differs from what was sent, or
// always on a full update.
func (s *session) sendTarget(cluster, backend string, outs []Output, send sender) error {
	k := outKey{cluster, backend}
	h := hashOutputs(outs)
	prev, had := s.sent[k]
	switch {
	case had && prev == h && !s.full:
		return nil
	case !had && len(outs) == 0 && !s.full:
		// Never sent and still empty: nothing changed for the host.
		s.sent[k] = h
		return nil
	}
	for _, part := range splitOutputs(cluster, backend, outs, protocol.PartBytes) {
		if err := send(&translatorv1.TranslateResponse{Msg: &translatorv1.TranslateResponse_Output{Output: part}}); err != nil {
			return err
		}
	}
	s.sent[k] = h
	return nil
}

// computeTargets runs the targets on every core; results come back in the
// order of names.
func (s *session) computeTargets(ctx context.Context, fleet *fleetData, names []string) []targetResult {
	results := make([]targetResult, len(names))
	workers := min(runtime.GOMAXPROCS(0), len(names))
	next := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				results[i] = s.computeTarget(ctx, fleet, fleet.byName[names[i]])
			}
		}()
	}
	for i := range names {
		next <- i
	}
	close(next)
	wg.Wait()
	return results
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
	req := &TargetRequest{Target: cd.handle(rec), Fleet: fleet.view(rec)}
	resp := NewResponse(s.desc.Name, s.desc.Backends)
	resp.target = cd.name
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
