package rollout

import (
	"slices"
	"strings"
	"testing"
	"time"

	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// fleet is nine clusters labelled into three tiers, and one unlabelled.
func fleet() []policyv1alpha1.ClusterMeta {
	var out []policyv1alpha1.ClusterMeta
	for i, tier := range []string{"canary", "canary", "canary", "early", "early", "early", "main", "main", "main"} {
		out = append(out, policyv1alpha1.ClusterMeta{Name: string(rune('a' + i)), Labels: map[string]string{"tier": tier}})
	}
	return append(out, policyv1alpha1.ClusterMeta{Name: "z"})
}

func strategy(mod func(*policyv1alpha1.RolloutStrategySpec)) *policyv1alpha1.RolloutStrategySpec {
	tier := func(v string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{"tier": v}}
	}
	two := intstr.FromInt32(2)
	s := &policyv1alpha1.RolloutStrategySpec{
		MinHealthy: &metav1.Duration{Duration: time.Second},
		Stages: []policyv1alpha1.RolloutStage{
			{Name: "canary", ClusterSelector: tier("canary"), MaxConcurrent: &two},
			{Name: "early", ClusterSelector: tier("early")},
			{Name: "main", ClusterSelector: tier("main"), Approval: true},
		},
	}
	if mod != nil {
		mod(s)
	}
	return s
}

// phases returns each cluster's phase, as "name=phase", sorted.
func phases(r *Rollout) []string {
	var out []string
	for name, c := range r.Clusters {
		out = append(out, name+"="+string(c.Phase))
	}
	slices.Sort(out)
	return out
}

// healthy observes every released cluster healthy at now.
func healthy(r *Rollout, now time.Time) {
	for name := range r.Clusters {
		r.Observe(name, Health{Healthy: true}, now)
	}
}

func TestPlan(t *testing.T) {
	r := Plan(1, "old", "new", strategy(nil), fleet(), t0)
	var names []string
	for _, s := range r.Stages {
		names = append(names, s.Name)
	}
	if want := []string{"canary", "early", "main", "rest"}; !slices.Equal(names, want) {
		t.Fatalf("stages = %v, want %v", names, want)
	}
	if got := r.Clusters["z"].Stage; got != 3 {
		t.Errorf("unselected cluster's stage = %d, want the last (3)", got)
	}
	if got := r.Stages[0].MaxConcurrent; got != 2 {
		t.Errorf("canary MaxConcurrent = %d, want 2", got)
	}
	if got := r.Stages[1].MaxConcurrent; got != 3 {
		t.Errorf("early MaxConcurrent = %d, want all 3", got)
	}
	if got := r.Stages[0].MinHealthy; got != time.Second {
		t.Errorf("canary MinHealthy = %s, want the strategy's 1s", got)
	}
}

func TestStagesAdvanceWhenHealthyForMinHealthy(t *testing.T) {
	rec := &Record{Live: "old"}
	if !rec.Source("new", strategy(nil), fleet(), t0) {
		t.Fatal("Source(new) changed nothing, want a rollout")
	}
	r := rec.Active()
	want := []string{"a=Progressing", "b=Progressing", "c=Pending", "d=Pending", "e=Pending", "f=Pending", "g=Pending", "h=Pending", "i=Pending", "z=Pending"}
	if got := phases(r); !slices.Equal(got, want) {
		t.Fatalf("after start: %v, want %v (two at a time)", got, want)
	}
	revs, prev := rec.Revisions()
	if !slices.Equal(revs, []string{"old", "new"}) || slices.Contains(prev, "a") || !slices.Contains(prev, "c") {
		t.Fatalf("Revisions() = %v, %v", revs, prev)
	}

	now := t0.Add(100 * time.Millisecond)
	healthy(r, now)
	rec.Advance(now.Add(999 * time.Millisecond))
	if r.Clusters["a"].Phase != Releasing || r.Clusters["c"].Phase != Pending {
		t.Fatalf("before the soak: %v", phases(r))
	}
	rec.Advance(now.Add(time.Second))
	if r.Clusters["a"].Phase != Succeeded || r.Clusters["c"].Phase != Releasing || r.Stage != 0 {
		t.Fatalf("after a and b soaked: %v stage %d, want c released in stage 0", phases(r), r.Stage)
	}
	now = now.Add(2 * time.Second)
	healthy(r, now)
	rec.Advance(now.Add(time.Second))
	if r.Stage != 1 || r.Clusters["d"].Phase != Releasing || r.Clusters["f"].Phase != Releasing {
		t.Fatalf("after canary: %v stage %d, want early released at once", phases(r), r.Stage)
	}
	now = now.Add(2 * time.Second)
	healthy(r, now)
	rec.Advance(now.Add(time.Second))
	if r.Stage != 2 || r.Clusters["g"].Phase != Pending || !strings.Contains(r.Reason, "approval") {
		t.Fatalf("at the gate: %v stage %d reason %q, want main pending approval", phases(r), r.Stage, r.Reason)
	}
	if err := r.Approve("main", now.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	rec.Advance(now.Add(time.Second))
	if r.Clusters["g"].Phase != Releasing || r.Reason != "" {
		t.Fatalf("after approval: %v reason %q", phases(r), r.Reason)
	}
	for _, step := range []time.Duration{2, 4, 6} {
		healthy(r, now.Add(step*time.Second))
		rec.Advance(now.Add((step + 1) * time.Second))
	}
	if r.Phase != Completed || rec.Live != "new" || rec.Active() != nil {
		t.Fatalf("end: phase %s live %q, want Completed and new live", r.Phase, rec.Live)
	}
	if revs, prev := rec.Revisions(); !slices.Equal(revs, []string{"new"}) || prev != nil {
		t.Errorf("Revisions() after completion = %v, %v, want one revision", revs, prev)
	}
}

func TestUnhealthyResetsTheSoak(t *testing.T) {
	rec := &Record{Live: "old"}
	rec.Source("new", strategy(nil), fleet(), t0)
	r := rec.Active()
	healthy(r, t0)
	r.Observe("a", Health{Reason: "agent not connected"}, t0.Add(500*time.Millisecond))
	healthy(r, t0.Add(600*time.Millisecond))
	rec.Advance(t0.Add(1200 * time.Millisecond))
	if got := r.Clusters["a"].Phase; got != Releasing {
		t.Errorf("a after leaving mid-soak = %s, want still Progressing", got)
	}
	if got := r.Clusters["b"].Phase; got != Succeeded {
		t.Errorf("b = %s, want Succeeded", got)
	}
}

func TestFailureBeyondBudgetPauses(t *testing.T) {
	rec := &Record{Live: "old"}
	rec.Source("new", strategy(nil), fleet(), t0)
	r := rec.Active()
	r.Observe("a", Health{Failed: true, Reason: "apply errors"}, t0)
	rec.Advance(t0.Add(time.Millisecond))
	if r.Phase != Paused || !strings.Contains(r.Reason, "a (apply errors)") {
		t.Fatalf("phase %s reason %q, want Paused naming a", r.Phase, r.Reason)
	}
	rec.Advance(t0.Add(time.Hour))
	if r.Clusters["c"].Phase != Pending {
		t.Errorf("a paused rollout released c")
	}
	if err := r.Resume(t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	r.Observe("a", Health{Failed: true, Reason: "apply errors"}, t0.Add(time.Hour))
	rec.Advance(t0.Add(time.Hour))
	if r.Phase != Paused {
		t.Errorf("a failure that persists after Resume: phase %s, want Paused again", r.Phase)
	}

	budget := intstr.FromInt32(1)
	rec = &Record{Live: "old"}
	rec.Source("new", strategy(func(s *policyv1alpha1.RolloutStrategySpec) { s.MaxFailures = &budget }), fleet(), t0)
	rec.Rollout.Observe("a", Health{Failed: true, Reason: "apply errors"}, t0)
	rec.Advance(t0.Add(time.Millisecond))
	if rec.Rollout.Phase != Progressing {
		t.Errorf("one failure within a budget of 1: phase %s, want Progressing", rec.Rollout.Phase)
	}
}

func TestDeadlinePauses(t *testing.T) {
	rec := &Record{Live: "old"}
	rec.Source("new", strategy(func(s *policyv1alpha1.RolloutStrategySpec) {
		s.ProgressDeadline = &metav1.Duration{Duration: time.Minute}
	}), fleet(), t0)
	rec.Advance(t0.Add(time.Minute))
	if rec.Rollout.Phase != Progressing {
		t.Fatalf("at the deadline: %s", rec.Rollout.Phase)
	}
	rec.Advance(t0.Add(time.Minute + time.Millisecond))
	if rec.Rollout.Phase != Paused || !strings.Contains(rec.Rollout.Reason, "deadline") {
		t.Errorf("past the deadline: %s %q, want Paused", rec.Rollout.Phase, rec.Rollout.Reason)
	}
}

func TestSecondChangeWaitsAndCollapses(t *testing.T) {
	rec := &Record{Live: "old"}
	spec := strategy(func(s *policyv1alpha1.RolloutStrategySpec) { s.Stages = s.Stages[:1] })
	rec.Source("new", spec, fleet(), t0)
	if rec.Source("newer", spec, fleet(), t0) || rec.Source("newest", spec, fleet(), t0) {
		t.Fatal("a change during a rollout changed the record")
	}
	if revs, _ := rec.Revisions(); !slices.Equal(revs, []string{"old", "new"}) {
		t.Fatalf("Revisions() = %v, want at most two", revs)
	}
	now := t0
	for rec.Active() != nil && now.Before(t0.Add(time.Minute)) {
		healthy(rec.Rollout, now)
		rec.Advance(now)
		now = now.Add(500 * time.Millisecond)
	}
	if rec.Live != "new" {
		t.Fatalf("live = %q, want new", rec.Live)
	}
	if !rec.Source("newest", spec, fleet(), now) || rec.Rollout.From != "new" || rec.Rollout.To != "newest" || rec.Rollout.ID != 2 {
		t.Errorf("next rollout = %d %s→%s, want 2 new→newest", rec.Rollout.ID, rec.Rollout.From, rec.Rollout.To)
	}
}

func TestUndo(t *testing.T) {
	rec := &Record{Live: "old"}
	rec.Source("new", strategy(nil), fleet(), t0)
	if err := rec.Undo(t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if rec.Live != "old" || rec.Rejected != "new" {
		t.Fatalf("after undo: live %q rejected %q", rec.Live, rec.Rejected)
	}
	if revs, prev := rec.Revisions(); !slices.Equal(revs, []string{"old"}) || prev != nil {
		t.Errorf("Revisions() = %v, %v, want the old one only", revs, prev)
	}
	if rec.Source("new", strategy(nil), fleet(), t0.Add(2*time.Second)) {
		t.Error("the undone revision started again")
	}
	if err := rec.Undo(t0); err == nil {
		t.Error("Undo with no rollout in progress succeeded")
	}
	if !rec.Source("fixed", strategy(nil), fleet(), t0.Add(3*time.Second)) || rec.Rollout.To != "fixed" {
		t.Error("a new change after an undo did not start a rollout")
	}
}

func TestUndoCompleted(t *testing.T) {
	rec := &Record{Live: "old"}
	rec.Source("new", strategy(nil), fleet(), t0)
	rec.Rollout.Phase = Completed
	rec.settle()
	if err := rec.Undo(t0.Add(time.Second)); err != nil {
		t.Fatalf("undo of the completed rollout: %v", err)
	}
	if rec.Live != "old" || rec.Rejected != "new" || rec.Rollout.Phase != Undone {
		t.Fatalf("after undo: %s, live %q rejected %q", rec.Rollout.Phase, rec.Live, rec.Rejected)
	}
	if revs, prev := rec.Revisions(); !slices.Equal(revs, []string{"old"}) || prev != nil {
		t.Errorf("Revisions() = %v, %v, want the old one on every cluster", revs, prev)
	}
	if err := rec.Undo(t0.Add(2 * time.Second)); err == nil {
		t.Error("a second undo succeeded")
	}

	// Once a later revision is live, the completed rollout is history.
	rec = &Record{Live: "old"}
	rec.Source("new", strategy(nil), fleet(), t0)
	rec.Rollout.Phase = Completed
	rec.settle()
	rec.Live = "newer" // applied at once, the strategy gone
	if err := rec.Undo(t0.Add(time.Second)); err == nil {
		t.Error("undo of a rollout whose revision is no longer live succeeded")
	}
}

func TestWithoutStrategyAppliesAtOnce(t *testing.T) {
	rec := &Record{}
	if !rec.Source("first", strategy(nil), fleet(), t0) || rec.Live != "first" || rec.Rollout != nil {
		t.Fatalf("first revision: %+v, want live at once", rec)
	}
	if !rec.Source("second", nil, fleet(), t0) || rec.Live != "second" || rec.Rollout != nil {
		t.Fatalf("without a strategy: %+v, want live at once", rec)
	}
}

func TestRecordRoundTripKeepsTheStage(t *testing.T) {
	rec := &Record{Live: "old"}
	rec.Source("new", strategy(nil), fleet(), t0)
	healthy(rec.Rollout, t0)
	rec.Advance(t0.Add(time.Second))
	rec.Advance(t0.Add(time.Second))
	got, err := Decode(rec.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if got.Rollout.Stage != rec.Rollout.Stage || !slices.Equal(phases(got.Rollout), phases(rec.Rollout)) || !got.Rollout.StageStarted.Equal(rec.Rollout.StageStarted) {
		t.Errorf("decoded stage %d %v, want %d %v", got.Rollout.Stage, phases(got.Rollout), rec.Rollout.Stage, phases(rec.Rollout))
	}
	if got.Advance(t0.Add(time.Second)) {
		t.Error("advancing the decoded record at the same time changed it: a replica would repeat a step")
	}
}
