package envoy_test

import (
	"os"
	"testing"

	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	rbacfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/plugins/envoy"
	"github.com/meshrelay/meshrelay/plugins/internal/rbaceval"
	"google.golang.org/protobuf/encoding/protojson"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// TestRBACMeansWhatIstioMeans compares the RBAC policy built for an
// AccessPolicy with the one Istio builds for the equivalent
// AuthorizationPolicy (testdata/istio, from Istio's own tests), by
// evaluating both on every request of a grid.
func TestRBACMeansWhatIstioMeans(t *testing.T) {
	istio := istioPolicies(t, "testdata/istio/multiple-policies-out.yaml")
	anyClient := []policyv1alpha1.ClientSelector{{}}
	tests := map[string]struct {
		istio string
		spec  policyv1alpha1.AccessPolicySpec
	}{
		"methods": {istio: "ns[foo]-policy[httpbin-1]-rule[0]", spec: policyv1alpha1.AccessPolicySpec{From: anyClient, Methods: []policyv1alpha1.HTTPMethod{"GET", "POST"}}},
		"paths":   {istio: "ns[foo]-policy[httpbin-2]-rule[0]", spec: policyv1alpha1.AccessPolicySpec{From: anyClient, Paths: []string{"/v1", "/v2"}}},
		"ports":   {istio: "ns[foo]-policy[httpbin-4]-rule[0]", spec: policyv1alpha1.AccessPolicySpec{From: anyClient, Ports: []int32{80, 90}}},
		"namespaces": {istio: "ns[foo]-policy[httpbin-7]-rule[0]", spec: policyv1alpha1.AccessPolicySpec{
			From: []policyv1alpha1.ClientSelector{{Namespaces: []string{"namespaces1", "namespaces2"}}},
		}},
	}
	var grid []rbaceval.Request
	for _, principal := range []string{
		"spiffe://cluster.local/ns/namespaces1/sa/default", "spiffe://west/ns/namespaces2/sa/api",
		"spiffe://cluster.local/ns/foo/sa/namespaces1", "spiffe://east/ns/namespaces10/sa/x",
	} {
		for _, method := range []string{"GET", "POST", "PUT"} {
			for _, path := range []string{"/v1", "/v2", "/v3", "/v1/x"} {
				for _, port := range []uint32{80, 90, 8080} {
					grid = append(grid, rbaceval.Request{Principal: principal, Method: method, Path: path, Port: port})
				}
			}
		}
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			want, ok := istio[tc.istio]
			if !ok {
				t.Fatalf("Istio's output has no policy %q", tc.istio)
			}
			ap := &policyv1alpha1.AccessPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "foo"}, Spec: tc.spec}
			got, ok := envoy.RBACPolicy(ap)
			if !ok {
				t.Fatal("RBACPolicy() gave no policy")
			}
			if err := got.ValidateAll(); err != nil {
				t.Fatal(err)
			}
			allowed := 0
			for _, r := range grid {
				g, w := rbaceval.PolicyMatches(t, got, r), rbaceval.PolicyMatches(t, want, r)
				if g != w {
					t.Errorf("request %+v: RBACPolicy(%s) admits = %v, Istio's admits = %v", r, name, g, w)
				}
				if g {
					allowed++
				}
			}
			if allowed == 0 || allowed == len(grid) {
				t.Errorf("RBACPolicy(%s) admits %d of %d requests: the grid does not tell policies apart", name, allowed, len(grid))
			}
		})
	}
}

func istioPolicies(t *testing.T, path string) map[string]*rbacv3.Policy {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	var f hcmv3.HttpFilter
	if err := protojson.Unmarshal(js, &f); err != nil {
		t.Fatal(err)
	}
	var cfg rbacfilterv3.RBAC
	if err := f.GetTypedConfig().UnmarshalTo(&cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.GetRules().GetAction() != rbacv3.RBAC_ALLOW {
		t.Fatalf("Istio's filter has action %v, want ALLOW", cfg.GetRules().GetAction())
	}
	return cfg.GetRules().GetPolicies()
}
