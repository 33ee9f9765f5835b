package engine

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/pluginhost"
)

// untracked is a fleet's view without Has: its engine reads it whole
// every cycle.
type untracked struct{ v *trackedView }

func (u untracked) Clusters() []string { return u.v.Clusters() }
func (u untracked) Input(c string) (*snapshot.Snapshot, bool, bool) {
	return u.v.Input(c)
}
func (u untracked) Delivered(c, b string) (*snapshot.Snapshot, bool) { return u.v.Delivered(c, b) }
func (u untracked) Labels(c string) map[string]string                { return u.v.Labels(c) }

// TestTrackedReadEqualsWholeRead: an engine over a Tracked view reads
// only the clusters named since its last cycle, and does what an engine
// reading the whole view every cycle does — the same view, outputs and
// settled revisions — after random joins, changes of input, staleness
// and labels, departures, policy and target changes, and inputs that
// could not be read for a while (a cluster keeps its last state
// meanwhile, and is read again once it can be, though nothing names it
// again). Scoped and not; with fakes that take every view whole, and with
// an SDK translator behind the real host session, which compares the
// clusters named with what they were, as the engine changes its view in
// place.
func TestTrackedReadEqualsWholeRead(t *testing.T) {
	translators := map[string]func(t *testing.T) []pluginhost.Translator{
		"counters": func(*testing.T) []pluginhost.Translator {
			return []pluginhost.Translator{newCounter("istio"), newCounter("netpol")}
		},
		"sdk": func(t *testing.T) []pluginhost.Translator {
			l, err := pluginhost.InProcess(perService{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(l.Close)
			return []pluginhost.Translator{l}
		},
	}
	for _, kind := range slices.Sorted(maps.Keys(translators)) {
		for _, scoped := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/scoped=%v", kind, scoped), func(t *testing.T) {
				testTrackedReadEqualsWholeRead(t, scoped, translators[kind])
			})
		}
	}
}

func testTrackedReadEqualsWholeRead(t *testing.T, scoped bool, translators func(*testing.T) []pluginhost.Translator) {
	ctx := context.Background()
	named := newFleet(Options{Scoped: scoped}, translators(t)...)
	whole := newFleet(Options{Scoped: scoped}, translators(t)...)
	whole.Engine = New(translators(t), Options{Scoped: scoped, View: untracked{whole.view}})
	fleets := []*fleet{named, whole}
	rng := rand.New(rand.NewPCG(7, 33))
	meshes := []string{"istio", "cilium"}
	var version uint64
	failing := map[string]bool{}
	for step := range 400 {
		name := "c" + strconv.Itoa(rng.IntN(20))
		op := rng.IntN(12)
		version++
		var services []string
		for i := range rng.IntN(3) {
			services = append(services, "s"+strconv.Itoa(i))
		}
		in := input(t, version, meshes[rng.IntN(2)], services...)
		labels := map[string]string{"tier": strconv.Itoa(rng.IntN(2))}
		stale := rng.IntN(2) == 0
		policies := policySet(t, "p"+strconv.Itoa(rng.IntN(3)))
		if op == 9 {
			failing[name] = !failing[name]
		}
		for _, f := range fleets {
			switch {
			case op < 4:
				f.SetInput(name, in)
			case op < 6:
				f.SetStale(name, stale)
			case op < 7:
				f.SetLabels(name, labels)
			case op < 8:
				f.RemoveCluster(name)
			case op < 9:
				f.SetPolicies(policies)
			case op < 10:
				f.SetFailing(name, failing[name])
			default:
				f.SetTarget(name, stale)
			}
		}
		if rng.IntN(3) > 0 {
			continue
		}
		for _, f := range fleets {
			f.cycle(ctx)
		}
		if named.wholeReads != 1 {
			t.Fatalf("step %d: the Tracked view was read whole %d times, want once (the first cycle)", step, named.wholeReads)
		}
		if msg := sameStates(whole.Engine.last, named.Engine.last); msg != "" {
			t.Fatalf("step %d: the view read by the changed clusters differs from the whole view: %s", step, msg)
		}
		if diff := cmp.Diff(whole.settled, named.settled); diff != "" {
			t.Fatalf("step %d: settled revisions (-whole +named):\n%s", step, diff)
		}
		if diff := cmp.Diff(whole.handed, named.handed); diff != "" {
			t.Fatalf("step %d: outputs handed on (-whole +named):\n%s", step, diff)
		}
		for i := range 20 {
			for _, backend := range []string{"istio", "netpol"} {
				key := OutputKey{Cluster: "c" + strconv.Itoa(i), Backend: backend}
				w, wok := whole.output(key)
				n, nok := named.output(key)
				if wok != nok || (wok && w.Hash() != n.Hash()) {
					t.Fatalf("step %d: output %s differs from the one as read whole (held: %v, %v)", step, key, nok, wok)
				}
			}
		}
	}
}

// translatorsOf returns new counters for the backends of e's translators.
func translatorsOf(e *Engine, t *testing.T) []pluginhost.Translator {
	t.Helper()
	var out []pluginhost.Translator
	for _, ts := range e.translators {
		out = append(out, newCounter(ts.t.Backends()[0]))
	}
	return out
}

// sameStates says how two views differ; "" when they do not.
func sameStates(want, got map[string]clusterState) string {
	for _, name := range slices.Sorted(maps.Keys(want)) {
		w, g := want[name], got[name]
		if _, ok := got[name]; !ok {
			return fmt.Sprintf("%s is missing", name)
		}
		if !w.Same(g) {
			return fmt.Sprintf("%s is %+v, want %+v", name, g, w)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			return fmt.Sprintf("%s left the fleet but is still in the view", name)
		}
	}
	return ""
}
