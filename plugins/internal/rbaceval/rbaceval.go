package rbaceval

import (
	"regexp"
	"strings"
	"testing"

	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
)

// Request is what an RBAC decision looks at, for an mTLS client: its
// principal (SPIFFE ID), the method and path (HTTP only) and the
// destination port.
type Request struct {
	Principal    string
	Method, Path string
	Port         uint32
}

// PolicyMatches evaluates a policy as Envoy does: some permission and some
// principal must match.
func PolicyMatches(tb testing.TB, p *rbacv3.Policy, r Request) bool {
	tb.Helper()
	perm, principal := false, false
	for _, x := range p.GetPermissions() {
		perm = perm || permissionMatches(tb, x, r)
	}
	for _, x := range p.GetPrincipals() {
		principal = principal || principalMatches(tb, x, r)
	}
	return perm && principal
}

func permissionMatches(tb testing.TB, p *rbacv3.Permission, r Request) bool {
	switch rule := p.GetRule().(type) {
	case *rbacv3.Permission_Any:
		return rule.Any
	case *rbacv3.Permission_AndRules:
		for _, x := range rule.AndRules.GetRules() {
			if !permissionMatches(tb, x, r) {
				return false
			}
		}
		return true
	case *rbacv3.Permission_OrRules:
		for _, x := range rule.OrRules.GetRules() {
			if permissionMatches(tb, x, r) {
				return true
			}
		}
		return false
	case *rbacv3.Permission_NotRule:
		return !permissionMatches(tb, rule.NotRule, r)
	case *rbacv3.Permission_DestinationPort:
		return rule.DestinationPort == r.Port
	case *rbacv3.Permission_UrlPath:
		return stringMatches(tb, rule.UrlPath.GetPath(), r.Path)
	case *rbacv3.Permission_Header:
		return headerMatches(tb, rule.Header, r)
	}
	tb.Fatalf("permission %v is not known to the evaluator", p)
	return false
}

func headerMatches(tb testing.TB, h *routev3.HeaderMatcher, r Request) bool {
	if h.GetName() != ":method" || h.GetStringMatch() == nil {
		tb.Fatalf("header matcher %v is not known to the evaluator", h)
	}
	return stringMatches(tb, h.GetStringMatch(), r.Method) != h.GetInvertMatch()
}

func principalMatches(tb testing.TB, p *rbacv3.Principal, r Request) bool {
	switch id := p.GetIdentifier().(type) {
	case *rbacv3.Principal_Any:
		return id.Any
	case *rbacv3.Principal_AndIds:
		for _, x := range id.AndIds.GetIds() {
			if !principalMatches(tb, x, r) {
				return false
			}
		}
		return true
	case *rbacv3.Principal_OrIds:
		for _, x := range id.OrIds.GetIds() {
			if principalMatches(tb, x, r) {
				return true
			}
		}
		return false
	case *rbacv3.Principal_NotId:
		return !principalMatches(tb, id.NotId, r)
	case *rbacv3.Principal_Authenticated_:
		if id.Authenticated.GetPrincipalName() == nil {
			return true
		}
		return stringMatches(tb, id.Authenticated.GetPrincipalName(), r.Principal)
	}
	tb.Fatalf("principal %v is not known to the evaluator", p)
	return false
}

func stringMatches(tb testing.TB, m *matcherv3.StringMatcher, v string) bool {
	switch p := m.GetMatchPattern().(type) {
	case *matcherv3.StringMatcher_Exact:
		return v == p.Exact
	case *matcherv3.StringMatcher_Prefix:
		return strings.HasPrefix(v, p.Prefix)
	case *matcherv3.StringMatcher_Suffix:
		return strings.HasSuffix(v, p.Suffix)
	case *matcherv3.StringMatcher_SafeRegex:
		re, err := regexp.Compile("^(?:" + p.SafeRegex.GetRegex() + ")$")
		if err != nil {
			tb.Fatal(err)
		}
		return re.MatchString(v)
	}
	tb.Fatalf("string matcher %v is not known to the evaluator", m)
	return false
}
