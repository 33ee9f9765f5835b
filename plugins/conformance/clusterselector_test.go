package conformance_test

import (
	"encoding/json"
	"maps"
	"slices"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/meshrelay/meshrelay/plugins/cilium"
	"github.com/meshrelay/meshrelay/plugins/envoy"
	"github.com/meshrelay/meshrelay/plugins/gatewayapi"
	"github.com/meshrelay/meshrelay/plugins/istio"
	"github.com/meshrelay/meshrelay/sdk"
	"github.com/meshrelay/meshrelay/sdk/sdktest"
)

// labeledFleet is the conformance fleet with a third cluster, north, whose
// clients (shop/frontend, ops/admin) run no destination, the clusters
// labelled as labels says, and one policy besides shop's default-deny:
// api's port 5000 admits the clients that the client selector from (JSON)
// matches.
func labeledFleet(t *testing.T, labels map[string]map[string]string, from string) (*sdktest.Fixture, *fleet) {
	t.Helper()
	fx, f := loadFleet(t)
	north := sdktest.Cluster{Name: "north"}
	for _, obj := range []string{
		`{"apiVersion":"discovery.meshrelay.io/v1alpha1","kind":"Mesh","metadata":{"name":"istio"},"spec":{"type":"istio","namespace":"istio-system","trustDomain":"north"}}`,
		`{"apiVersion":"discovery.meshrelay.io/v1alpha1","kind":"Mesh","metadata":{"name":"linkerd"},"spec":{"type":"linkerd","namespace":"linkerd","trustDomain":"north"}}`,
		`{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"frontend","namespace":"shop"}}`,
		`{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"admin","namespace":"ops"}}`,
	} {
		north.Objects = append(north.Objects, json.RawMessage(obj))
	}
	f.clients = append(f.clients, client{"north", "shop", "frontend"}, client{"north", "ops", "admin"})
	out := &sdktest.Fixture{}
	for _, c := range append(fx.Clusters, north) {
		c.Labels = labels[c.Name]
		out.Clusters = append(out.Clusters, c)
	}
	for _, p := range fx.Policies {
		var meta struct {
			Metadata struct{ Name string }
		}
		decode(t, p, &meta)
		if meta.Metadata.Name == "shop-deny" {
			out.Policies = append(out.Policies, p)
		}
	}
	out.Policies = append(out.Policies, json.RawMessage(`{"apiVersion":"policy.meshrelay.io/v1alpha1","kind":"AccessPolicy",
		"metadata":{"name":"api","namespace":"shop"},
		"spec":{"destinationSelectors":[{"namespaces":["shop"],"names":["api"]}],"ports":[5000],
		"from":[`+from+`]}}`))
	return out, f
}

// admitting is the decision the labelled fleet's policies make when api
// admits the clients of clusters in namespace ns (any for ""): shop is
// default-deny, other is open.
func admitting(f *fleet, ns string, clusters ...string) matrix {
	return f.decide(func(c client, d destination) bool {
		if d.Namespace != "shop" {
			return true
		}
		return d.Service == "api" && slices.Contains(clusters, c.Cluster) && (ns == "" || c.Namespace == ns)
	})
}

// decisions returns what each backend decides on the fixture, and the
// diagnostics each reported.
func decisions(t *testing.T, fx *sdktest.Fixture, f *fleet) (map[string]matrix, map[string][]sdk.Diagnostic) {
	t.Helper()
	results := map[string]*sdktest.Result{
		"istio":   translate(t, istio.New(), fx, "istio"),
		"cilium":  translate(t, cilium.New(), fx, "cilium"),
		"envoy":   translate(t, envoy.New(), fx, "envoy"),
		"linkerd": translate(t, gatewayapi.New(), fx, "linkerd"),
	}
	diags := map[string][]sdk.Diagnostic{}
	for name, res := range results {
		diags[name] = res.Diagnostics
	}
	return map[string]matrix{
		"istio":   f.decide(istioDecider(t, istioPolicies(t, results["istio"]))),
		"cilium":  f.decide(ciliumDecider(t, ciliumRules(t, results["cilium"]))),
		"envoy":   f.decide(envoyDecider(t, envoyListeners(t, results["envoy"]))),
		"linkerd": f.decide(linkerdDecider(t, linkerdPolicies(t, results["linkerd"]))),
	}, diags
}

// TestClientClusterSelectorAdmitsWhatItMatches translates a policy whose
// client selector picks clusters by their registry labels with every
// backend, and evaluates what each one's outputs admit: exactly the
// clients of the clusters the selector matches; after a relabelling, those
// it matches then; and, when it matches no cluster, no client at all (not
// every client, which a selector read as "no clusters named" would give),
// with a warning saying so.
func TestClientClusterSelectorAdmitsWhatItMatches(t *testing.T) {
	prod := `{"clusterSelector":{"matchLabels":{"env":"prod"}}}`
	none := `{"matchLabels":{"env":"staging"}}`
	twoProd := map[string]map[string]string{"east": {"env": "prod"}, "west": {"env": "prod"}, "north": {"env": "dev"}}
	tests := map[string]struct {
		labels   map[string]map[string]string
		from     string
		ns       string
		admitted []string
		warned   bool
	}{
		"two of three": {labels: twoProd, from: prod, admitted: []string{"east", "west"}},
		"north relabelled into it": {
			labels: map[string]map[string]string{"east": {"env": "prod"}, "west": {"env": "dev"}, "north": {"env": "prod"}},
			from:   prod, admitted: []string{"east", "north"},
		},
		"by expression": {
			labels: twoProd, from: `{"clusterSelector":{"matchExpressions":[{"key":"env","operator":"NotIn","values":["prod"]}]}}`,
			admitted: []string{"north"},
		},
		"with a namespace": {
			labels: twoProd, from: `{"namespaces":["shop"],"clusterSelector":{"matchLabels":{"env":"prod"}}}`,
			ns: "shop", admitted: []string{"east", "west"},
		},
		"union with a name": {
			labels: twoProd, from: `{"clusters":["north"],"clusterSelector":{"matchLabels":{"env":"prod"},"matchExpressions":[{"key":"tier","operator":"Exists"}]}}`,
			admitted: []string{"north"}, warned: true,
		},
		"matching none":                 {labels: twoProd, from: `{"clusterSelector":` + none + `}`, warned: true},
		"matching none, a namespace":    {labels: twoProd, from: `{"namespaces":["shop","ops"],"clusterSelector":` + none + `}`, warned: true},
		"matching none, an account":     {labels: twoProd, from: `{"serviceAccounts":[{"namespace":"shop","name":"frontend"}],"clusterSelector":` + none + `}`, warned: true},
		"matching none, with no labels": {from: prod, warned: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			fx, f := labeledFleet(t, tc.labels, tc.from)
			want := admitting(f, tc.ns, tc.admitted...)
			got, diags := decisions(t, fx, f)
			for _, backend := range slices.Sorted(maps.Keys(got)) {
				if diff := gocmp.Diff(want, got[backend]); diff != "" {
					t.Errorf("%s: decisions (-want +got), admitting the clients of %v:\n%s", backend, tc.admitted, diff)
				}
				warned := slices.ContainsFunc(diags[backend], func(d sdk.Diagnostic) bool {
					return d.Severity == sdk.SeverityWarning && d.Path == "spec.from[0].clusterSelector"
				})
				if warned != tc.warned {
					t.Errorf("%s: warned that the clusterSelector matches no cluster = %v, want %v; diagnostics %+v", backend, warned, tc.warned, diags[backend])
				}
			}
		})
	}
}
