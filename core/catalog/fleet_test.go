package catalog

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/meshrelay/meshrelay/api/snapshot"
)

// serviceInput is a cluster's input with a Service of each name in
// namespace app.
func serviceInput(t *testing.T, names []string) *snapshot.Snapshot {
	t.Helper()
	docs := make([]string, 0, len(names))
	for _, n := range names {
		docs = append(docs, fmt.Sprintf(`{apiVersion: v1, kind: Service, metadata: {name: %s, namespace: app}, spec: {selector: {app: %[1]s}, ports: [{port: 80}]}}`, n))
	}
	return input(t, docs...)
}

// A Cache that replaces a few clusters in the fleet it joined before
// answers what joining every cluster again gives: the clusters in order,
// each Service counted in the clusters that have it, none that no cluster
// has any more. Clusters come, change and go at random, one to eight at a
// time, over a fleet of up to 40.
func TestCacheUpdateEqualsJoin(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	services := []string{"web", "api", "db", "cache", "auth", "mail"}
	randomInput := func() *snapshot.Snapshot {
		var names []string
		for _, s := range services {
			if rng.IntN(2) == 0 {
				names = append(names, s)
			}
		}
		return serviceInput(t, names)
	}
	inputs := map[string]*snapshot.Snapshot{}
	for i := range 30 {
		inputs[fmt.Sprintf("c%02d", i)] = randomInput()
	}
	var c Cache
	c.Fleet(inputs)
	for step := range 200 {
		for range 1 + rng.IntN(8) {
			name := fmt.Sprintf("c%02d", rng.IntN(40))
			if rng.IntN(4) == 0 {
				delete(inputs, name)
			} else {
				inputs[name] = randomInput()
			}
		}
		got := c.Fleet(inputs)
		derived := make([]*Cluster, 0, len(inputs))
		for name, in := range inputs {
			derived = append(derived, Derive(name, in))
		}
		want := Join(derived)
		gotNames := clusterNames(got)
		if diff := cmp.Diff(clusterNames(want), gotNames); diff != "" {
			t.Fatalf("step %d: clusters (-joined +updated):\n%s", step, diff)
		}
		if !slices.IsSortedFunc(got.Clusters, byName) {
			t.Fatalf("step %d: clusters out of order: %v", step, gotNames)
		}
		if diff := cmp.Diff(want.services, got.services, cmp.AllowUnexported(serviceKey{})); diff != "" {
			t.Fatalf("step %d: service counts (-joined +updated):\n%s", step, diff)
		}
		for _, cl := range got.Clusters {
			if cl.Name == "" || inputs[cl.Name] == nil || len(cl.Destinations) != inputs[cl.Name].Len() {
				t.Fatalf("step %d: cluster %q does not hold its current input's objects", step, cl.Name)
			}
		}
	}
}

func clusterNames(f *Fleet) []string {
	var out []string
	for _, c := range f.Clusters {
		out = append(out, c.Name)
	}
	return out
}
