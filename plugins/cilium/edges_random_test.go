package cilium

import (
	"encoding/json"
	"math/rand/v2"
	"testing"

	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/sdk/sdktest"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// randomSubset returns a random subset of values, possibly empty.
func randomSubset[T any](r *rand.Rand, values []T) []T {
	var out []T
	for _, v := range values {
		if r.IntN(3) == 0 {
			out = append(out, v)
		}
	}
	return out
}

// randomAccessPolicy returns a random valid AccessPolicy over the names of
// the random fleet.
func randomAccessPolicy(r *rand.Rand, i int) *policyv1alpha1.AccessPolicy {
	clusters := []string{"east", "west", "north"}
	namespaces := []string{"bookinfo", "shop"}
	for {
		ap := &policyv1alpha1.AccessPolicy{
			TypeMeta:   metav1.TypeMeta{APIVersion: "policy.meshrelay.io/v1alpha1", Kind: "AccessPolicy"},
			ObjectMeta: metav1.ObjectMeta{Name: "random-" + string(rune('a'+i)), Namespace: namespaces[r.IntN(2)]},
		}
		for range 1 + r.IntN(2) {
			sel := policyv1alpha1.DestinationSelector{
				Clusters:   randomSubset(r, clusters),
				Namespaces: randomSubset(r, namespaces),
				Names:      randomSubset(r, []string{"reviews", "ratings", "cart", "productpage", "legacy-db"}),
			}
			if r.IntN(4) == 0 {
				sel.Labels = map[string]string{"tier": "backend"}
			}
			ap.Spec.DestinationSelectors = append(ap.Spec.DestinationSelectors, sel)
		}
		if r.IntN(5) == 0 {
			ap.Spec.Action = policyv1alpha1.ActionDenyAll
		} else {
			for range 1 + r.IntN(2) {
				var from policyv1alpha1.ClientSelector
				for _, sa := range randomSubset(r, []policyv1alpha1.ServiceAccountRef{
					{Namespace: "bookinfo", Name: "bookinfo-productpage"}, {Cluster: "east", Namespace: "bookinfo", Name: "bookinfo-reviews"},
					{Cluster: "west", Namespace: "shop", Name: "frontend"}, {Cluster: "north", Namespace: "shop", Name: "cart"},
					{Namespace: "shop", Name: "frontend"},
				}) {
					from.ServiceAccounts = append(from.ServiceAccounts, sa)
				}
				from.Namespaces = randomSubset(r, namespaces)
				from.Clusters = randomSubset(r, clusters)
				ap.Spec.From = append(ap.Spec.From, from)
			}
			ap.Spec.Ports = randomSubset(r, []int32{9080, 9090, 7070, 8125, 1234})
			ap.Spec.Methods = randomSubset(r, []policyv1alpha1.HTTPMethod{"GET", "POST"})
			ap.Spec.Paths = randomSubset(r, []string{"/api*", "/health"})
		}
		if len(ap.Validate()) == 0 {
			return ap
		}
	}
}

// TestEdgeEquivalenceRandom translates random sets of AccessPolicies and
// checks that the Cilium policies admit exactly the edges the
// AccessPolicies admit, and the same edges as the Istio translator's
// AuthorizationPolicies.
func TestEdgeEquivalenceRandom(t *testing.T) {
	cluster := func(name string, meshes ...string) sdktest.Cluster {
		fx, err := sdktest.LoadFixture(fixturePath("access-clusterwide"))
		if err != nil {
			t.Fatal(err)
		}
		c := fx.Clusters[0]
		c.Name, c.Meshes = name, meshes
		return c
	}
	r := rand.New(rand.NewPCG(1, 2))
	runs := 150
	if testing.Short() {
		runs = 20
	}
	restricted := 0
	for run := range runs {
		fx := &sdktest.Fixture{Clusters: []sdktest.Cluster{cluster("east", "cilium"), cluster("west", "cilium"), cluster("north", "istio")}}
		var policies []*policyv1alpha1.AccessPolicy
		for i := range 1 + r.IntN(3) {
			ap := randomAccessPolicy(r, i)
			policies = append(policies, ap)
			raw, err := json.Marshal(ap)
			if err != nil {
				t.Fatal(err)
			}
			fx.Policies = append(fx.Policies, raw)
		}
		res := sdktest.RunFixture(t, New(), fx)
		var outputs []goldenObject
		for _, o := range res.Outputs {
			var obj map[string]any
			if err := json.Unmarshal(o.Body, &obj); err != nil {
				t.Fatal(err)
			}
			outputs = append(outputs, goldenObject{Cluster: o.Cluster, Object: obj})
		}
		f := decodeFleet(t, fx)
		want := expectedEdges(f)
		missing, extra := diffEdges(want, ciliumEdges(t, f, outputs))
		if len(missing)+len(extra) > 0 {
			data, _ := json.MarshalIndent(policies, "", "  ")
			t.Fatalf("run %d: %d edges missing (first %v), %d extra (first %v) for policies\n%s",
				run, len(missing), first(missing), len(extra), first(extra), data)
		}
		compareWithIstio(t, fx, outputs)
		if t.Failed() {
			data, _ := json.MarshalIndent(policies, "", "  ")
			t.Fatalf("run %d: Cilium and Istio disagree for policies\n%s", run, data)
		}
		all := 0
		f.destinations(func(string, *corev1.Service, corev1.ServicePort) { all += len(f.clients) })
		restricted += all - len(want)
	}
	if restricted == 0 {
		t.Error("no random policy restricted any edge")
	}
}

func first(es []edge) any {
	if len(es) == 0 {
		return nil
	}
	return es[0]
}
