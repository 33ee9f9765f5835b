package bench

import (
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/pluginhost"
	"github.com/meshrelay/meshrelay/plugins/istio"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
)

// checkerFixture is a checker over one generated cluster, translated by
// the Istio plugin in process, and the cluster's simulated agent.
type checkerFixture struct {
	ch      *checker
	cluster *Cluster
	sim     *sim
	run     *chaosRun
	dir     string // the policies' directory
}

func newCheckerFixture(t *testing.T) *checkerFixture {
	t.Helper()
	l, err := pluginhost.InProcess(istio.New(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	f := &checkerFixture{ch: newChecker([]pluginhost.Translator{l}, nil)}
	if f.cluster, err = NewCluster(0, 3); err != nil {
		t.Fatal(err)
	}
	snap, err := f.cluster.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	f.ch.setInput(f.cluster.Name, snap)
	dir := t.TempDir()
	if err := writeFile(filepath.Join(dir, "access.yaml"), PolicyYAML("p0")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ch.setPoliciesDir(dir); err != nil {
		t.Fatal(err)
	}
	f.dir = dir
	f.sim = &sim{cluster: f.cluster, policy: newPolicyWatch(1), audit: newOutputAudit(f.cluster.Name)}
	f.run = &chaosRun{run: &run{sims: []*sim{f.sim}}}
	return f
}

// want returns the model's outputs.
func (f *checkerFixture) want(t *testing.T) map[string]map[string]*snapshot.Snapshot {
	t.Helper()
	want, err := f.ch.expected(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(want[f.cluster.Name]) == 0 {
		t.Fatal("the model has no outputs for the cluster")
	}
	return want
}

// deliver applies outputs to the agent's sink as the agent would.
func (f *checkerFixture) deliver(t *testing.T, outputs map[string]*snapshot.Snapshot, prune bool) {
	t.Helper()
	for backend, s := range outputs {
		if _, err := f.sim.Apply(t.Context(), backend, s, prune); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCheckerCatchesLostUpdate changes an input the agent never hears of:
// the checker's model moves on, and the comparison names the resource the
// agent holds stale; once delivered, nothing differs.
func TestCheckerCatchesLostUpdate(t *testing.T) {
	f := newCheckerFixture(t)
	before := f.want(t)
	f.deliver(t, before[f.cluster.Name], true)
	if diffs := f.run.differences(before); len(diffs) != 0 {
		t.Fatalf("the agent holds the model's outputs, yet the checker reports %+v", diffs)
	}

	snap, err := f.cluster.Change(1, "m7x")
	if err != nil {
		t.Fatal(err)
	}
	f.ch.setInput(f.cluster.Name, snap)
	after := f.want(t)
	diffs := f.run.differences(after)
	if len(diffs) != 1 || len(diffs[0].Stale) == 0 {
		t.Fatalf("an update the agent never received: differences = %+v, want stale resources of %s", diffs, f.cluster.Name)
	}
	if !strings.Contains(strings.Join(diffs[0].Stale, " "), "svc-001") {
		t.Errorf("stale resources %v do not name svc-001, the Service changed", diffs[0].Stale)
	}

	f.deliver(t, after[f.cluster.Name], true)
	if diffs := f.run.differences(after); len(diffs) != 0 {
		t.Fatalf("after delivery the checker still reports %+v", diffs)
	}
}

// TestCheckerCatchesWrongfulPrune delivers outputs lacking a resource the
// model holds: without pruning the sink keeps it and nothing is reported;
// with pruning allowed the deletion is a wrongful prune, and the agent's
// outputs miss the resource.
func TestCheckerCatchesWrongfulPrune(t *testing.T) {
	f := newCheckerFixture(t)
	want := f.want(t)
	f.deliver(t, want[f.cluster.Name], true)
	backend, full := "istio", want[f.cluster.Name]["istio"]
	victim := full.Resources()[0]
	partial, err := snapshot.New(full.Version()+1, full.Resources()[1:])
	if err != nil {
		t.Fatal(err)
	}

	f.deliver(t, map[string]*snapshot.Snapshot{backend: partial}, false)
	var ck Check
	f.run.audit(&ck, want)
	if ck.Deletions != 0 || ck.WrongfulPruneCount != 0 || len(f.run.differences(want)) != 0 {
		t.Fatalf("outputs delivered without pruning: %d deletions, %d wrongful prunes, differences %+v; want none",
			ck.Deletions, ck.WrongfulPruneCount, f.run.differences(want))
	}

	f.deliver(t, map[string]*snapshot.Snapshot{backend: partial}, true)
	ck = Check{}
	f.run.audit(&ck, want)
	if ck.WrongfulPruneCount != 1 || len(ck.WrongfulPrunes) != 1 || ck.WrongfulPrunes[0].ID != victim.ID.String() {
		t.Fatalf("a prune of %s, which the model holds: wrongful prunes = %d %+v", victim.ID, ck.WrongfulPruneCount, ck.WrongfulPrunes)
	}
	diffs := f.run.differences(want)
	if len(diffs) != 1 || len(diffs[0].Missing) != 1 {
		t.Fatalf("after the prune: differences = %+v, want the pruned resource missing", diffs)
	}
}

// TestCheckerCatchesBackwards delivers an output carrying an older change
// after a newer one: the audit reports it going backwards.
func TestCheckerCatchesBackwards(t *testing.T) {
	f := newCheckerFixture(t)
	var steps []map[string]*snapshot.Snapshot
	for _, marker := range []string{"m1x", "m2x"} {
		snap, err := f.cluster.Change(1, marker)
		if err != nil {
			t.Fatal(err)
		}
		f.ch.setInput(f.cluster.Name, snap)
		steps = append(steps, f.want(t)[f.cluster.Name])
	}
	f.deliver(t, steps[0], true)
	f.deliver(t, steps[1], true)
	var ck Check
	f.run.audit(&ck, nil)
	if ck.BackwardsCount != 0 {
		t.Fatalf("outputs moving forward reported backwards: %+v", ck.Backwards)
	}
	f.deliver(t, steps[0], true)
	f.run.audit(&ck, nil)
	if ck.BackwardsCount == 0 || ck.Backwards[0].Had != 2 || ck.Backwards[0].Got != 1 {
		t.Fatalf("m1x delivered after m2x: backwards = %+v", ck.Backwards)
	}
}

// TestCheckerJudgesEachClusterUnderItsRevision writes a second policy
// revision and places the cluster by a rollout status: while its stage is
// not released (Pending) it must hold the previous revision's outputs, and
// holding the new revision's is a difference; once released, the
// reverse; after an undo, the previous revision again.
func TestCheckerJudgesEachClusterUnderItsRevision(t *testing.T) {
	f := newCheckerFixture(t)
	old := f.want(t)[f.cluster.Name]
	from := f.ch.currentRevision()
	if err := writeFile(filepath.Join(f.dir, "access.yaml"), PolicyYAML("p1")); err != nil {
		t.Fatal(err)
	}
	if err := writeFile(filepath.Join(f.dir, "rollout.yaml"), ChaosStrategyYAML()); err != nil {
		t.Fatal(err)
	}
	to, err := f.ch.setPoliciesDir(f.dir)
	if err != nil {
		t.Fatal(err)
	}
	if to == from {
		t.Fatal("a new policy marker gave the same revision")
	}
	next := f.want(t)[f.cluster.Name]

	status := func(phase, state string) *relayv1.RolloutStatus {
		return &relayv1.RolloutStatus{Id: 1, Phase: phase, FromRevision: from, ToRevision: to, LiveRevision: from,
			Clusters: []*relayv1.RolloutCluster{{Name: f.cluster.Name, Stage: "late", State: state}}}
	}
	for name, tc := range map[string]struct {
		st         *relayv1.RolloutStatus
		want, held map[string]*snapshot.Snapshot
	}{
		"pending holds the new revision":     {st: status("Progressing", "Pending"), want: old, held: next},
		"paused, pending, holds the new":     {st: status("Paused", "Pending"), want: old, held: next},
		"released holds the old revision":    {st: status("Progressing", "Progressing"), want: next, held: old},
		"undone holds the undone revision":   {st: status("Undone", "Pending"), want: old, held: next},
		"no rollout yet holds an older one":  {st: nil, want: next, held: old},
		"succeeded holds the old revision":   {st: status("Progressing", "Succeeded"), want: next, held: old},
		"completed, live, holds the old one": {st: &relayv1.RolloutStatus{Id: 1, Phase: "Completed", FromRevision: from, ToRevision: to, LiveRevision: to}, want: next, held: old},
	} {
		t.Run(name, func(t *testing.T) {
			want, err := f.ch.expectedOn(t.Context(), placementOf(tc.st, to))
			if err != nil {
				t.Fatal(err)
			}
			if got := want[f.cluster.Name]["istio"].Hash(); got != tc.want["istio"].Hash() {
				t.Fatalf("expectedOn(%v) gives %s, want the revision's %s", tc.st, got.Short(), tc.want["istio"].Hash().Short())
			}
			f.deliver(t, tc.held, true)
			diffs := f.run.differences(want)
			if len(diffs) != 1 || len(diffs[0].Stale) == 0 {
				t.Fatalf("the agent holds the other revision's outputs: differences = %+v, want stale resources", diffs)
			}
			f.deliver(t, tc.want, true)
			if diffs := f.run.differences(want); len(diffs) != 0 {
				t.Fatalf("the agent holds its revision's outputs, yet differences = %+v", diffs)
			}
		})
	}

	st := status("Progressing", "Pending")
	st.ToRevision = strings.Repeat("ab", 32)
	if _, err := f.ch.expectedOn(t.Context(), placementOf(st, to)); err == nil || !strings.Contains(err.Error(), "none of the") {
		t.Errorf("a record naming a revision the soak never wrote: err = %v", err)
	}
}

// TestUndoExcusesBackwards: a policy marker going back from an undone
// rollout's revision to its previous one is the undo; any other policy
// marker going back is not.
func TestUndoExcusesBackwards(t *testing.T) {
	c := &chaosRun{ops: newRolloutOps(1)}
	c.ops.undone[[2]int{3, 2}] = true
	for b, want := range map[Backwards]bool{
		{Marker: "policy", Had: 3, Got: 2}: true,
		{Marker: "policy", Had: 3, Got: 1}: false,
		{Marker: "policy", Had: 4, Got: 2}: false,
		{Marker: "input", Had: 3, Got: 2}:  false,
	} {
		if got := c.excused(b); got != want {
			t.Errorf("excused(%+v) = %t, want %t", b, got, want)
		}
	}
	if (&chaosRun{}).excused(Backwards{Marker: "policy", Had: 3, Got: 2}) {
		t.Error("without rollouts, a policy marker going back was excused")
	}
}

func TestMarkersOf(t *testing.T) {
	got := markersOf([]byte(`{"a":"m12x","b":"m3x","paths":["/p4/*"],"ep":["100.64.1.2","100.65.0.0","10.0.0.1"]}`))
	want := map[string]int{"input": 12, "policy": 4, "endpoint": 1 << 16}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("markersOf: %s = %d, want %d (all: %v)", k, got[k], v, got)
		}
	}
}

func TestSeriesGrowth(t *testing.T) {
	sr := &series{name: "x", unit: "bytes"}
	base := time.Unix(0, 0)
	for i := range 61 { // first life: one sample a minute for an hour, +100/min
		sr.samples = append(sr.samples, sample{at: base.Add(time.Duration(i) * time.Minute), value: float64(1000 + 100*i), life: "1"})
	}
	for i := range 5 { // a short second life
		sr.samples = append(sr.samples, sample{at: base.Add(time.Duration(61+i) * time.Minute), value: 5, life: "2"})
	}
	g := seriesGrowth(sr, 10*time.Minute)
	if g.Incarnations != 2 || g.Samples != 51 || math.Abs(g.PerHour-6000) > 1e-6 || g.Minutes != 50 {
		t.Fatalf("growth = %+v, want 2 lives, 51 samples over 50 min, 6000/h", g)
	}
}

// TestRolloutOpsNotices reads a sequence of rollout statuses as the soak
// would: a released cluster back to Pending without an undo, and a record
// gone back to an older rollout, are each reported; an undo is not, nor
// is a record missing for a while (lost, then written back).
func TestRolloutOpsNotices(t *testing.T) {
	st := func(id uint64, phase, state string) *relayv1.RolloutStatus {
		return &relayv1.RolloutStatus{Id: id, Phase: phase, Clusters: []*relayv1.RolloutCluster{{Name: "a", State: state}}}
	}
	o := newRolloutOps(1)
	for _, s := range []*relayv1.RolloutStatus{st(1, "Progressing", "Pending"), st(1, "Progressing", "Progressing"), st(1, "Undone", "Pending"), st(2, "Progressing", "Succeeded")} {
		o.note(s, 0)
	}
	if len(o.rep.Unreleased)+len(o.rep.Lost) != 0 || o.rep.Started != 2 {
		t.Fatalf("a release, an undo and a new rollout: unreleased %v, lost %v, %d started; want none, none, 2", o.rep.Unreleased, o.rep.Lost, o.rep.Started)
	}
	o.note(st(2, "Progressing", "Pending"), 1)
	if len(o.rep.Unreleased) != 1 || !strings.Contains(o.rep.Unreleased[0], "a of rollout 2, Succeeded before") {
		t.Errorf("a released cluster back to Pending: unreleased = %v", o.rep.Unreleased)
	}
	o.note(nil, 2)
	if len(o.rep.Lost) != 0 || !o.gone(nil) {
		t.Errorf("no record, as between a loss and its write-back: lost = %v, gone = %t; want none yet, gone", o.rep.Lost, o.gone(nil))
	}
	o.note(st(2, "Progressing", "Pending"), 3)
	if len(o.rep.Lost) != 0 {
		t.Errorf("the record written back: lost = %v", o.rep.Lost)
	}
	o.note(st(1, "Completed", "Succeeded"), 4)
	if len(o.rep.Lost) != 1 {
		t.Errorf("the record back to an older rollout: lost = %v", o.rep.Lost)
	}
}
