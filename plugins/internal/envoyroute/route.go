package envoyroute

import (
	"fmt"
	"slices"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	faultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Names of the HTTP filters the routes need.
const (
	RouterFilter = "envoy.filters.http.router"
	FaultFilter  = "envoy.filters.http.fault"
	HCMFilter    = "envoy.filters.network.http_connection_manager"
)

// DefaultRetryOn is what a retry policy without conditions retries on.
const DefaultRetryOn = "5xx,connect-failure,refused-stream,reset"

// Resolver names the Envoy Cluster of a rule's destination; path is the
// destination's field path in the policy (for diagnostics). ok is false
// when the destination cannot be served, which the Resolver reports: the
// rule is then left out.
type Resolver func(tp *policyv1alpha1.TrafficPolicy, path string, d policyv1alpha1.Destination) (cluster string, ok bool)

// Routes translates the TrafficPolicies' rules, in order, and ends with a
// catch-all route "default" to defaultCluster unless a rule's route
// already matches every request. A rule's route is named
// "<policy namespace>/<policy name>/<rule name or index>/<match index>".
// fault reports whether some route injects faults (the HTTP connection
// manager then needs the fault filter, see HTTPFilters).
func Routes(tps []*policyv1alpha1.TrafficPolicy, resolve Resolver, defaultCluster string) (routes []*routev3.Route, fault bool) {
	for _, tp := range tps {
		for ri, rule := range tp.Spec.HTTP {
			path := fmt.Sprintf("spec.http[%d]", ri)
			action, ok := routeAction(tp, path, rule, resolve, defaultCluster)
			if !ok {
				continue
			}
			name := rule.Name
			if name == "" {
				name = fmt.Sprint(ri)
			}
			matches := rule.Matches
			if len(matches) == 0 {
				matches = []policyv1alpha1.HTTPMatch{{}}
			}
			for mi, m := range matches {
				r := &routev3.Route{
					Name:   fmt.Sprintf("%s/%s/%s/%d", tp.Namespace, tp.Name, name, mi),
					Match:  routeMatch(m),
					Action: &routev3.Route_Route{Route: action},
				}
				headers(r, rule.Headers)
				if rule.Fault != nil {
					r.TypedPerFilterConfig = map[string]*anypb.Any{FaultFilter: Any(faultConfig(rule.Fault))}
					fault = true
				}
				routes = append(routes, r)
			}
		}
	}
	if slices.ContainsFunc(routes, CatchAll) {
		// A rule without matches already takes every request: a default
		// route after it could never be reached.
		return routes, fault
	}
	routes = append(routes, &routev3.Route{
		Name:   "default",
		Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
		Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: defaultCluster}}},
	})
	return routes, fault
}

// HTTPFilters are the HTTP filters of an HTTP connection manager serving
// Routes: the fault filter when a route injects faults, then the router.
func HTTPFilters(fault bool) []*hcmv3.HttpFilter {
	var filters []*hcmv3.HttpFilter
	if fault {
		filters = append(filters, HTTPFilter(FaultFilter, &faultv3.HTTPFault{}))
	}
	return append(filters, HTTPFilter(RouterFilter, &routerv3.Router{}))
}

// HTTPFilter is the HTTP filter name configured with cfg.
func HTTPFilter(name string, cfg proto.Message) *hcmv3.HttpFilter {
	return &hcmv3.HttpFilter{Name: name, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: Any(cfg)}}
}

// Any wraps a message whose type is linked in; it cannot fail.
func Any(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		panic(fmt.Sprintf("wrap %T: %v", m, err))
	}
	return a
}

// CatchAll reports whether a route matches every request: the path prefix
// "/" and no other condition.
func CatchAll(r *routev3.Route) bool {
	m := r.GetMatch()
	return m.GetPrefix() == "/" && len(m.GetHeaders()) == 0 && len(m.GetQueryParameters()) == 0 && len(m.GetCookies()) == 0 &&
		m.GetRuntimeFraction() == nil && m.GetGrpc() == nil && m.GetTlsContext() == nil &&
		len(m.GetDynamicMetadata()) == 0 && len(m.GetFilterState()) == 0
}

// routeAction builds where a rule sends traffic and how; ok is false when
// a destination cannot be resolved.
func routeAction(tp *policyv1alpha1.TrafficPolicy, path string, rule policyv1alpha1.HTTPRule, resolve Resolver, defaultCluster string) (*routev3.RouteAction, bool) {
	a := &routev3.RouteAction{}
	if len(rule.Route) == 0 {
		a.ClusterSpecifier = &routev3.RouteAction_Cluster{Cluster: defaultCluster}
	} else {
		if !weightedClusters(a, tp, path, rule.Route, resolve) {
			return nil, false
		}
	}
	if rule.Timeout != nil && rule.Timeout.Duration > 0 {
		a.Timeout = durationpb.New(rule.Timeout.Duration)
		a.MaxStreamDuration = &routev3.RouteAction_MaxStreamDuration{MaxStreamDuration: durationpb.New(rule.Timeout.Duration)}
	}
	if r := rule.Retries; r != nil && r.Attempts > 0 {
		on := DefaultRetryOn
		if len(r.RetryOn) > 0 {
			conds := make([]string, len(r.RetryOn))
			for i, c := range r.RetryOn {
				conds[i] = string(c)
			}
			on = strings.Join(conds, ",")
		}
		a.RetryPolicy = &routev3.RetryPolicy{RetryOn: on, NumRetries: wrapperspb.UInt32(uint32(r.Attempts))}
		if r.PerTryTimeout != nil && r.PerTryTimeout.Duration > 0 {
			a.RetryPolicy.PerTryTimeout = durationpb.New(r.PerTryTimeout.Duration)
		}
	}
	if m := rule.Mirror; m != nil {
		name, ok := resolve(tp, path+".mirror.destination", m.Destination)
		if !ok {
			return nil, false
		}
		pct := uint32(100)
		if m.Percent != nil {
			pct = uint32(*m.Percent)
		}
		a.RequestMirrorPolicies = []*routev3.RouteAction_RequestMirrorPolicy{{
			Cluster:         name,
			RuntimeFraction: &corev3.RuntimeFractionalPercent{DefaultValue: percent(pct)},
		}}
	}
	return a, true
}

// weightedClusters resolves a rule's route into a: one Cluster, or
// weighted Clusters (an equal split when every weight is 0; destinations
// resolving to one Cluster add up). It is false when a destination cannot
// be resolved.
func weightedClusters(a *routev3.RouteAction, tp *policyv1alpha1.TrafficPolicy, path string, route []policyv1alpha1.WeightedDestination, resolve Resolver) bool {
	allZero := !slices.ContainsFunc(route, func(wd policyv1alpha1.WeightedDestination) bool { return wd.Weight != 0 })
	var clusters []*routev3.WeightedCluster_ClusterWeight
	for i, wd := range route {
		name, ok := resolve(tp, fmt.Sprintf("%s.route[%d]", path, i), wd.Destination)
		if !ok {
			return false
		}
		weight := uint32(wd.Weight)
		if allZero {
			weight = 1
		}
		if weight == 0 {
			continue
		}
		if j := slices.IndexFunc(clusters, func(c *routev3.WeightedCluster_ClusterWeight) bool { return c.Name == name }); j >= 0 {
			clusters[j].Weight = wrapperspb.UInt32(clusters[j].Weight.GetValue() + weight)
			continue
		}
		clusters = append(clusters, &routev3.WeightedCluster_ClusterWeight{Name: name, Weight: wrapperspb.UInt32(weight)})
	}
	if len(clusters) == 1 {
		a.ClusterSpecifier = &routev3.RouteAction_Cluster{Cluster: clusters[0].Name}
	} else {
		a.ClusterSpecifier = &routev3.RouteAction_WeightedClusters{WeightedClusters: &routev3.WeightedCluster{Clusters: clusters}}
	}
	return true
}

func percent(n uint32) *typev3.FractionalPercent {
	return &typev3.FractionalPercent{Numerator: n, Denominator: typev3.FractionalPercent_HUNDRED}
}
