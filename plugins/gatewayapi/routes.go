package gatewayapi

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/sdk"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// Linkerd's retry annotations on a route (retry.linkerd.io/*).
const (
	RetryLimitAnnotation   = "retry.linkerd.io/limit"
	RetryTimeoutAnnotation = "retry.linkerd.io/timeout"
	RetryHTTPAnnotation    = "retry.linkerd.io/http"
	RetryGRPCAnnotation    = "retry.linkerd.io/grpc"
)

// ruleRef is one rule of a TrafficPolicy.
type ruleRef struct {
	policy *policyv1alpha1.TrafficPolicy
	index  int
}

func (r ruleRef) rule() *policyv1alpha1.HTTPRule { return &r.policy.Spec.HTTP[r.index] }
func (r ruleRef) path(field string) string {
	return fmt.Sprintf("spec.http[%d]%s", r.index, field)
}

// trafficPolicies emits the routes of the target's Services that the
// policies select: per Service (and port, when it has several), one
// route whose rules are the policies' rules in order.
func (tr *translation) trafficPolicies(tps []*policyv1alpha1.TrafficPolicy) {
	type service struct {
		svc   *corev1.Service
		rules []ruleRef
	}
	byKey := map[string]*service{}
	for _, tp := range tps {
		for _, d := range tr.target.Select(tp.Spec.DestinationSelectors) {
			k := d.Service.Namespace + "/" + d.Service.Name
			s := byKey[k]
			if s == nil {
				s = &service{svc: d.Service}
				byKey[k] = s
			}
			for i := range tp.Spec.HTTP {
				s.rules = append(s.rules, ruleRef{policy: tp, index: i})
			}
		}
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		tr.serviceRoutes(byKey[k].svc, byKey[k].rules)
	}
}

// parentsOf returns the distinct policies of rules, in order.
func parentsOf(rules []ruleRef) []policyv1alpha1.Policy {
	var out []policyv1alpha1.Policy
	for _, r := range rules {
		if len(out) == 0 || out[len(out)-1] != policyv1alpha1.Policy(r.policy) {
			out = append(out, r.policy)
		}
	}
	return slices.CompactFunc(out, func(a, b policyv1alpha1.Policy) bool { return a == b })
}

// serviceRoutes emits the routes of one Service.
func (tr *translation) serviceRoutes(svc *corev1.Service, rules []ruleRef) {
	where := fmt.Sprintf("Service %s/%s in cluster %q", svc.Namespace, svc.Name, tr.target.Name)
	var ports []corev1.ServicePort
	for _, sp := range svc.Spec.Ports {
		if tr.carriesHTTP(sp) {
			ports = append(ports, sp)
		}
	}
	if len(ports) == 0 {
		for _, p := range parentsOf(rules) {
			tr.warn(p, "spec.destinationSelectors", "%s has no HTTP port: its rules are not applied there", where)
		}
		return
	}
	perPort := len(svc.Spec.Ports) > 1
	if perPort && !tr.impl.Has(ParentRefPort) {
		for _, p := range parentsOf(rules) {
			tr.warn(p, "spec.destinationSelectors", "%s has several ports and %s does not support %s (a route for one port of a Service): its rules are not applied there",
				where, tr.impl.Mesh, ParentRefPort)
		}
		return
	}
	for _, sp := range ports {
		parent := gatewayv1.ParentReference{Group: ptr(gatewayv1.Group("")), Kind: ptr(gatewayv1.Kind("Service")), Name: gatewayv1.ObjectName(svc.Name)}
		name := svc.Name
		if perPort {
			parent.Port = ptr(sp.Port)
			name = svc.Name + "-" + strconv.Itoa(int(sp.Port))
		}
		if isGRPC(sp) && tr.impl.Has(MeshGRPC) {
			tr.grpcRoute(name, svc, sp.Port, parent, rules)
		} else {
			tr.httpRoute(name, svc, sp.Port, parent, rules)
		}
	}
}

// precedenceWarnings warns about rules whose order a route does not
// keep. The Gateway API chooses among the matching rules of a route by
// the specificity of their matches — the path (Exact and
// RegularExpression, which match the whole path, above a PathPrefix,
// longer prefixes first), then a method, then more headers, then more
// query parameters — and by order only among equals. A TrafficPolicy takes
// the first rule that matches. So a match that may take a request an
// earlier rule also matches, and outranks that rule's match, is warned
// about: requests both match go to the later rule.
func (tr *translation) precedenceWarnings(rules []ruleRef) {
	for j, later := range rules {
		for k, lm := range matchesOf(later) {
			for _, earlier := range rules[:j] {
				if slices.ContainsFunc(matchesOf(earlier), func(em policyv1alpha1.HTTPMatch) bool { return overlap(em, lm) && outranks(lm, em) }) {
					path := later.path(fmt.Sprintf(".matches[%d]", k))
					if len(later.rule().Matches) == 0 {
						path = later.path(".matches")
					}
					tr.warn(later.policy, path, "the Gateway API ranks this match above one of %s spec.http[%d], which comes first: the requests both match take this rule", sdk.RefOf(earlier.policy).Key(), earlier.index)
					break
				}
			}
		}
	}
}

// matchesOf returns a rule's matches; a rule without matches matches
// every request, as the match "/" does.
func matchesOf(r ruleRef) []policyv1alpha1.HTTPMatch {
	if ms := r.rule().Matches; len(ms) > 0 {
		return ms
	}
	return []policyv1alpha1.HTTPMatch{{}}
}

// pathRank returns how the Gateway API ranks a match's path: 2 for Exact
// and RegularExpression (they match the whole path), 1 for a prefix, with
// its length ("/" without a path).
func pathRank(m policyv1alpha1.HTTPMatch) (int, int) {
	if m.Path == nil {
		return 1, 1
	}
	switch m.Path.Type {
	case policyv1alpha1.MatchExact, policyv1alpha1.MatchRegex:
		return 2, 0
	}
	return 1, len(m.Path.Value)
}

// outranks reports whether a may win over b for a request both match.
func outranks(a, b policyv1alpha1.HTTPMatch) bool {
	ac, al := pathRank(a)
	bc, bl := pathRank(b)
	if ac != bc {
		return ac > bc
	}
	if ac == 1 && al != bl {
		return al > bl
	}
	secondary := func(m policyv1alpha1.HTTPMatch) [3]int {
		method := 0
		if m.Method != "" {
			method = 1
		}
		return [3]int{method, len(m.Headers), len(m.QueryParams)}
	}
	sa, sb := secondary(a), secondary(b)
	if c := slices.Compare(sa[:], sb[:]); c != 0 {
		return c > 0
	}
	// Whole-path matches tie on the path; so may prefixes of different
	// lengths.
	return false
}

// overlap reports whether some request may match both a and b: not when
// their exact paths, methods or exact values of one header differ, or an
// exact path lacks the other's prefix.
func overlap(a, b policyv1alpha1.HTTPMatch) bool {
	if a.Method != "" && b.Method != "" && a.Method != b.Method {
		return false
	}
	return pathsOverlap(a.Path, b.Path) && headersOverlap(a.Headers, b.Headers)
}

// pathsOverlap reports whether some path may match both a and b (nil
// matches every path).
func pathsOverlap(a, b *policyv1alpha1.PathMatch) bool {
	if a == nil || b == nil {
		return true
	}
	exact := func(p *policyv1alpha1.PathMatch) bool { return p.Type == policyv1alpha1.MatchExact }
	prefix := func(p *policyv1alpha1.PathMatch) bool { return p.Type == "" || p.Type == policyv1alpha1.MatchPrefix }
	switch {
	case exact(a) && exact(b):
		return a.Value == b.Value
	case exact(a) && prefix(b):
		return strings.HasPrefix(a.Value, b.Value)
	case exact(b) && prefix(a):
		return strings.HasPrefix(b.Value, a.Value)
	case prefix(a) && prefix(b):
		return strings.HasPrefix(a.Value, b.Value) || strings.HasPrefix(b.Value, a.Value)
	}
	return true
}

// headersOverlap reports whether some request may match the header
// matches of both: not when both require different exact values of one
// header.
func headersOverlap(a, b []policyv1alpha1.HeaderMatch) bool {
	exactValue := func(h policyv1alpha1.HeaderMatch) bool {
		return !h.Invert && (h.Type == "" || h.Type == policyv1alpha1.MatchExact)
	}
	for _, ha := range a {
		for _, hb := range b {
			if strings.EqualFold(ha.Name, hb.Name) && exactValue(ha) && exactValue(hb) && ha.Value != hb.Value {
				return false
			}
		}
	}
	return true
}

// carriesHTTP reports whether a Service port can carry routes: any TCP
// port where the mesh detects the protocol (unless declared otherwise),
// else a port declared or named HTTP, HTTP2 or gRPC.
func (tr *translation) carriesHTTP(sp corev1.ServicePort) bool {
	if sp.Protocol != "" && sp.Protocol != corev1.ProtocolTCP {
		return false
	}
	proto := declaredProtocol(sp)
	switch proto {
	case "http", "http2", "h2c", "grpc", "grpc-web":
		return true
	case "":
		return tr.impl.ProtocolDetection
	default:
		return false
	}
}

// declaredProtocol returns a port's protocol as its appProtocol or name
// declares it (Istio's rules), lower case, or "".
func declaredProtocol(sp corev1.ServicePort) string {
	if sp.AppProtocol != nil && *sp.AppProtocol != "" {
		p := strings.ToLower(*sp.AppProtocol)
		p = strings.TrimPrefix(p, "kubernetes.io/")
		return p
	}
	p, _, _ := strings.Cut(strings.ToLower(sp.Name), "-")
	switch p {
	case "http", "http2", "h2c", "grpc", "grpc-web", "tcp", "tls", "https", "mongo", "mysql", "redis", "udp":
		return p
	}
	return ""
}

func isGRPC(sp corev1.ServicePort) bool { return declaredProtocol(sp) == "grpc" }

// httpRoute emits one HTTPRoute for a Service port.
func (tr *translation) httpRoute(name string, svc *corev1.Service, port int32, parent gatewayv1.ParentReference, rules []ruleRef) {
	rs, used := expressible(rules, func(r ruleRef) (gatewayv1.HTTPRouteRule, bool) { return tr.httpRule(r, svc, port) })
	if len(rs) == 0 {
		return
	}
	route := &httpRoute{TypeMeta: metav1.TypeMeta{APIVersion: gatewayv1.GroupVersion.String(), Kind: KindHTTPRoute}}
	route.Spec.ParentRefs, route.Spec.Rules = []gatewayv1.ParentReference{parent}, rs
	tr.emitRoute(route, &route.ObjectMeta, name, svc.Namespace, used, false)
}

// grpcRoute emits one GRPCRoute for a gRPC Service port.
func (tr *translation) grpcRoute(name string, svc *corev1.Service, port int32, parent gatewayv1.ParentReference, rules []ruleRef) {
	rs, used := expressible(rules, func(r ruleRef) (gatewayv1.GRPCRouteRule, bool) { return tr.grpcRule(r, svc, port) })
	if len(rs) == 0 {
		return
	}
	route := &grpcRoute{TypeMeta: metav1.TypeMeta{APIVersion: gatewayv1.GroupVersion.String(), Kind: KindGRPCRoute}}
	route.Spec.ParentRefs, route.Spec.Rules = []gatewayv1.ParentReference{parent}, rs
	tr.emitRoute(route, &route.ObjectMeta, name, svc.Namespace, used, true)
}

// expressible returns the route rules of the rules convert can express,
// and those rules.
func expressible[R any](rules []ruleRef, convert func(ruleRef) (R, bool)) ([]R, []ruleRef) {
	var out []R
	var used []ruleRef
	for _, r := range rules {
		if rule, ok := convert(r); ok {
			out = append(out, rule)
			used = append(used, r)
		}
	}
	return out, used
}

// emitRoute names a route, warns where its rules' precedence differs from
// the policy's order, sets its retry annotations and emits it.
func (tr *translation) emitRoute(route any, meta *metav1.ObjectMeta, name, namespace string, used []ruleRef, grpc bool) {
	meta.Name, meta.Namespace = name, namespace
	tr.precedenceWarnings(used)
	meta.Annotations = tr.retryAnnotations(used, grpc)
	tr.emit(route, parentsOf(used)...)
}

// httpRoute is an HTTPRoute without status, which is the implementation's
// to write (gatewayv1.HTTPRoute would encode "status": {"parents": null}).
type httpRoute struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              gatewayv1.HTTPRouteSpec `json:"spec"`
}

// grpcRoute is a GRPCRoute without status.
type grpcRoute struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              gatewayv1.GRPCRouteSpec `json:"spec"`
}

// httpRule translates one rule for a route of svc on port, or reports
// why it is left out.
func (tr *translation) httpRule(r ruleRef, svc *corev1.Service, port int32) (gatewayv1.HTTPRouteRule, bool) {
	rule := r.rule()
	var out gatewayv1.HTTPRouteRule
	var ok bool
	if out.Matches, ok = matches(tr, r, KindHTTPRoute, tr.httpMatch); !ok {
		return out, false
	}
	refs, ok := tr.backendRefs(r, svc, port)
	if !ok {
		return out, false
	}
	for _, b := range refs {
		out.BackendRefs = append(out.BackendRefs, gatewayv1.HTTPBackendRef{BackendRef: b})
	}
	out.Filters = tr.filters(r, svc, port)
	if rule.Timeout != nil {
		if tr.impl.Has(RequestTimeout) {
			out.Timeouts = &gatewayv1.HTTPRouteTimeouts{Request: ptr(gatewayDuration(rule.Timeout.Duration))}
		} else {
			tr.missing(r, ".timeout", RequestTimeout)
		}
	}
	tr.unexpressible(r)
	return out, true
}

// matches converts a rule's matches for a route of kind; it reports false,
// with a warning, when the rule has matches and none can be expressed.
func matches[M any](tr *translation, r ruleRef, kind string, convert func(ruleRef, int, policyv1alpha1.HTTPMatch) (M, bool)) ([]M, bool) {
	rule := r.rule()
	var out []M
	for i, m := range rule.Matches {
		if gm, ok := convert(r, i, m); ok {
			out = append(out, gm)
		}
	}
	if len(rule.Matches) > 0 && len(out) == 0 {
		tr.warn(r.policy, r.path(".matches"), "none of the rule's matches can be expressed as %s %s match: the rule is left out", article(kind), kind)
		return nil, false
	}
	return out, true
}

// article is the indefinite article of a route kind.
func article(kind string) string {
	if kind == KindHTTPRoute {
		return "an"
	}
	return "a"
}

// grpcRule translates one rule for a GRPCRoute.
func (tr *translation) grpcRule(r ruleRef, svc *corev1.Service, port int32) (gatewayv1.GRPCRouteRule, bool) {
	rule := r.rule()
	var out gatewayv1.GRPCRouteRule
	var ok bool
	if out.Matches, ok = matches(tr, r, KindGRPCRoute, tr.grpcMatch); !ok {
		return out, false
	}
	refs, ok := tr.backendRefs(r, svc, port)
	if !ok {
		return out, false
	}
	for _, b := range refs {
		out.BackendRefs = append(out.BackendRefs, gatewayv1.GRPCBackendRef{BackendRef: b})
	}
	for _, f := range tr.filters(r, svc, port) {
		out.Filters = append(out.Filters, gatewayv1.GRPCRouteFilter{
			Type:                   gatewayv1.GRPCRouteFilterType(f.Type),
			RequestHeaderModifier:  f.RequestHeaderModifier,
			ResponseHeaderModifier: f.ResponseHeaderModifier,
			RequestMirror:          f.RequestMirror,
		})
	}
	if rule.Timeout != nil {
		tr.warn(r.policy, r.path(".timeout"), "a GRPCRoute has no timeouts in the Gateway API's standard channel: the timeout is not applied")
	}
	tr.unexpressible(r)
	return out, true
}

// unexpressible warns about what no route expresses: fault injection.
func (tr *translation) unexpressible(r ruleRef) {
	if r.rule().Fault != nil {
		tr.warn(r.policy, r.path(".fault"), "the Gateway API has no fault injection: the fault is not applied")
	}
}

// missing warns that the implementation lacks a feature a field needs.
func (tr *translation) missing(r ruleRef, field string, f Feature) {
	tr.warn(r.policy, r.path(field), "%s does not support %s (Gateway API conformance report %s): the field is not applied", tr.impl.Mesh, f, tr.impl.Report)
}

// httpMatch translates one match, or reports why it is left out.
func (tr *translation) httpMatch(r ruleRef, i int, m policyv1alpha1.HTTPMatch) (gatewayv1.HTTPRouteMatch, bool) {
	at := func(field string) string { return r.path(fmt.Sprintf(".matches[%d]%s", i, field)) }
	var out gatewayv1.HTTPRouteMatch
	if m.Path != nil {
		out.Path = pathMatch(*m.Path)
	}
	if m.Method != "" {
		if !tr.impl.Has(MethodMatching) {
			tr.warn(r.policy, at(".method"), "%s does not support %s: the match is left out", tr.impl.Mesh, MethodMatching)
			return out, false
		}
		out.Method = ptr(gatewayv1.HTTPMethod(m.Method))
	}
	for j, h := range m.Headers {
		typ, value, ok := headerMatch(h)
		if !ok {
			tr.warn(r.policy, at(fmt.Sprintf(".headers[%d].invert", j)), "the Gateway API cannot match the absence of a header: the match is left out")
			return out, false
		}
		out.Headers = append(out.Headers, gatewayv1.HTTPHeaderMatch{Type: ptr(gatewayv1.HeaderMatchType(typ)), Name: gatewayv1.HTTPHeaderName(h.Name), Value: value})
	}
	if len(m.QueryParams) > 0 && !tr.impl.Has(QueryParamMatching) {
		tr.warn(r.policy, at(".queryParams"), "%s does not support %s: the match is left out", tr.impl.Mesh, QueryParamMatching)
		return out, false
	}
	for _, q := range m.QueryParams {
		typ, value := gatewayv1.QueryParamMatchExact, q.Value
		switch q.Type {
		case policyv1alpha1.MatchRegex:
			typ = gatewayv1.QueryParamMatchRegularExpression
		case policyv1alpha1.MatchPresent:
			typ, value = gatewayv1.QueryParamMatchRegularExpression, ".*"
		}
		out.QueryParams = append(out.QueryParams, gatewayv1.HTTPQueryParamMatch{Type: ptr(typ), Name: gatewayv1.HTTPHeaderName(q.Name), Value: value})
	}
	return out, true
}

// grpcMatch translates one match into a gRPC method and header match, or
// reports why it is left out: only paths naming a gRPC service or method,
// the POST method and header matches are expressible.
func (tr *translation) grpcMatch(r ruleRef, i int, m policyv1alpha1.HTTPMatch) (gatewayv1.GRPCRouteMatch, bool) {
	at := func(field string) string { return r.path(fmt.Sprintf(".matches[%d]%s", i, field)) }
	var out gatewayv1.GRPCRouteMatch
	if m.Path != nil {
		mm, ok := grpcMethod(*m.Path)
		if !ok {
			tr.warn(r.policy, at(".path"), "a GRPCRoute matches a path only as /service/method (Exact) or /service/ (Prefix): the match is left out")
			return out, false
		}
		out.Method = mm
	}
	if m.Method != "" && m.Method != "POST" {
		tr.warn(r.policy, at(".method"), "gRPC requests are POST requests: the match is left out")
		return out, false
	}
	if len(m.QueryParams) > 0 {
		tr.warn(r.policy, at(".queryParams"), "a GRPCRoute cannot match query parameters: the match is left out")
		return out, false
	}
	for j, h := range m.Headers {
		typ, value, ok := headerMatch(h)
		if !ok {
			tr.warn(r.policy, at(fmt.Sprintf(".headers[%d].invert", j)), "the Gateway API cannot match the absence of a header: the match is left out")
			return out, false
		}
		out.Headers = append(out.Headers, gatewayv1.GRPCHeaderMatch{Type: ptr(gatewayv1.GRPCHeaderMatchType(typ)), Name: gatewayv1.GRPCHeaderName(h.Name), Value: value})
	}
	return out, true
}

// grpcServiceName is what a gRPC service name may hold in a GRPCRoute.
var grpcServiceName = regexp.MustCompile(`^(?i)\.?[a-z_][a-z_0-9]*(\.[a-z_][a-z_0-9]*)*$`)
var grpcMethodName = regexp.MustCompile(`^[A-Za-z_][A-Za-z_0-9]*$`)

// grpcMethod returns the GRPCRoute method match of a path: /svc/method
// exactly, /svc/ as a prefix or / for any.
func grpcMethod(p policyv1alpha1.PathMatch) (*gatewayv1.GRPCMethodMatch, bool) {
	parts := strings.Split(strings.TrimPrefix(p.Value, "/"), "/")
	switch {
	case p.Type == policyv1alpha1.MatchExact && len(parts) == 2 && grpcServiceName.MatchString(parts[0]) && grpcMethodName.MatchString(parts[1]):
		return &gatewayv1.GRPCMethodMatch{Type: ptr(gatewayv1.GRPCMethodMatchExact), Service: ptr(parts[0]), Method: ptr(parts[1])}, true
	case (p.Type == "" || p.Type == policyv1alpha1.MatchPrefix) && p.Value == "/":
		return nil, true
	case (p.Type == "" || p.Type == policyv1alpha1.MatchPrefix) && len(parts) == 2 && parts[1] == "" && grpcServiceName.MatchString(parts[0]):
		return &gatewayv1.GRPCMethodMatch{Type: ptr(gatewayv1.GRPCMethodMatchExact), Service: ptr(parts[0])}, true
	}
	return nil, false
}

// pathMatch translates a path match. A TrafficPolicy's prefix is a string
// prefix, the Gateway API's PathPrefix a prefix of path segments: "/" is
// both, any other prefix becomes a regular expression.
func pathMatch(p policyv1alpha1.PathMatch) *gatewayv1.HTTPPathMatch {
	switch p.Type {
	case policyv1alpha1.MatchExact:
		return &gatewayv1.HTTPPathMatch{Type: ptr(gatewayv1.PathMatchExact), Value: ptr(p.Value)}
	case policyv1alpha1.MatchRegex:
		return &gatewayv1.HTTPPathMatch{Type: ptr(gatewayv1.PathMatchRegularExpression), Value: ptr(p.Value)}
	}
	if p.Value == "/" {
		return &gatewayv1.HTTPPathMatch{Type: ptr(gatewayv1.PathMatchPathPrefix), Value: ptr("/")}
	}
	return &gatewayv1.HTTPPathMatch{Type: ptr(gatewayv1.PathMatchRegularExpression), Value: ptr(regexp.QuoteMeta(p.Value) + ".*")}
}

// headerMatch returns the type and value of a header match, false for an
// inverted one. Prefix and Present become regular expressions.
func headerMatch(h policyv1alpha1.HeaderMatch) (string, string, bool) {
	if h.Invert {
		return "", "", false
	}
	switch h.Type {
	case policyv1alpha1.MatchPrefix:
		return "RegularExpression", regexp.QuoteMeta(h.Value) + ".*", true
	case policyv1alpha1.MatchRegex:
		return "RegularExpression", h.Value, true
	case policyv1alpha1.MatchPresent:
		return "RegularExpression", ".*", true
	}
	return "Exact", h.Value, true
}

// filters translates the rule's header changes and mirror.
func (tr *translation) filters(r ruleRef, svc *corev1.Service, port int32) []gatewayv1.HTTPRouteFilter {
	rule := r.rule()
	var out []gatewayv1.HTTPRouteFilter
	if h := rule.Headers; h != nil {
		if h.Request != nil {
			out = append(out, gatewayv1.HTTPRouteFilter{Type: gatewayv1.HTTPRouteFilterRequestHeaderModifier, RequestHeaderModifier: tr.headerFilter(r, ".headers.request", h.Request)})
		}
		if h.Response != nil {
			if tr.impl.Has(ResponseHeaderModification) {
				out = append(out, gatewayv1.HTTPRouteFilter{Type: gatewayv1.HTTPRouteFilterResponseHeaderModifier, ResponseHeaderModifier: tr.headerFilter(r, ".headers.response", h.Response)})
			} else {
				tr.missing(r, ".headers.response", ResponseHeaderModification)
			}
		}
	}
	if m := rule.Mirror; m != nil {
		switch {
		case !tr.impl.Has(RequestMirror):
			tr.missing(r, ".mirror", RequestMirror)
		case m.Percent != nil && *m.Percent < 100 && !tr.impl.Has(RequestPercentageMirror):
			tr.missing(r, ".mirror.percent", RequestPercentageMirror)
		default:
			refs, ok := tr.resolve(r, ".mirror.destination", m.Destination, 1, svc, port)
			if !ok {
				break
			}
			if len(refs) > 1 {
				tr.warn(r.policy, r.path(".mirror.destination"), "a mirror has one backend: the VirtualDestination's Service %s is mirrored to, not its others", refs[0].Name)
			}
			f := &gatewayv1.HTTPRequestMirrorFilter{BackendRef: refs[0].BackendObjectReference}
			if m.Percent != nil && *m.Percent < 100 {
				f.Percent = ptr(*m.Percent)
			}
			out = append(out, gatewayv1.HTTPRouteFilter{Type: gatewayv1.HTTPRouteFilterRequestMirror, RequestMirror: f})
		}
	}
	return out
}

// headerFilter translates header operations; a header set or added twice
// keeps its first value, as the Gateway API lists each name once.
func (tr *translation) headerFilter(r ruleRef, field string, ops *policyv1alpha1.HeaderOperations) *gatewayv1.HTTPHeaderFilter {
	f := &gatewayv1.HTTPHeaderFilter{Remove: slices.Clone(ops.Remove)}
	list := func(kind string, hs []policyv1alpha1.HTTPHeader) []gatewayv1.HTTPHeader {
		var out []gatewayv1.HTTPHeader
		seen := map[string]bool{}
		for i, h := range hs {
			k := strings.ToLower(h.Name)
			if seen[k] {
				tr.warn(r.policy, r.path(fmt.Sprintf("%s.%s[%d]", field, kind, i)), "the Gateway API takes one value per header: header %q is %s once, with its first value", h.Name, kind)
				continue
			}
			seen[k] = true
			out = append(out, gatewayv1.HTTPHeader{Name: gatewayv1.HTTPHeaderName(h.Name), Value: h.Value})
		}
		return out
	}
	f.Set = list("set", ops.Set)
	f.Add = list("add", ops.Add)
	return f
}

// retryAnnotations returns Linkerd's retry annotations for a route whose
// rules are rules: a route has one retry policy, the first rule's with
// retries; rules that differ get a warning.
func (tr *translation) retryAnnotations(rules []ruleRef, grpc bool) map[string]string {
	var first *ruleRef
	for i, r := range rules {
		rp := r.rule().Retries
		if rp == nil {
			continue
		}
		if !tr.impl.RetryAnnotations {
			tr.warn(r.policy, r.path(".retries"), "%s takes retries only from the experimental channel's HTTPRouteRetry, which its conformance report does not list: the retries are not applied", tr.impl.Mesh)
			continue
		}
		if first == nil {
			first = &rules[i]
			continue
		}
		if !retriesEqual(rp, first.rule().Retries) {
			tr.warn(r.policy, r.path(".retries"), "Linkerd takes retries per route, not per rule: the route for this Service retries as %s spec.http[%d] says", sdk.RefOf(first.policy).Key(), first.index)
		}
	}
	if first == nil {
		return nil
	}
	for _, r := range rules {
		if r.rule().Retries == nil {
			tr.warn(r.policy, r.path(""), "Linkerd takes retries per route, not per rule: this rule is retried as %s spec.http[%d] says", sdk.RefOf(first.policy).Key(), first.index)
		}
	}
	rp := first.rule().Retries
	ann := map[string]string{RetryLimitAnnotation: strconv.Itoa(int(rp.Attempts))}
	if rp.PerTryTimeout != nil {
		ann[RetryTimeoutAnnotation] = linkerdDuration(rp.PerTryTimeout.Duration)
	}
	var conds []string
	for i, c := range rp.RetryOn {
		v, ok := linkerdRetryCondition(c, grpc)
		if !ok {
			tr.warn(first.policy, first.path(fmt.Sprintf(".retries.retryOn[%d]", i)), "Linkerd cannot retry on %s: the condition is left out", c)
			continue
		}
		conds = append(conds, v)
	}
	if len(rp.RetryOn) == 0 {
		conds = []string{"5xx"}
		if grpc {
			conds = []string{"unavailable"}
		}
	}
	if len(conds) > 0 {
		key := RetryHTTPAnnotation
		if grpc {
			key = RetryGRPCAnnotation
		}
		ann[key] = strings.Join(slices.Compact(conds), ",")
	}
	return ann
}

func retriesEqual(a, b *policyv1alpha1.RetryPolicy) bool {
	return a.Attempts == b.Attempts && slices.Equal(a.RetryOn, b.RetryOn) &&
		(a.PerTryTimeout == nil) == (b.PerTryTimeout == nil) && (a.PerTryTimeout == nil || a.PerTryTimeout.Duration == b.PerTryTimeout.Duration)
}

// linkerdRetryCondition maps a retry condition to Linkerd's.
func linkerdRetryCondition(c policyv1alpha1.RetryCondition, grpc bool) (string, bool) {
	if grpc {
		switch c {
		case "cancelled", "deadline-exceeded", "internal", "resource-exhausted", "unavailable":
			return string(c), true
		}
		return "", false
	}
	switch c {
	case "5xx", "gateway-error":
		return string(c), true
	case "retriable-4xx":
		return "409", true
	}
	return "", false
}

// gatewayDuration formats d as a Gateway API Duration (GEP-2257): whole
// milliseconds, rounded up, as hours, minutes, seconds and milliseconds.
func gatewayDuration(d time.Duration) gatewayv1.Duration {
	ms := (d + time.Millisecond - 1) / time.Millisecond
	if ms <= 0 {
		return "0s"
	}
	var b strings.Builder
	for _, u := range []struct {
		n    time.Duration
		unit string
	}{{3600_000, "h"}, {60_000, "m"}, {1000, "s"}, {1, "ms"}} {
		if v := ms / u.n; v > 0 {
			fmt.Fprintf(&b, "%d%s", v, u.unit)
			ms -= v * u.n
		}
	}
	return gatewayv1.Duration(b.String())
}

// linkerdDuration formats d for Linkerd's annotations: whole milliseconds,
// rounded up.
func linkerdDuration(d time.Duration) string {
	return strconv.FormatInt(int64((d+time.Millisecond-1)/time.Millisecond), 10) + "ms"
}

func ptr[T any](v T) *T { return &v }
