package gatewayapi_test

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/meshrelay/meshrelay/plugins/gatewayapi"
	"github.com/meshrelay/meshrelay/sdk/sdktest"
)

// edit returns a copy of f in which every object of cluster (policies
// when cluster is "") that keep accepts is replaced by what change makes
// of it (nil drops it), and add is appended.
func edit(t testing.TB, f *sdktest.Fixture, cluster string, change func(obj map[string]any) map[string]any, add ...map[string]any) *sdktest.Fixture {
	t.Helper()
	rewrite := func(objs []json.RawMessage) []json.RawMessage {
		var out []json.RawMessage
		for _, raw := range objs {
			var obj map[string]any
			if err := json.Unmarshal(raw, &obj); err != nil {
				t.Fatal(err)
			}
			if change != nil {
				obj = change(obj)
			}
			if obj == nil {
				continue
			}
			out = append(out, mustMarshal(t, obj))
		}
		for _, a := range add {
			out = append(out, mustMarshal(t, a))
		}
		return out
	}
	g := &sdktest.Fixture{Policies: slices.Clone(f.Policies)}
	if cluster == "" {
		g.Policies = rewrite(f.Policies)
	}
	for _, c := range f.Clusters {
		c.Objects = slices.Clone(c.Objects)
		c.Meshes = slices.Clone(c.Meshes)
		if c.Name == cluster {
			c.Objects = rewrite(c.Objects)
		}
		g.Clusters = append(g.Clusters, c)
	}
	return g
}

func mustMarshal(t testing.TB, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func load(t testing.TB, name string) *sdktest.Fixture {
	t.Helper()
	f, err := sdktest.LoadFixture(fixturePath(name))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// named returns a change applied to the objects of a kind and name.
func named(kind, name string, change func(obj map[string]any) map[string]any) func(map[string]any) map[string]any {
	return func(obj map[string]any) map[string]any {
		md, _ := obj["metadata"].(map[string]any)
		if obj["kind"] == kind && md["name"] == name {
			return change(obj)
		}
		return obj
	}
}

// changes are edits of the routes fixture, each concerning what one
// translation reads: a Service's ports, the mirror of a linked cluster,
// the Link itself, the opt-in label, a policy and a VirtualDestination.
func changes(t testing.TB) map[string]*sdktest.Fixture {
	base := load(t, "routes")
	drop := func(map[string]any) map[string]any { return nil }
	return map[string]*sdktest.Fixture{
		"service gets a second port": edit(t, base, "east", named("Service", "reviews", func(o map[string]any) map[string]any {
			spec := o["spec"].(map[string]any)
			spec["ports"] = append(spec["ports"].([]any), map[string]any{"name": "http-admin", "port": 9090})
			return o
		})),
		"mirror goes away": edit(t, base, "west", named("Service", "reviews-v2-east", drop)),
		"link goes away":   edit(t, base, "west", named("Mesh", "linkerd", func(o map[string]any) map[string]any { delete(o["spec"].(map[string]any), "linkedClusters"); return o })),
		"opt-in label lost": edit(t, base, "central", named("Namespace", "kube-system", func(o map[string]any) map[string]any {
			delete(o, "metadata")
			o["metadata"] = map[string]any{"name": "kube-system"}
			return o
		})),
		"north opts in": edit(t, base, "north", nil, map[string]any{
			"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "istio-system", "labels": map[string]any{gatewayapi.RoutesLabel: gatewayapi.RoutesValue}},
		}),
		"policy dropped": edit(t, base, "", named("TrafficPolicy", "reviews", drop)),
		"virtual destination loses west": edit(t, base, "", named("VirtualDestination", "reviews-global", func(o map[string]any) map[string]any {
			spec := o["spec"].(map[string]any)
			spec["services"] = spec["services"].([]any)[:1]
			return o
		})),
	}
}

// accessChanges are edits of the access fixture: the trust domain, a
// Service's ports and selector, a policy.
func accessChanges(t testing.TB) map[string]*sdktest.Fixture {
	base := load(t, "access")
	return map[string]*sdktest.Fixture{
		"trust domain changes": edit(t, base, "east", named("Mesh", "linkerd", func(o map[string]any) map[string]any {
			o["spec"].(map[string]any)["trustDomain"] = "corp.example"
			return o
		})),
		"service port renamed": edit(t, base, "east", named("Service", "details", func(o map[string]any) map[string]any {
			o["spec"].(map[string]any)["ports"].([]any)[1].(map[string]any)["name"] = "http-db"
			return o
		})),
		"service loses its selector": edit(t, base, "west", named("Service", "details", func(o map[string]any) map[string]any {
			delete(o["spec"].(map[string]any), "selector")
			return o
		})),
		"scoped policy dropped": edit(t, base, "", named("AccessPolicy", "reviews-get", func(map[string]any) map[string]any { return nil })),
	}
}

// TestIncrementalMatchesFull checks, for each change of a fixture and
// back, that the session's incremental answer equals a full translation.
func TestIncrementalMatchesFull(t *testing.T) {
	for fixture, cs := range map[string]map[string]*sdktest.Fixture{"routes": changes(t), "access": accessChanges(t)} {
		base := load(t, fixture)
		for name, changed := range cs {
			t.Run(fixture+"/"+name, func(t *testing.T) {
				sdktest.CheckIncremental(t, gatewayapi.New(), base, changed, base)
			})
		}
	}
}

// TestLocalChangeComputesItsTarget checks that a change to one cluster's
// Service computes that cluster's target only.
func TestLocalChangeComputesItsTarget(t *testing.T) {
	base := load(t, "routes")
	s := sdktest.NewSession(t, gatewayapi.New())
	s.Update(base)
	before := s.Update(base)
	if got := s.Computed(); len(got) != 0 {
		t.Fatalf("an unchanged fleet computed %v, want nothing", got)
	}
	after := s.Update(changes(t)["mirror goes away"])
	if got := s.Computed(); !slices.Equal(got, []string{"west"}) {
		t.Errorf("a change to west's Services computed %v, want [west]", got)
	}
	if a, b := mustMarshal(t, before.Outputs), mustMarshal(t, after.Outputs); string(a) == string(b) {
		t.Error("dropping the mirrored Service changed no output, want west's route without it")
	}
}
