package sdk

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/api/snapshot"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestReadIndexFindsWhatEverySetWould files random read sets in a
// readIndex, changes, replaces and drops them, and checks after each step
// that a random change touches exactly the names whose sets c.touches
// concerns when asked one by one.
func TestReadIndexFindsWhatEverySetWould(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	clusters := []string{"c0", "c1", "c2", "c3"}
	meshes := []string{"istio", "cilium"}
	pick := func(xs []string) string { return xs[rng.IntN(len(xs))] }
	selectors := [][]policyv1alpha1.DestinationSelector{
		{{Namespaces: []string{"shop"}}},
		{{Labels: map[string]string{"app": "api"}}},
		{{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}}},
		{{Clusters: []string{"c1"}, Names: []string{"api"}}},
	}
	labelSets := []map[string]string{nil, {"env": "prod"}, {"env": "dev"}}

	randomSet := func() *readSet {
		rec := newRecorder()
		for range 1 + rng.IntN(5) {
			c := pick(clusters)
			switch rng.IntN(12) {
			case 0:
				rec.add(read{op: readObjects, cluster: c, kind: "Service"})
			case 1:
				rec.add(read{op: readObject, cluster: c, kind: "Service", namespace: "shop", name: pick([]string{"api", "web"})})
			case 2:
				rec.add(read{op: readEndpoints, cluster: c, namespace: "shop", name: pick([]string{"api", "web"})})
			case 3:
				rec.addSelect(c, selectors[rng.IntN(len(selectors))])
			case 4:
				rec.addSelect("", selectors[rng.IntN(len(selectors))])
			case 5:
				rec.add(read{op: readMeta, cluster: c})
			case 6:
				rec.add(read{op: readList, name: pick(append([]string{""}, meshes...))})
			case 7:
				rec.add(read{op: readPolicies, kind: pick([]string{kindAccessPolicy, kindTrafficPolicy})})
			case 8:
				rec.add(read{op: readShared, name: pick([]string{"s0", "s1", "s2"})})
			case 9:
				rec.add(read{op: readLabels, cluster: c})
			default:
				rec.addClients(selectors[rng.IntN(len(selectors))][0])
			}
		}
		return rec.freeze()
	}
	svc := func(name string, labels map[string]string) []byte {
		return fmt.Appendf(nil, `{"metadata":{"namespace":"shop","name":%q,"labels":{"app":%q}}}`, name, labels["app"])
	}
	randomChange := func() *change {
		c := newChange()
		for range 1 + rng.IntN(3) {
			cluster := pick(clusters)
			switch rng.IntN(7) {
			case 0:
				name := pick([]string{"api", "web"})
				c.addObject(cluster, objectChange{key: snapshot.ID{Version: "v1", Kind: "Service", Namespace: "shop", Name: name},
					old: svc(name, map[string]string{"app": pick([]string{"api", "web"})}), new: svc(name, map[string]string{"app": "api"})})
			case 1:
				c.addObject(cluster, objectChange{key: snapshot.ID{Group: "discovery.k8s.io", Version: "v1", Kind: "EndpointSlice", Namespace: "shop", Name: "api-x"},
					new: []byte(`{"metadata":{"labels":{"kubernetes.io/service-name":"api"}}}`)})
			case 2:
				c.addMeta(cluster, []string{pick(meshes)}, nil)
				if rng.IntN(2) == 0 {
					c.presence[cluster] = true
				}
			case 3:
				c.addLabels(cluster, labelSets[rng.IntN(3)], labelSets[rng.IntN(3)])
			case 4:
				c.policyKinds[pick([]string{kindAccessPolicy, kindTrafficPolicy, kindVirtualDestination})] = true
			case 5:
				c.shared[pick([]string{"s0", "s1", "s2"})] = true
			default:
				c.addObject(cluster, objectChange{key: snapshot.ID{Version: "v1", Kind: "Node", Name: "n"}, new: []byte(`{}`)})
			}
		}
		labels := map[string]map[string]string{}
		for _, cl := range clusters {
			labels[cl] = labelSets[rng.IntN(3)]
		}
		c.clusterLabels = func(name string) map[string]string { return labels[name] }
		return c
	}

	ix := newReadIndex()
	sets := map[string]*readSet{}
	hits := 0
	for step := range 3000 {
		name := fmt.Sprintf("n%d", rng.IntN(40))
		if rng.IntN(4) == 0 {
			ix.drop(name)
			delete(sets, name)
		} else {
			rs := randomSet()
			ix.set(name, rs)
			sets[name] = rs
		}
		c := randomChange()
		want := map[string]bool{}
		for n, rs := range sets {
			if c.touches(rs) {
				want[n] = true
			}
		}
		got := ix.touched(c)
		if !maps.Equal(got, want) {
			t.Fatalf("step %d: index touched %v, the sets one by one %v", step,
				slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
		}
		hits += len(want)
	}
	if hits == 0 {
		t.Fatal("no change touched any set: the test checks nothing")
	}
	// Dropping every name leaves nothing filed.
	for n := range sets {
		ix.drop(n)
	}
	if len(ix.byCluster)+len(ix.keyed)+len(ix.matched)+len(ix.selectors.selectors)+len(ix.sets) != 0 {
		t.Errorf("after dropping every name the index holds %d clusters, %d keyed, %d matched, %d selectors, %d sets",
			len(ix.byCluster), len(ix.keyed), len(ix.matched), len(ix.selectors.selectors), len(ix.sets))
	}
}

// BenchmarkTouchedWideReads matches a one-cluster change against 50 sets
// that each read every cluster of a fleet of 10,000, as fleet-wide Shared
// values and global targets do: the cost of finding that the change
// concerns them grows with the reads of the changed cluster, not with the
// fleet.
//
//	go test -run '^$' -bench TouchedWideReads ./sdk/
func BenchmarkTouchedWideReads(b *testing.B) {
	const clusters = 10_000
	ix := newReadIndex()
	for s := range 50 {
		rec := newRecorder()
		for i := range clusters {
			c := fmt.Sprintf("c%05d", i)
			rec.add(read{op: readMeta, cluster: c})
			rec.add(read{op: readObject, cluster: c, kind: "Service", namespace: "shop", name: fmt.Sprintf("svc-%d", s)})
		}
		ix.set(fmt.Sprintf("s%d", s), rec.freeze())
	}
	c := newChange()
	c.addObject("c04242", objectChange{key: snapshot.ID{Version: "v1", Kind: "Service", Namespace: "shop", Name: "svc-7"}, new: []byte(`{}`)})
	for b.Loop() {
		if hit := ix.touched(c); len(hit) != 1 || !hit["s7"] {
			b.Fatalf("touched %v, want s7", hit)
		}
	}
}
