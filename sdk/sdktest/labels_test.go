package sdktest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/meshrelay/meshrelay/sdk"
)

// regional reads cluster labels the two ways translators do: per target,
// the target's own Services an AccessPolicy selects (its clusterSelector
// reads the target's labels), and fleet-wide, every Service a
// VirtualDestination selects in the clusters its clusterSelector picks.
type regional struct{}

func (regional) Describe() sdk.Description {
	return sdk.Description{Name: "regional", Version: "1", Backends: []string{"x"}, OutputKinds: []string{"/ConfigMap"}}
}

func (regional) TranslateTarget(_ context.Context, req *sdk.Request, resp *sdk.Response) error {
	for _, ap := range req.Fleet.AccessPolicies() {
		for _, d := range req.Target.Select(ap.Spec.DestinationSelectors) {
			resp.Emit(configMap("ap-"+ap.Name+"-"+d.Service.Name, nil), ap)
		}
	}
	for _, vd := range req.Fleet.VirtualDestinations() {
		var members []string
		for _, d := range req.Fleet.Select(vd.Spec.DestinationSelectors) {
			members = append(members, d.Cluster.Name+"/"+d.Service.Name)
		}
		resp.Emit(configMap("vd-"+vd.Name, map[string]any{"members": strings.Join(members, ",")}), vd)
	}
	return nil
}

// labeledFleet is a fleet of clusters c0… with the given labels, each with
// Services s0 and s1, an AccessPolicy selecting the clusters labelled
// region=eu and a VirtualDestination exporting s0 from the clusters
// labelled tier=gold.
func labeledFleet(tb testing.TB, labels []map[string]string) *Fixture {
	f := &Fixture{}
	for i, l := range labels {
		c := Cluster{Name: fmt.Sprintf("c%d", i), Labels: l}
		for _, s := range []string{"s0", "s1"} {
			c.Objects = append(c.Objects, raw(tb, map[string]any{"apiVersion": "v1", "kind": "Service", "metadata": map[string]any{"name": s, "namespace": "ns"}}))
		}
		f.Clusters = append(f.Clusters, c)
	}
	f.Policies = append(f.Policies, raw(tb, map[string]any{
		"apiVersion": "policy.meshrelay.io/v1alpha1", "kind": "AccessPolicy", "metadata": map[string]any{"name": "eu", "namespace": "ns"},
		"spec": map[string]any{"destinationSelectors": []any{map[string]any{"clusterSelector": map[string]any{"matchLabels": map[string]any{"region": "eu"}}}},
			"from": []any{map[string]any{"namespaces": []any{"ns"}}}},
	}), raw(tb, map[string]any{
		"apiVersion": "policy.meshrelay.io/v1alpha1", "kind": "VirtualDestination", "metadata": map[string]any{"name": "gold", "namespace": "ns"},
		"spec": map[string]any{"hostname": "gold.example.com", "ports": []any{map[string]any{"number": 80, "protocol": "HTTP"}},
			"destinationSelectors": []any{map[string]any{"names": []any{"s0"}, "clusterSelector": map[string]any{
				"matchExpressions": []any{map[string]any{"key": "tier", "operator": "In", "values": []any{"gold"}}}}}}},
	}))
	return f
}

func countOutputs(res *Result, cluster string) int {
	n := 0
	for _, o := range res.Outputs {
		if o.Cluster == cluster {
			n++
		}
	}
	return n
}

func cloneLabels(ls []map[string]string) []map[string]string {
	out := make([]map[string]string, len(ls))
	for i, l := range ls {
		out[i] = map[string]string{}
		for k, v := range l {
			out[i][k] = v
		}
	}
	return out
}

// Relabelling one cluster recomputes only the targets whose reads concern
// it: the cluster itself when it reads its own labels, and every target
// whose fleet-wide selection the new labels change; a change no selector
// sees recomputes nothing else.
func TestRelabelRecomputesOnlyWhatItConcerns(t *testing.T) {
	labels := []map[string]string{{"region": "eu"}, {"region": "eu"}, {"region": "us"}, {}}
	s := NewSession(t, regional{})
	res := s.Update(labeledFleet(t, labels))
	if got := s.Computed(); len(got) != 4 {
		t.Fatalf("full update computed %v, want every target", got)
	}
	if n := countOutputs(res, "c2"); n != 1 {
		t.Fatalf("c2 (region=us) has %d outputs, want only the VirtualDestination's", n)
	}
	all := []string{"c0", "c1", "c2", "c3"}
	steps := []struct {
		name   string
		change func([]map[string]string)
		want   []string
	}{
		{"c2 enters the AccessPolicy's clusterSelector", func(l []map[string]string) { l[2]["region"] = "eu" }, []string{"c2"}},
		{"c0 gains a label no selector looks at", func(l []map[string]string) { l[0]["team"] = "a" }, []string{"c0"}},
		{"c3, which no AccessPolicy selects, gains one no selector looks at", func(l []map[string]string) { l[3]["team"] = "b" }, []string{"c3"}},
		{"c1 enters the VirtualDestination's clusterSelector", func(l []map[string]string) { l[1]["tier"] = "gold" }, all},
		{"c1 leaves it", func(l []map[string]string) { delete(l[1], "tier") }, all},
		{"no change", func([]map[string]string) {}, nil},
	}
	for _, step := range steps {
		labels = cloneLabels(labels)
		step.change(labels)
		res = s.Update(labeledFleet(t, labels))
		if got := s.Computed(); !slices.Equal(got, step.want) {
			t.Errorf("%s: computed %v, want %v", step.name, got, step.want)
		}
	}
	if n := countOutputs(res, "c2"); n != 3 {
		t.Errorf("c2, now region=eu, has %d outputs, want the VirtualDestination's and the AccessPolicy's two", n)
	}
}

// Incremental translation equals full translation through random
// relabelling, with Services and clusters coming and going.
func TestRelabelIncrementalEqualsFull(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	labels := []map[string]string{{"region": "eu"}, {"tier": "gold"}, {}}
	fixtures := []*Fixture{labeledFleet(t, labels)}
	for range 40 {
		labels = cloneLabels(labels)
		l := labels[rng.IntN(len(labels))]
		switch rng.IntN(5) {
		case 0:
			l["region"] = []string{"eu", "us"}[rng.IntN(2)]
		case 1:
			l["tier"] = []string{"gold", "silver"}[rng.IntN(2)]
		case 2:
			clear(l)
		case 3:
			labels = append(labels, map[string]string{"region": "eu", "tier": "gold"})
		default:
			if len(labels) > 1 {
				labels = labels[:len(labels)-1]
			}
		}
		fixtures = append(fixtures, labeledFleet(t, labels))
	}
	CheckIncremental(t, regional{}, fixtures...)
}
