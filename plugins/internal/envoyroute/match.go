package envoyroute

import (
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	faultcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/common/fault/v3"
	faultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"google.golang.org/protobuf/types/known/durationpb"
)

// routeMatch translates one match; all its conditions must hold.
func routeMatch(m policyv1alpha1.HTTPMatch) *routev3.RouteMatch {
	rm := &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}}
	if p := m.Path; p != nil {
		switch p.Type {
		case policyv1alpha1.MatchExact:
			rm.PathSpecifier = &routev3.RouteMatch_Path{Path: p.Value}
		case policyv1alpha1.MatchRegex:
			rm.PathSpecifier = &routev3.RouteMatch_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: p.Value}}
		default:
			rm.PathSpecifier = &routev3.RouteMatch_Prefix{Prefix: p.Value}
		}
	}
	if m.Method != "" {
		rm.Headers = append(rm.Headers, &routev3.HeaderMatcher{
			Name:                 ":method",
			HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: Exact(string(m.Method))},
		})
	}
	for _, h := range m.Headers {
		hm := &routev3.HeaderMatcher{Name: strings.ToLower(h.Name), InvertMatch: h.Invert}
		if h.Type == policyv1alpha1.MatchPresent {
			hm.HeaderMatchSpecifier = &routev3.HeaderMatcher_PresentMatch{PresentMatch: true}
		} else {
			hm.HeaderMatchSpecifier = &routev3.HeaderMatcher_StringMatch{StringMatch: stringMatch(h.Type, h.Value)}
		}
		rm.Headers = append(rm.Headers, hm)
	}
	for _, q := range m.QueryParams {
		qm := &routev3.QueryParameterMatcher{Name: q.Name}
		if q.Type == policyv1alpha1.MatchPresent {
			qm.QueryParameterMatchSpecifier = &routev3.QueryParameterMatcher_PresentMatch{PresentMatch: true}
		} else {
			qm.QueryParameterMatchSpecifier = &routev3.QueryParameterMatcher_StringMatch{StringMatch: stringMatch(q.Type, q.Value)}
		}
		rm.QueryParameters = append(rm.QueryParameters, qm)
	}
	return rm
}

// Exact matches the string v exactly.
func Exact(v string) *matcherv3.StringMatcher {
	return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: v}}
}

func stringMatch(t policyv1alpha1.MatchType, v string) *matcherv3.StringMatcher {
	switch t {
	case policyv1alpha1.MatchPrefix:
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: v}}
	case policyv1alpha1.MatchRegex:
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: v}}}
	}
	return Exact(v)
}

// headers applies a rule's header changes to a route.
func headers(r *routev3.Route, h *policyv1alpha1.HeaderManipulation) {
	if h == nil {
		return
	}
	if ops := h.Request; ops != nil {
		r.RequestHeadersToRemove = append(r.RequestHeadersToRemove, ops.Remove...)
		r.RequestHeadersToAdd = append(r.RequestHeadersToAdd, headerOptions(ops)...)
	}
	if ops := h.Response; ops != nil {
		r.ResponseHeadersToRemove = append(r.ResponseHeadersToRemove, ops.Remove...)
		r.ResponseHeadersToAdd = append(r.ResponseHeadersToAdd, headerOptions(ops)...)
	}
}

func headerOptions(ops *policyv1alpha1.HeaderOperations) []*corev3.HeaderValueOption {
	var out []*corev3.HeaderValueOption
	for _, h := range ops.Set {
		out = append(out, &corev3.HeaderValueOption{
			Header:       &corev3.HeaderValue{Key: strings.ToLower(h.Name), Value: h.Value},
			AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
		})
	}
	for _, h := range ops.Add {
		out = append(out, &corev3.HeaderValueOption{
			Header:       &corev3.HeaderValue{Key: strings.ToLower(h.Name), Value: h.Value},
			AppendAction: corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD,
		})
	}
	return out
}

func faultConfig(f *policyv1alpha1.FaultInjection) *faultv3.HTTPFault {
	out := &faultv3.HTTPFault{}
	if d := f.Delay; d != nil {
		out.Delay = &faultcommonv3.FaultDelay{
			FaultDelaySecifier: &faultcommonv3.FaultDelay_FixedDelay{FixedDelay: durationpb.New(d.FixedDelay.Duration)},
			Percentage:         percent(uint32(d.Percent)),
		}
	}
	if a := f.Abort; a != nil {
		out.Abort = &faultv3.FaultAbort{
			ErrorType:  &faultv3.FaultAbort_HttpStatus{HttpStatus: uint32(a.HTTPStatus)},
			Percentage: percent(uint32(a.Percent)),
		}
	}
	return out
}
