package sdktest

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/meshrelay/meshrelay/sdk"
)

// clientsOf emits, in each target where an AccessPolicy selects a
// Service, the clusters whose clients its client selectors admit, as
// sdk.Fleet.ClientClusters resolves them: only those targets read them.
type clientsOf struct{}

func (clientsOf) Describe() sdk.Description {
	return sdk.Description{Name: "clients", Version: "1", Backends: []string{"x"}, OutputKinds: []string{"/ConfigMap"}}
}

func (clientsOf) TranslateTarget(_ context.Context, req *sdk.Request, resp *sdk.Response) error {
	for _, ap := range req.Fleet.AccessPolicies() {
		if len(req.Target.Select(ap.Spec.DestinationSelectors)) == 0 {
			continue
		}
		var admitted []string
		for i := range ap.Spec.From {
			cc := req.Fleet.ClientClusters(&ap.Spec.From[i])
			switch {
			case cc.Any:
				admitted = append(admitted, "*")
			case cc.None():
				admitted = append(admitted, "-")
			default:
				admitted = append(admitted, strings.Join(cc.Names, "+"))
			}
		}
		resp.Emit(configMap("ap-"+ap.Name, map[string]any{"clients": strings.Join(admitted, ",")}), ap)
	}
	return nil
}

// clientFleet is a fleet of the clusters named, with the labels given,
// where only c0 and c1 run Service api, and an AccessPolicy protecting
// api whose clients are those of the clusters labelled region=eu.
func clientFleet(tb testing.TB, labels map[string]map[string]string) *Fixture {
	f := &Fixture{}
	for _, name := range slices.Sorted(maps.Keys(labels)) {
		c := Cluster{Name: name, Labels: labels[name]}
		svc := "other"
		if name == "c0" || name == "c1" {
			svc = "api"
		}
		c.Objects = append(c.Objects, raw(tb, map[string]any{"apiVersion": "v1", "kind": "Service", "metadata": map[string]any{"name": svc, "namespace": "ns"}}))
		f.Clusters = append(f.Clusters, c)
	}
	f.Policies = append(f.Policies, raw(tb, map[string]any{
		"apiVersion": "policy.meshrelay.io/v1alpha1", "kind": "AccessPolicy", "metadata": map[string]any{"name": "api", "namespace": "ns"},
		"spec": map[string]any{"destinationSelectors": []any{map[string]any{"names": []any{"api"}}},
			"from": []any{map[string]any{"clusterSelector": map[string]any{"matchLabels": map[string]any{"region": "eu"}}}}},
	}))
	return f
}

func clientsIn(res *Result, cluster string) string {
	for _, o := range res.Outputs {
		if o.Cluster == cluster {
			var cm struct{ Data map[string]string }
			if err := json.Unmarshal(o.Body, &cm); err != nil {
				return err.Error()
			}
			return cm.Data["clients"]
		}
	}
	return ""
}

// A client selector's clusterSelector is a read of which clusters it
// matches: relabelling a cluster, or a cluster joining or leaving,
// recomputes the targets that read the selector when the cluster enters
// or leaves it, and no target (besides a new one, or the cluster's own
// when its agent comes or goes) otherwise: a matching cluster's agent
// going away does not change which clusters the selector matches.
func TestClientClustersRecomputeOnlyWhatTheyConcern(t *testing.T) {
	labels := map[string]map[string]string{"c0": {"region": "eu"}, "c1": {"region": "us"}, "c2": {"region": "us"}, "c3": {}}
	s := NewSession(t, clientsOf{})
	res := s.Update(clientFleet(t, labels))
	if got := clientsIn(res, "c1"); got != "c0" {
		t.Fatalf("c1's clients = %q, want c0", got)
	}
	steps := []struct {
		name    string
		change  func(map[string]map[string]string)
		stale   string // a cluster whose agent is away after the change
		want    []string
		clients string
	}{
		{"c2 enters the selector", func(l map[string]map[string]string) { l["c2"]["region"] = "eu" }, "", []string{"c0", "c1"}, "c0+c2"},
		{"c2 goes stale, still a cluster it matches", func(map[string]map[string]string) {}, "c2", []string{"c2"}, "c0+c2"},
		{"c2 is back", func(map[string]map[string]string) {}, "", []string{"c2"}, "c0+c2"},
		{"c3 gains a label the selector does not look at", func(l map[string]map[string]string) { l["c3"]["team"] = "a" }, "", nil, "c0+c2"},
		{"c1 changes region outside the selector", func(l map[string]map[string]string) { l["c1"]["region"] = "asia" }, "", nil, "c0+c2"},
		{"c4 joins with labels it matches", func(l map[string]map[string]string) { l["c4"] = map[string]string{"region": "eu"} }, "", []string{"c0", "c1", "c4"}, "c0+c2+c4"},
		{"c5 joins with labels it does not match", func(l map[string]map[string]string) { l["c5"] = map[string]string{"region": "us"} }, "", []string{"c5"}, "c0+c2+c4"},
		{"c5 leaves", func(l map[string]map[string]string) { delete(l, "c5") }, "", nil, "c0+c2+c4"},
		{"c4 leaves", func(l map[string]map[string]string) { delete(l, "c4") }, "", []string{"c0", "c1"}, "c0+c2"},
		{"every cluster leaves the selector", func(l map[string]map[string]string) { l["c0"]["region"], l["c2"]["region"] = "us", "us" }, "", []string{"c0", "c1"}, "-"},
	}
	for _, step := range steps {
		next := map[string]map[string]string{}
		for n, l := range labels {
			next[n] = map[string]string{}
			for k, v := range l {
				next[n][k] = v
			}
		}
		step.change(next)
		labels = next
		fx := clientFleet(t, labels)
		for i := range fx.Clusters {
			fx.Clusters[i].Stale = fx.Clusters[i].Name == step.stale
		}
		res = s.Update(fx)
		if got := s.Computed(); !slices.Equal(got, step.want) {
			t.Errorf("%s: computed %v, want %v", step.name, got, step.want)
		}
		if got := clientsIn(res, "c1"); got != step.clients {
			t.Errorf("%s: c1's clients = %q, want %q", step.name, got, step.clients)
		}
	}
}

// Incremental translation of client selectors equals full translation
// through random relabelling, with clusters coming and going.
func TestClientClustersIncrementalEqualsFull(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	labels := map[string]map[string]string{"c0": {"region": "eu"}, "c1": {}, "c2": {"region": "us"}}
	fixtures := []*Fixture{clientFleet(t, labels)}
	for i := range 40 {
		next := map[string]map[string]string{}
		for n, l := range labels {
			next[n] = map[string]string{}
			for k, v := range l {
				next[n][k] = v
			}
		}
		names := slices.Sorted(maps.Keys(next))
		name := names[rng.IntN(len(names))]
		switch rng.IntN(4) {
		case 0:
			next[name]["region"] = []string{"eu", "us"}[rng.IntN(2)]
		case 1:
			clear(next[name])
		case 2:
			next[fmt.Sprintf("n%d", i)] = map[string]string{"region": "eu"}
		default:
			if name != "c0" && name != "c1" {
				delete(next, name)
			}
		}
		labels = next
		fixtures = append(fixtures, clientFleet(t, labels))
	}
	CheckIncremental(t, clientsOf{}, fixtures...)
}
