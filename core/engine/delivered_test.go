package engine

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/pluginhost"
)

// fixedSets answers every update with the same sets, empty ones included.
type fixedSets struct{ sets []pluginhost.ClusterOutput }

func (f fixedSets) Name() string          { return "fixed" }
func (f fixedSets) Backends() []string    { return []string{"netpol"} }
func (f fixedSets) Meshes() []string      { return nil }
func (f fixedSets) InputKinds() []string  { return nil }
func (f fixedSets) OutputKinds() []string { return []string{"/ConfigMap"} }
func (f fixedSets) Translate(context.Context, pluginhost.View) (pluginhost.Result, error) {
	return pluginhost.Result{Sent: true, Outputs: f.sets}, nil
}

// TestFirstAnswerComparesWithDelivered: an answer for a key the engine
// holds no output of is compared with the output delivered before, so an
// agent holding an output that changed or emptied meanwhile gets the new
// one, and one holding the same gets nothing.
func TestFirstAnswerComparesWithDelivered(t *testing.T) {
	cm := []snapshot.Resource{configMap(t, "a")}
	same, err := snapshot.New(3, cm)
	if err != nil {
		t.Fatal(err)
	}
	older, err := snapshot.New(7, []snapshot.Resource{configMap(t, "old")})
	if err != nil {
		t.Fatal(err)
	}
	// The store holds outputs delivered before the engine started (by
	// another replica, or before a restart).
	v := NewMemView()
	for _, c := range []string{"same", "changed", "emptied", "never"} {
		v.SetInput(c, input(t, 1, "istio", "s"))
	}
	v.Deliver(Ready{Outputs: []Output{
		{Key: OutputKey{Cluster: "same", Backend: "netpol"}, Snapshot: same},
		{Key: OutputKey{Cluster: "changed", Backend: "netpol"}, Snapshot: older},
		{Key: OutputKey{Cluster: "emptied", Backend: "netpol"}, Snapshot: same},
	}})
	e := New([]pluginhost.Translator{fixedSets{sets: []pluginhost.ClusterOutput{
		{Cluster: "changed", Backend: "netpol", Resources: cm},
		{Cluster: "emptied", Backend: "netpol"},
		{Cluster: "never", Backend: "netpol"},
		{Cluster: "same", Backend: "netpol", Resources: cm},
	}}}, Options{View: v})

	r := e.Step(context.Background())
	type handed struct {
		Key       string
		Version   uint64
		Resources int
	}
	var got []handed
	for _, o := range r.Outputs {
		got = append(got, handed{o.Key.String(), o.Snapshot.Version(), o.Snapshot.Len()})
	}
	want := []handed{{"changed/netpol", 8, 1}, {"emptied/netpol", 4, 0}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("handed on (-want +got):\n%s", diff)
	}
	if want := []Current{{Key: OutputKey{Cluster: "same", Backend: "netpol"}, Hash: same.Hash()}}; !cmp.Equal(want, r.Current) {
		t.Errorf("current as delivered before: %+v, want %+v", r.Current, want)
	}
	if m, ok := e.Mark(OutputKey{Cluster: "same", Backend: "netpol"}); !ok || m.Version != 3 || m.Hash != same.Hash() {
		t.Errorf("the engine does not hold the output delivered before, unchanged, at version 3 (holds one: %v)", ok)
	}
	if r := e.Step(context.Background()); len(r.Outputs)+len(r.Current) != 0 {
		t.Errorf("the same answer again handed on %d outputs, %d current", len(r.Outputs), len(r.Current))
	}
}

func configMap(t testing.TB, name string) snapshot.Resource {
	r, err := snapshot.FromJSON([]byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"` + name + `","namespace":"default"}}`))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestResumeReportsOutputsAsCurrent: after Resume, the next cycle reports
// the cluster's outputs it does not hand on as current, changed or not,
// once; one it hands on is not reported twice.
func TestResumeReportsOutputsAsCurrent(t *testing.T) {
	v := NewMemView()
	for _, c := range []string{"a", "b"} {
		v.SetInput(c, input(t, 1, "istio", "s"))
	}
	sets := []pluginhost.ClusterOutput{
		{Cluster: "a", Backend: "netpol", Resources: []snapshot.Resource{configMap(t, "a")}},
		{Cluster: "b", Backend: "netpol", Resources: []snapshot.Resource{configMap(t, "b")}},
	}
	e := New([]pluginhost.Translator{fixedSets{sets: sets}}, Options{View: v})
	if r := e.Step(t.Context()); len(r.Outputs) != 2 || len(r.Current) != 0 {
		t.Fatalf("the first cycle handed on %d outputs and %d current, want 2 and 0", len(r.Outputs), len(r.Current))
	}
	keyA := OutputKey{Cluster: "a", Backend: "netpol"}
	markA, _ := e.Mark(keyA)

	e.Resume("a")
	r := e.Step(t.Context())
	if want := []Current{{Key: keyA, Hash: markA.Hash}}; len(r.Outputs) != 0 || !cmp.Equal(want, r.Current) {
		t.Errorf("after Resume(a): handed on %d outputs, current %+v; want none and %+v", len(r.Outputs), r.Current, want)
	}
	if r := e.Step(t.Context()); len(r.Outputs)+len(r.Current) != 0 {
		t.Errorf("the cycle after handed on %d outputs and %d current, want none", len(r.Outputs), len(r.Current))
	}

	// Resumed with a changed answer, the output is handed on, not also
	// reported current.
	sets[0].Resources = []snapshot.Resource{configMap(t, "a2")}
	e.Resume("a")
	r = e.Step(t.Context())
	if len(r.Outputs) != 1 || r.Outputs[0].Key != keyA || len(r.Current) != 0 {
		t.Errorf("after Resume(a) with a changed answer: handed on %v, current %+v; want a's output only", r.Outputs, r.Current)
	}
}
