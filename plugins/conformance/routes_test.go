package conformance_test

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/meshrelay/meshrelay/plugins/gatewayapi"
	"github.com/meshrelay/meshrelay/plugins/istio"
	"github.com/meshrelay/meshrelay/sdk/sdktest"
	networking "istio.io/api/networking/v1alpha3"
	clientnetworking "istio.io/client-go/pkg/apis/networking/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// request is an HTTP request to the reviews Service.
type request struct {
	method, path string
	query        map[string]string
	headers      map[string]string
}

func (r request) String() string {
	return fmt.Sprintf("%s %s %v %v", r.method, r.path, r.query, r.headers)
}

// shares are the backends a request reaches, by Service name, and each
// one's share of such requests.
type shares map[string]float64

func normalize(weights map[string]float64) shares {
	total := 0.0
	for _, w := range weights {
		total += w
	}
	out := shares{}
	for k, w := range weights {
		out[k] = w / total
	}
	return out
}

// fullMatch reports whether the RE2 expression matches all of s.
func fullMatch(t *testing.T, expr, s string) bool {
	re, err := regexp.Compile("^(?:" + expr + ")$")
	if err != nil {
		t.Fatalf("regular expression %q: %v", expr, err)
	}
	return re.MatchString(s)
}

// istioRoute evaluates a VirtualService as Istio does: the first HTTP route
// one of whose matches matches, its destinations by weight.
func istioRoute(t *testing.T, vs *clientnetworking.VirtualService, r request) (shares, int) {
	str := func(m *networking.StringMatch, v string, present bool) bool {
		switch {
		case m.GetExact() != "":
			return present && v == m.GetExact()
		case m.GetPrefix() != "":
			return present && strings.HasPrefix(v, m.GetPrefix())
		case m.GetRegex() != "":
			return present && fullMatch(t, m.GetRegex(), v)
		}
		return present
	}
	for i, route := range vs.Spec.GetHttp() {
		matched := len(route.GetMatch()) == 0
		for _, m := range route.GetMatch() {
			ok := (m.GetUri() == nil || str(m.GetUri(), r.path, true)) && (m.GetMethod() == nil || str(m.GetMethod(), r.method, true))
			for name, hm := range m.GetHeaders() {
				v, present := r.headers[name]
				ok = ok && str(hm, v, present)
			}
			for name, qm := range m.GetQueryParams() {
				v, present := r.query[name]
				ok = ok && str(qm, v, present)
			}
			matched = matched || ok
		}
		if !matched {
			continue
		}
		weights := map[string]float64{}
		for _, d := range route.GetRoute() {
			w := float64(d.GetWeight())
			if len(route.GetRoute()) == 1 {
				w = 1
			}
			name, _, _ := strings.Cut(d.GetDestination().GetHost(), ".")
			weights[name] += w
		}
		return normalize(weights), i
	}
	return nil, -1
}

// gammaRoute evaluates an HTTPRoute as Linkerd does (the Gateway API's
// precedence, with Linkerd's ranking of paths by the length they match:
// Exact and RegularExpression the whole path, PathPrefix its prefix):
// among the matching matches, the longest path match, then a method, then
// more headers, then more query parameters, then the earlier rule.
func gammaRoute(t *testing.T, route *gatewayv1.HTTPRoute, r request) (shares, int) {
	type score [4]int
	best, bestRule := score{-1}, -1
	for i, rule := range route.Spec.Rules {
		matches := rule.Matches
		if len(matches) == 0 {
			matches = []gatewayv1.HTTPRouteMatch{{}}
		}
		for _, m := range matches {
			pathLen := 1
			if p := m.Path; p != nil {
				switch *p.Type {
				case gatewayv1.PathMatchExact:
					if r.path != *p.Value {
						continue
					}
					pathLen = len(r.path)
				case gatewayv1.PathMatchRegularExpression:
					if !fullMatch(t, *p.Value, r.path) {
						continue
					}
					pathLen = len(r.path)
				case gatewayv1.PathMatchPathPrefix:
					prefix := strings.TrimSuffix(*p.Value, "/")
					if prefix != "" && r.path != prefix && !strings.HasPrefix(r.path, prefix+"/") {
						continue
					}
					pathLen = max(len(prefix), 1)
				}
			}
			if m.Method != nil && string(*m.Method) != r.method {
				continue
			}
			ok := true
			for _, h := range m.Headers {
				v, present := r.headers[strings.ToLower(string(h.Name))]
				ok = ok && present && (*h.Type == gatewayv1.HeaderMatchExact && v == h.Value || *h.Type == gatewayv1.HeaderMatchRegularExpression && fullMatch(t, h.Value, v))
			}
			for _, q := range m.QueryParams {
				v, present := r.query[string(q.Name)]
				ok = ok && present && (*q.Type == gatewayv1.QueryParamMatchExact && v == q.Value || *q.Type == gatewayv1.QueryParamMatchRegularExpression && fullMatch(t, q.Value, v))
			}
			if !ok {
				continue
			}
			method := 0
			if m.Method != nil {
				method = 1
			}
			s := score{pathLen, method, len(m.Headers), len(m.QueryParams)}
			if gocmp.Equal(best, score{-1}) || s[0] > best[0] || s[0] == best[0] && (s[1] > best[1] || s[1] == best[1] && (s[2] > best[2] || s[2] == best[2] && s[3] > best[3])) {
				best, bestRule = s, i
			}
		}
	}
	if bestRule < 0 {
		return nil, -1
	}
	weights := map[string]float64{}
	refs := route.Spec.Rules[bestRule].BackendRefs
	for _, b := range refs {
		w := 1.0
		if b.Weight != nil {
			w = float64(*b.Weight)
		}
		weights[string(b.Name)] += w
	}
	return normalize(weights), bestRule
}

// TestRouteSemanticsAgree translates testdata/routes.yaml with the Istio
// and Gateway API translators and evaluates, for a set of requests, the
// Services each request reaches and in which shares, from the emitted
// VirtualService and HTTPRoute. They must agree, except where the
// Gateway API's precedence takes a request to a later rule than the
// TrafficPolicy's order does — and there the Gateway API translator must
// have warned about the later rule's match.
func TestRouteSemanticsAgree(t *testing.T) {
	fx, err := sdktest.LoadFixture("testdata/routes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var vs clientnetworking.VirtualService
	for _, o := range translate(t, istio.New(), fx, "istio").Outputs {
		if o.Kind == "VirtualService" {
			decode(t, o.Body, &vs)
		}
	}
	res := translate(t, gatewayapi.New(), fx, "linkerd")
	var route gatewayv1.HTTPRoute
	for _, o := range res.Outputs {
		if o.Kind == gatewayapi.KindHTTPRoute {
			decode(t, o.Body, &route)
		}
	}
	if len(vs.Spec.GetHttp()) == 0 || len(route.Spec.Rules) != len(vs.Spec.GetHttp()) {
		t.Fatalf("VirtualService has %d routes and the HTTPRoute %d rules, want the same number, not 0", len(vs.Spec.GetHttp()), len(route.Spec.Rules))
	}
	warned := map[int]bool{}
	for _, d := range res.Diagnostics {
		var rule int
		if _, err := fmt.Sscanf(d.Path, "spec.http[%d]", &rule); err == nil && strings.Contains(d.Summary, "ranks this match above") {
			warned[rule] = true
		}
	}
	jason := map[string]string{"end-user": "jason"}
	requests := []request{
		{method: "GET", path: "/health"},
		{method: "POST", path: "/health"},
		{method: "GET", path: "/reviews/v3/1"},
		{method: "GET", path: "/reviews/v3"},
		{method: "GET", path: "/reviews/v31"},
		{method: "GET", path: "/reviews/1", headers: jason},
		{method: "GET", path: "/reviews/1", headers: jason, query: map[string]string{"debug": "1"}},
		{method: "POST", path: "/reviews/1"},
		{method: "POST", path: "/reviews/1", headers: jason},
		{method: "GET", path: "/health", headers: jason},
		{method: "GET", path: "/reviews/1"},
		{method: "GET", path: "/"},
	}
	agree, divergent := 0, 0
	for _, r := range requests {
		want, istioRule := istioRoute(t, &vs, r)
		got, gammaRule := gammaRoute(t, &route, r)
		if gocmp.Equal(want, got) {
			agree++
			continue
		}
		divergent++
		if gammaRule <= istioRule || !warned[gammaRule] {
			t.Errorf("%s: Istio reaches %v (rule %d), the HTTPRoute %v (rule %d), and no warning on spec.http[%d] says why", r, want, istioRule, got, gammaRule, gammaRule)
		}
	}
	if agree == 0 || divergent == 0 {
		t.Errorf("%d requests agree and %d diverge with a warning: the fixture must show both", agree, divergent)
	}
}
