package envoy_test

import (
	"os"
	"regexp"
	"testing"

	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rbacfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/plugins/envoy"
	"google.golang.org/protobuf/encoding/protojson"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// request is what an RBAC decision looks at, for an mTLS client.
type request struct {
	principal, method, path string
	port                    uint32
}

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
	var grid []request
	for _, principal := range []string{
		"spiffe://cluster.local/ns/namespaces1/sa/default", "spiffe://west/ns/namespaces2/sa/api",
		"spiffe://cluster.local/ns/foo/sa/namespaces1", "spiffe://east/ns/namespaces10/sa/x",
	} {
		for _, method := range []string{"GET", "POST", "PUT"} {
			for _, path := range []string{"/v1", "/v2", "/v3", "/v1/x"} {
				for _, port := range []uint32{80, 90, 8080} {
					grid = append(grid, request{principal, method, path, port})
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
				g, w := policyMatches(t, got, r), policyMatches(t, want, r)
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

// policyMatches evaluates a policy as Envoy does: some permission and some
// principal must match. It knows the matchers both sides use and fails the
// test on any other.
func policyMatches(t *testing.T, p *rbacv3.Policy, r request) bool {
	perm, principal := false, false
	for _, x := range p.GetPermissions() {
		perm = perm || permissionMatches(t, x, r)
	}
	for _, x := range p.GetPrincipals() {
		principal = principal || principalMatches(t, x, r)
	}
	return perm && principal
}

func permissionMatches(t *testing.T, p *rbacv3.Permission, r request) bool {
	switch rule := p.GetRule().(type) {
	case *rbacv3.Permission_Any:
		return rule.Any
	case *rbacv3.Permission_AndRules:
		for _, x := range rule.AndRules.GetRules() {
			if !permissionMatches(t, x, r) {
				return false
			}
		}
		return true
	case *rbacv3.Permission_OrRules:
		for _, x := range rule.OrRules.GetRules() {
			if permissionMatches(t, x, r) {
				return true
			}
		}
		return false
	case *rbacv3.Permission_NotRule:
		return !permissionMatches(t, rule.NotRule, r)
	case *rbacv3.Permission_DestinationPort:
		return rule.DestinationPort == r.port
	case *rbacv3.Permission_UrlPath:
		return stringMatches(t, rule.UrlPath.GetPath(), r.path)
	case *rbacv3.Permission_Header:
		return headerMatches(t, rule.Header, r)
	}
	t.Fatalf("permission %v is not known to the evaluator", p)
	return false
}

func headerMatches(t *testing.T, h *routev3.HeaderMatcher, r request) bool {
	if h.GetName() != ":method" || h.GetStringMatch() == nil {
		t.Fatalf("header matcher %v is not known to the evaluator", h)
	}
	return stringMatches(t, h.GetStringMatch(), r.method) != h.GetInvertMatch()
}

func principalMatches(t *testing.T, p *rbacv3.Principal, r request) bool {
	switch id := p.GetIdentifier().(type) {
	case *rbacv3.Principal_Any:
		return id.Any
	case *rbacv3.Principal_AndIds:
		for _, x := range id.AndIds.GetIds() {
			if !principalMatches(t, x, r) {
				return false
			}
		}
		return true
	case *rbacv3.Principal_OrIds:
		for _, x := range id.OrIds.GetIds() {
			if principalMatches(t, x, r) {
				return true
			}
		}
		return false
	case *rbacv3.Principal_NotId:
		return !principalMatches(t, id.NotId, r)
	case *rbacv3.Principal_Authenticated_:
		if id.Authenticated.GetPrincipalName() == nil {
			return true
		}
		return stringMatches(t, id.Authenticated.GetPrincipalName(), r.principal)
	}
	t.Fatalf("principal %v is not known to the evaluator", p)
	return false
}

func stringMatches(t *testing.T, m *matcherv3.StringMatcher, v string) bool {
	switch p := m.GetMatchPattern().(type) {
	case *matcherv3.StringMatcher_Exact:
		return v == p.Exact
	case *matcherv3.StringMatcher_Prefix:
		return len(v) >= len(p.Prefix) && v[:len(p.Prefix)] == p.Prefix
	case *matcherv3.StringMatcher_SafeRegex:
		re, err := regexp.Compile("^(?:" + p.SafeRegex.GetRegex() + ")$")
		if err != nil {
			t.Fatal(err)
		}
		return re.MatchString(v)
	}
	t.Fatalf("string matcher %v is not known to the evaluator", m)
	return false
}
