package envoy

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	faultcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/common/fault/v3"
	faultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/sdk"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	corev1 "k8s.io/api/core/v1"
)

// Names of the filters the translator configures.
const (
	RouterFilter = "envoy.filters.http.router"
	FaultFilter  = "envoy.filters.http.fault"
	RBACFilter   = "envoy.filters.http.rbac"
	HCMFilter    = "envoy.filters.network.http_connection_manager"
	// NetworkRBACFilter and TCPProxyFilter make the inbound Listeners of
	// ports that are not HTTP.
	NetworkRBACFilter = "envoy.filters.network.rbac"
	TCPProxyFilter    = "envoy.filters.network.tcp_proxy"
)

// defaultRetryOn is what a retry policy without conditions retries on.
const defaultRetryOn = "5xx,connect-failure,refused-stream,reset"

// ServiceHostname is the hostname clients in a cluster use for one of its
// Services; outbound Listeners of Services are named after it.
func ServiceHostname(namespace, name string) string {
	return name + "." + namespace + ".svc.cluster.local"
}

// target is an outbound hostname at one port: what its Listener routes.
type target struct {
	hostname string
	port     int32
	// backendPort is the Service port behind it: a VirtualDestination's
	// target port, or the Service port itself.
	backendPort    int32
	defaultCluster string
	vhost          *virtualHost
}

// virtualHostListeners adds the Listeners, Clusters and
// ClusterLoadAssignments of a VirtualDestination.
func (b *nodeBuilder) virtualHostListeners(vh *virtualHost) {
	tps := b.idx.trafficFor(vh.backends)
	parents := []policyv1alpha1.Policy{vh.vd}
	for _, tp := range tps {
		parents = append(parents, tp)
	}
	first := true
	for i, vp := range vh.vd.Spec.Ports {
		if vp.Protocol == policyv1alpha1.ProtocolTCP || vp.Protocol == policyv1alpha1.ProtocolTLS {
			b.idx.diags.add(sdk.Warningf(vh.vd, fmt.Sprintf("spec.ports[%d].protocol", i),
				"the envoy backend serves HTTP, HTTP2 and GRPC ports only; port %d is skipped", vp.Number))
			continue
		}
		t := target{hostname: vh.vd.Spec.Hostname, port: vp.Number, backendPort: vp.TargetPort, vhost: vh}
		if t.backendPort == 0 {
			t.backendPort = vp.Number
		}
		t.defaultCluster = b.vdCluster(vh, vp)
		b.outbound(t, tps, first, parents)
		first = false
	}
}

// serviceListeners adds the Listeners of a Service of the node's own
// cluster that TrafficPolicies select.
func (b *nodeBuilder) serviceListeners(d sdk.Destination, tps []*policyv1alpha1.TrafficPolicy) {
	var parents []policyv1alpha1.Policy
	for _, tp := range tps {
		parents = append(parents, tp)
	}
	first := true
	for _, sp := range d.Service.Spec.Ports {
		if sp.Protocol != "" && sp.Protocol != corev1.ProtocolTCP {
			continue
		}
		if tcpPort(sp) {
			for _, tp := range tps {
				b.idx.diags.add(withCluster(sdk.Warningf(tp, "spec.destinationSelectors",
					"port %d of Service %s/%s is not HTTP (%s): the envoy backend routes only HTTP, so the policy's rules do not apply there",
					sp.Port, d.Service.Namespace, d.Service.Name, portProtocol(sp)), d.Cluster.Name))
			}
			continue
		}
		t := target{hostname: ServiceHostname(d.Service.Namespace, d.Service.Name), port: sp.Port, backendPort: sp.Port}
		t.defaultCluster = b.serviceCluster(d, sp, nil, "")
		b.outbound(t, tps, first, parents)
		first = false
	}
}

// outboundHost is an outbound hostname at one port and its routes: what
// a node group's Listeners route, whichever kind of proxy it is.
type outboundHost struct {
	hostname string
	port     int32
	routes   []*routev3.Route
	// fault is whether some route injects faults.
	fault bool
	// bare is whether this is the hostname's first port, which a gRPC
	// client dialing xds:///hostname asks for by the bare hostname.
	bare    bool
	parents []policyv1alpha1.Policy
}

func (h *outboundHost) hostPort() string { return h.hostname + ":" + portString(h.port) }

// outbound records a target's routes; apiListeners and socketListeners
// turn them into Listeners for each kind of node group.
func (b *nodeBuilder) outbound(t target, tps []*policyv1alpha1.TrafficPolicy, withBareName bool, parents []policyv1alpha1.Policy) {
	routes, fault := b.routes(t, tps)
	b.hosts = append(b.hosts, &outboundHost{hostname: t.hostname, port: t.port, routes: routes, fault: fault, bare: withBareName, parents: parents})
}

// outboundFilters are the HTTP filters of an outbound HTTP connection
// manager: the fault filter when a route injects faults, then the router.
func outboundFilters(fault bool) []*hcmv3.HttpFilter {
	var filters []*hcmv3.HttpFilter
	if fault {
		filters = append(filters, httpFilter(FaultFilter, &faultv3.HTTPFault{}))
	}
	return append(filters, httpFilter(RouterFilter, &routerv3.Router{}))
}

// apiListeners adds, for gRPC xDS client node groups, the api_listener
// Listeners of the hosts, named "hostname:port" and, for the hostname's
// first port, "hostname", so that gRPC clients dialing xds:///hostname
// find them. Routes are inline.
func apiListeners(set resourceSet, hosts []*outboundHost) {
	for _, h := range hosts {
		hostPort := h.hostPort()
		rc := &routev3.RouteConfiguration{
			Name: "outbound|" + hostPort,
			VirtualHosts: []*routev3.VirtualHost{{
				Name:    hostPort,
				Domains: []string{h.hostname, hostPort},
				Routes:  h.routes,
			}},
		}
		hcm := &hcmv3.HttpConnectionManager{
			StatPrefix:     "outbound|" + hostPort,
			RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: rc},
			HttpFilters:    outboundFilters(h.fault),
		}
		names := []string{hostPort}
		if h.bare {
			names = append(names, h.hostname)
		}
		for _, name := range names {
			set.add(ListenerType, &listenerv3.Listener{
				Name:        name,
				ApiListener: &listenerv3.ApiListener{ApiListener: mustAny(hcm)},
			}, h.parents...)
		}
	}
}

// OutboundListenerName names the outbound socket Listener of an Envoy node
// group at one port; it listens on 0.0.0.0 at that port.
func OutboundListenerName(port int32) string { return "outbound|0.0.0.0:" + portString(port) }

// OutboundRouteName names the RouteConfiguration that the outbound socket
// Listener at one port loads over RDS.
func OutboundRouteName(port int32) string { return "outbound|" + portString(port) }

// socketListeners adds, for Envoy node groups, one socket Listener per
// outbound port, on 0.0.0.0 at that port, whose HTTP connection manager
// loads over RDS a RouteConfiguration with one virtual host per hostname
// at that port (its domains the hostname and hostname:port). Envoy takes
// api_listeners only from its bootstrap, never over LDS. When two hosts
// share a hostname and port the first one's routes are kept, as for
// api_listeners.
func socketListeners(set resourceSet, hosts []*outboundHost) {
	byPort := map[int32][]*outboundHost{}
	for _, h := range hosts {
		byPort[h.port] = append(byPort[h.port], h)
	}
	for _, port := range slices.Sorted(maps.Keys(byPort)) {
		rc := &routev3.RouteConfiguration{Name: OutboundRouteName(port)}
		var parents []policyv1alpha1.Policy
		fault := false
		seen := map[string]bool{}
		for _, h := range byPort[port] {
			parents = appendParents(parents, h.parents...)
			if seen[h.hostname] {
				continue
			}
			seen[h.hostname] = true
			fault = fault || h.fault
			rc.VirtualHosts = append(rc.VirtualHosts, &routev3.VirtualHost{
				Name:    h.hostPort(),
				Domains: []string{h.hostname, h.hostPort()},
				Routes:  h.routes,
			})
		}
		slices.SortFunc(rc.VirtualHosts, func(a, b *routev3.VirtualHost) int { return strings.Compare(a.GetName(), b.GetName()) })
		hcm := &hcmv3.HttpConnectionManager{
			StatPrefix: OutboundListenerName(port),
			RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
				ConfigSource: adsConfigSource(), RouteConfigName: rc.Name,
			}},
			HttpFilters: outboundFilters(fault),
		}
		set.add(RouteType, rc, parents...)
		set.add(ListenerType, &listenerv3.Listener{
			Name:             OutboundListenerName(port),
			Address:          socketAddress("0.0.0.0", uint32(port)),
			TrafficDirection: corev3.TrafficDirection_OUTBOUND,
			FilterChains: []*listenerv3.FilterChain{{
				Name: rc.Name,
				Filters: []*listenerv3.Filter{{
					Name:       HCMFilter,
					ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(hcm)},
				}},
			}},
		}, parents...)
	}
}

func httpFilter(name string, cfg proto.Message) *hcmv3.HttpFilter {
	return &hcmv3.HttpFilter{Name: name, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(cfg)}}
}

// mustAny wraps a message whose type is linked in; it cannot fail.
func mustAny(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		panic(fmt.Sprintf("wrap %T: %v", m, err))
	}
	return a
}

// routes translates the TrafficPolicies' rules, in order, and ends with a
// catch-all route to the target's own Cluster unless a rule's route
// already matches every request. fault reports whether some route injects
// faults.
func (b *nodeBuilder) routes(t target, tps []*policyv1alpha1.TrafficPolicy) (routes []*routev3.Route, fault bool) {
	for _, tp := range tps {
		for ri, rule := range tp.Spec.HTTP {
			path := fmt.Sprintf("spec.http[%d]", ri)
			action, ok := b.routeAction(tp, path, rule, t)
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
					r.TypedPerFilterConfig = map[string]*anypb.Any{FaultFilter: mustAny(faultConfig(rule.Fault))}
					fault = true
				}
				routes = append(routes, r)
			}
		}
	}
	if slices.ContainsFunc(routes, catchAll) {
		// A rule without matches already takes every request: a default
		// route after it could never be reached.
		return routes, fault
	}
	routes = append(routes, &routev3.Route{
		Name:   "default",
		Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
		Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: t.defaultCluster}}},
	})
	return routes, fault
}

// catchAll reports whether a route matches every request: the path prefix
// "/" and no other condition.
func catchAll(r *routev3.Route) bool {
	m := r.GetMatch()
	return m.GetPrefix() == "/" && len(m.GetHeaders()) == 0 && len(m.GetQueryParameters()) == 0 && len(m.GetCookies()) == 0 &&
		m.GetRuntimeFraction() == nil && m.GetGrpc() == nil && m.GetTlsContext() == nil &&
		len(m.GetDynamicMetadata()) == 0 && len(m.GetFilterState()) == 0
}

// routeAction builds where a rule sends traffic and how; ok is false when
// a destination cannot be resolved (reported as a diagnostic).
func (b *nodeBuilder) routeAction(tp *policyv1alpha1.TrafficPolicy, path string, rule policyv1alpha1.HTTPRule, t target) (*routev3.RouteAction, bool) {
	a := &routev3.RouteAction{}
	switch len(rule.Route) {
	case 0:
		a.ClusterSpecifier = &routev3.RouteAction_Cluster{Cluster: t.defaultCluster}
	default:
		type weighted struct {
			name   string
			weight uint32
		}
		var ws []weighted
		allZero := true
		for i, wd := range rule.Route {
			name, ok := b.destinationCluster(tp, fmt.Sprintf("%s.route[%d]", path, i), wd.Destination, t)
			if !ok {
				return nil, false
			}
			if wd.Weight != 0 {
				allZero = false
			}
			ws = append(ws, weighted{name, uint32(wd.Weight)})
		}
		var clusters []*routev3.WeightedCluster_ClusterWeight
		for _, w := range ws {
			if allZero {
				w.weight = 1
			}
			if w.weight == 0 {
				continue
			}
			merged := false
			for _, c := range clusters {
				if c.Name == w.name {
					c.Weight = wrapperspb.UInt32(c.Weight.GetValue() + w.weight)
					merged = true
				}
			}
			if !merged {
				clusters = append(clusters, &routev3.WeightedCluster_ClusterWeight{Name: w.name, Weight: wrapperspb.UInt32(w.weight)})
			}
		}
		if len(clusters) == 1 {
			a.ClusterSpecifier = &routev3.RouteAction_Cluster{Cluster: clusters[0].Name}
		} else {
			a.ClusterSpecifier = &routev3.RouteAction_WeightedClusters{WeightedClusters: &routev3.WeightedCluster{Clusters: clusters}}
		}
	}
	if rule.Timeout != nil && rule.Timeout.Duration > 0 {
		a.Timeout = durationpb.New(rule.Timeout.Duration)
		a.MaxStreamDuration = &routev3.RouteAction_MaxStreamDuration{MaxStreamDuration: durationpb.New(rule.Timeout.Duration)}
	}
	if r := rule.Retries; r != nil && r.Attempts > 0 {
		on := defaultRetryOn
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
		name, ok := b.destinationCluster(tp, path+".mirror.destination", m.Destination, t)
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

func percent(n uint32) *typev3.FractionalPercent {
	return &typev3.FractionalPercent{Numerator: n, Denominator: typev3.FractionalPercent_HUNDRED}
}

// destinationCluster resolves a rule's destination to a Cluster of the
// node group, adding it when needed.
func (b *nodeBuilder) destinationCluster(tp *policyv1alpha1.TrafficPolicy, path string, d policyv1alpha1.Destination, t target) (string, bool) {
	switch {
	case d.Service != nil:
		ref := d.Service
		c, ok := b.idx.fleet.Cluster(ref.Cluster)
		var svc *corev1.Service
		if ok {
			svc, ok = c.Service(ref.Namespace, ref.Name)
		}
		if !ok {
			b.idx.diags.add(sdk.Errorf(tp, path+".service", "service %s/%s not found in cluster %q", ref.Namespace, ref.Name, ref.Cluster))
			return "", false
		}
		port := ref.Port
		if port == 0 && len(svc.Spec.Ports) != 1 {
			port = t.backendPort
		}
		sp, ok := servicePort(svc, port)
		if !ok {
			b.idx.diags.add(sdk.Errorf(tp, path+".service.port", "service %s/%s in cluster %q has no port %d", ref.Namespace, ref.Name, ref.Cluster, port))
			return "", false
		}
		dest := sdk.Destination{Cluster: c, Service: svc}
		if len(d.Subset) > 0 {
			if !slices.ContainsFunc(serviceWorkloads(dest), func(w workload) bool { return labelsContain(w.labels, d.Subset) }) {
				b.idx.diags.add(sdk.Errorf(tp, path+".subset", "no workload of service %s/%s in cluster %q carries the subset's labels %s",
					ref.Namespace, ref.Name, ref.Cluster, labelsString(d.Subset)))
				return "", false
			}
			return b.subsetCluster(dest, sp, d.Subset, tp, path+".service"), true
		}
		return b.serviceCluster(dest, sp, tp, path+".service"), true
	case d.VirtualDestination != nil:
		if len(d.Subset) > 0 {
			b.idx.diags.add(sdk.Warningf(tp, path+".subset", "the envoy backend does not route to subsets of a virtual destination; every endpoint of the destination receives the traffic"))
		}
		ref := d.VirtualDestination
		ns := ref.Namespace
		if ns == "" {
			ns = tp.Namespace
		}
		var vh *virtualHost
		for _, h := range b.idx.vhosts {
			if h.vd.Namespace == ns && h.vd.Name == ref.Name {
				vh = h
			}
		}
		if vh == nil {
			b.idx.diags.add(sdk.Errorf(tp, path+".virtualDestination", "virtual destination %s/%s not found", ns, ref.Name))
			return "", false
		}
		port := ref.Port
		if port == 0 {
			port = vh.vd.Spec.Ports[0].Number
			if t.vhost == vh {
				port = t.port
			}
		}
		for _, vp := range vh.vd.Spec.Ports {
			if vp.Number == port {
				return b.vdCluster(vh, vp), true
			}
		}
		b.idx.diags.add(sdk.Errorf(tp, path+".virtualDestination.port", "virtual destination %s/%s has no port %d", ns, ref.Name, port))
		return "", false
	}
	b.idx.diags.add(sdk.Errorf(tp, path, "destination names neither a service nor a virtual destination"))
	return "", false
}

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
			HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: exact(string(m.Method))},
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

func exact(v string) *matcherv3.StringMatcher {
	return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: v}}
}

func stringMatch(t policyv1alpha1.MatchType, v string) *matcherv3.StringMatcher {
	switch t {
	case policyv1alpha1.MatchPrefix:
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: v}}
	case policyv1alpha1.MatchRegex:
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: v}}}
	}
	return exact(v)
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
