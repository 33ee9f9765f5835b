package envoy

import (
	"fmt"
	"net"
	"regexp"
	"slices"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rbacfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	rbacnetworkv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/api/xds"
	"github.com/meshrelay/meshrelay/plugins/internal/envoyroute"
	"github.com/meshrelay/meshrelay/sdk"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	corev1 "k8s.io/api/core/v1"
)

// InboundListenerPrefix starts the name of every inbound Listener; the
// listening address "ip:port" follows. It is grpc-go's default
// server_listener_resource_name_template, so xDS-enabled gRPC servers find
// their Listener without configuration.
const InboundListenerPrefix = "grpc/server?xds.resource.listening_address="

// InboundRouteName names the RouteConfiguration of a Service port's
// inbound Listeners.
func InboundRouteName(namespace, name string, port int32) string {
	return "inbound|" + namespace + "|" + name + "|" + portString(port)
}

// SPIFFEID is the identity a workload presents in its certificate's URI
// SAN: the trust domain is the workload's cluster.
func SPIFFEID(cluster, namespace, serviceAccount string) string {
	return "spiffe://" + cluster + "/ns/" + namespace + "/sa/" + serviceAccount
}

// InboundClusterName names the STATIC Cluster an inbound Listener at a
// workload port forwards to, with a TCP proxy or, in an Envoy node group,
// an HTTP route: 127.0.0.1 at that port.
func InboundClusterName(port int32) string {
	return "inbound|127.0.0.1:" + portString(port)
}

// inboundListeners adds, for every ready endpoint of a Service served by
// the node group, a Listener on the endpoint's address enforcing the
// AccessPolicies selecting the Service. An HTTP port's Listener has an
// HTTP connection manager with the RBAC HTTP filter: for gRPC servers it
// loads its RouteConfiguration (also added) over RDS, in an Envoy node
// group its inline route forwards to 127.0.0.1 at the workload port. A
// port of another protocol (see tcpPort) has the RBAC network filter and
// a TCP proxy to 127.0.0.1 at the workload port.
func (b *nodeBuilder) inboundListeners(d sdk.Destination) {
	aps := b.idx.accessFor(d)
	var parents []policyv1alpha1.Policy
	for _, ap := range aps {
		parents = append(parents, ap)
	}
	eps := d.Cluster.Endpoints(d.Service.Namespace, d.Service.Name)
	for _, sp := range d.Service.Spec.Ports {
		if sp.Protocol != "" && sp.Protocol != corev1.ProtocolTCP {
			continue
		}
		routeName := InboundRouteName(d.Service.Namespace, d.Service.Name, sp.Port)
		tcp := envoyroute.TCPPort(sp)
		var hcmFilters []*listenerv3.Filter
		tcpFilters := map[int32][]*listenerv3.Filter{}
		envoyFilters := map[int32][]*listenerv3.Filter{}
		added := false
		for _, ep := range eps {
			port := endpointPort(ep, sp)
			if !ep.Ready || port == 0 {
				continue
			}
			var filters []*listenerv3.Filter
			switch {
			case tcp && tcpFilters[port] != nil:
				filters = tcpFilters[port]
			case tcp:
				filters = b.tcpFilters(aps, d, sp, routeName, port)
				tcpFilters[port] = filters
			case b.envoy && envoyFilters[port] != nil:
				filters = envoyFilters[port]
			case b.envoy:
				filters = b.envoyHCMFilters(aps, d, routeName, port)
				envoyFilters[port] = filters
			case hcmFilters != nil:
				filters = hcmFilters
			default:
				filters = b.hcmFilters(aps, d, routeName)
				hcmFilters = filters
			}
			addr := net.JoinHostPort(ep.Address, portString(port))
			b.set.add(xds.ListenerType, &listenerv3.Listener{
				Name:             InboundListenerPrefix + addr,
				Address:          socketAddress(ep.Address, uint32(port)),
				TrafficDirection: corev3.TrafficDirection_INBOUND,
				FilterChains:     []*listenerv3.FilterChain{{Name: routeName, Filters: filters}},
			}, parents...)
			added = true
		}
		if added && !tcp && !b.envoy {
			b.set.add(xds.RouteType, inboundRoutes(routeName, &routev3.Route{
				Action: &routev3.Route_NonForwardingAction{NonForwardingAction: &routev3.NonForwardingAction{}},
			}))
		}
	}
}

// hcmFilters are the network filters of an HTTP port's inbound Listener:
// an HTTP connection manager with the RBAC filter of the AccessPolicies
// (when any selects the Service) and the router, loading routeName over
// RDS.
func (b *nodeBuilder) hcmFilters(aps []*policyv1alpha1.AccessPolicy, d sdk.Destination, routeName string) []*listenerv3.Filter {
	var filters []*hcmv3.HttpFilter
	if len(aps) > 0 {
		filters = append(filters, envoyroute.HTTPFilter(RBACFilter, &rbacfilterv3.RBAC{Rules: b.rbacRules(aps, d, nil)}))
	}
	filters = append(filters, envoyroute.HTTPFilter(RouterFilter, &routerv3.Router{}))
	hcm := &hcmv3.HttpConnectionManager{
		StatPrefix: routeName,
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
			ConfigSource: adsConfigSource(), RouteConfigName: routeName,
		}},
		HttpFilters: filters,
	}
	return []*listenerv3.Filter{networkFilter(HCMFilter, hcm)}
}

// envoyHCMFilters are the network filters of an HTTP port's inbound
// Listener in an Envoy node group, at workload port port: an HTTP
// connection manager with the RBAC filter of the AccessPolicies (when any
// selects the Service) and the router, whose inline RouteConfiguration
// sends every request to InboundClusterName(port), which it adds.
func (b *nodeBuilder) envoyHCMFilters(aps []*policyv1alpha1.AccessPolicy, d sdk.Destination, routeName string, port int32) []*listenerv3.Filter {
	var filters []*hcmv3.HttpFilter
	if len(aps) > 0 {
		filters = append(filters, envoyroute.HTTPFilter(RBACFilter, &rbacfilterv3.RBAC{Rules: b.rbacRules(aps, d, nil)}))
	}
	filters = append(filters, envoyroute.HTTPFilter(RouterFilter, &routerv3.Router{}))
	cluster := b.inboundCluster(port)
	hcm := &hcmv3.HttpConnectionManager{
		StatPrefix: routeName,
		RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: inboundRoutes(routeName, &routev3.Route{
			Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: cluster}}},
		})},
		HttpFilters: filters,
	}
	return []*listenerv3.Filter{networkFilter(HCMFilter, hcm)}
}

// inboundRoutes is an inbound RouteConfiguration: every request (route
// "inbound", any host, any path) takes route's action.
func inboundRoutes(name string, route *routev3.Route) *routev3.RouteConfiguration {
	route.Name = "inbound"
	route.Match = &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}}
	return &routev3.RouteConfiguration{
		Name:         name,
		VirtualHosts: []*routev3.VirtualHost{{Name: "inbound", Domains: []string{"*"}, Routes: []*routev3.Route{route}}},
	}
}

// inboundCluster adds the STATIC Cluster InboundClusterName(port), the
// workload at 127.0.0.1:port, and returns its name. In an Envoy node group
// it speaks upstream the HTTP version requests came in with.
func (b *nodeBuilder) inboundCluster(port int32) string {
	name := InboundClusterName(port)
	if b.set.has(xds.ClusterType, name) {
		return name
	}
	c := &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
		ConnectTimeout:       durationpb.New(connectTimeout),
		LoadAssignment: &endpointv3.ClusterLoadAssignment{
			ClusterName: name,
			Endpoints: []*endpointv3.LocalityLbEndpoints{{LbEndpoints: []*endpointv3.LbEndpoint{{
				HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: socketAddress("127.0.0.1", uint32(port))}},
			}}}},
		},
	}
	if b.envoy {
		c = withDownstreamProtocol(c)
	}
	b.set.add(xds.ClusterType, c)
	return name
}

// tcpFilters are the network filters of the inbound Listener of a port
// that is not HTTP, at workload port port: the RBAC network filter of the
// AccessPolicies (when any selects the Service), then a TCP proxy to
// InboundClusterName(port), which it adds.
func (b *nodeBuilder) tcpFilters(aps []*policyv1alpha1.AccessPolicy, d sdk.Destination, sp corev1.ServicePort, statPrefix string, port int32) []*listenerv3.Filter {
	var filters []*listenerv3.Filter
	if len(aps) > 0 {
		filters = append(filters, networkFilter(NetworkRBACFilter, &rbacnetworkv3.RBAC{StatPrefix: statPrefix, Rules: b.rbacRules(aps, d, &sp)}))
	}
	cluster := b.inboundCluster(port)
	return append(filters, networkFilter(TCPProxyFilter, &tcpproxyv3.TcpProxy{
		StatPrefix:       statPrefix,
		ClusterSpecifier: &tcpproxyv3.TcpProxy_Cluster{Cluster: cluster},
	}))
}

func networkFilter(name string, cfg proto.Message) *listenerv3.Filter {
	return &listenerv3.Filter{Name: name, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: envoyroute.Any(cfg)}}
}

// RBACPolicyName names the RBAC policy of an AccessPolicy.
func RBACPolicyName(namespace, name string) string {
	return "ns[" + namespace + "]-policy[" + name + "]"
}

// rbacRules builds the RBAC rules of a destination from the AccessPolicies
// selecting it: an ALLOW filter with one policy per Allow policy, so that
// a request no policy admits is denied (DenyAll policies add none).
//
// A policy's ports are Service ports, and RBAC sees the port the
// connection arrived on, the workload's: each becomes the Service port's
// target ports (see workloadPorts). A policy naming ports none of which
// resolves adds no policy: it admits nothing to the destination.
//
// On a port that is not HTTP (tcp, the Service port), where the network
// filter cannot see requests, a policy naming methods or paths that
// applies to the port adds no policy either, with a warning.
func (b *nodeBuilder) rbacRules(aps []*policyv1alpha1.AccessPolicy, d sdk.Destination, tcp *corev1.ServicePort) *rbacv3.RBAC {
	rules := &rbacv3.RBAC{Action: rbacv3.RBAC_ALLOW, Policies: map[string]*rbacv3.Policy{}}
	for _, ap := range aps {
		if ap.Spec.Action == policyv1alpha1.ActionDenyAll {
			continue
		}
		if tcp != nil && (len(ap.Spec.Methods) > 0 || len(ap.Spec.Paths) > 0) {
			if len(ap.Spec.Ports) == 0 || slices.Contains(ap.Spec.Ports, tcp.Port) {
				path := "spec.methods"
				if len(ap.Spec.Methods) == 0 {
					path = "spec.paths"
				}
				b.idx.diags.add(withCluster(sdk.Warningf(ap, path,
					"port %d of Service %s/%s is not HTTP (%s), so methods and paths cannot be checked there and the policy admits nothing on it",
					tcp.Port, d.Service.Namespace, d.Service.Name, envoyroute.PortProtocol(*tcp)), d.Cluster.Name))
			}
			continue
		}
		ports, resolved := b.idx.workloadPorts(ap, d)
		p, ok := b.rbacPolicy(ap, ports)
		if ok && resolved {
			rules.Policies[RBACPolicyName(ap.Namespace, ap.Name)] = p
		}
	}
	return rules
}

// RBACPolicy translates an Allow AccessPolicy to an RBAC policy: its
// permission requires a listed port, method and path (each list ORed,
// empty lists ignored) and its principals are the From entries, each
// requiring all its fields. ok is false for a policy with no clients. The
// ports are taken as the ports connections arrive on; the translator
// itself first maps a policy's Service ports to their target ports. With
// no fleet to match, a clusterSelector matches no cluster; the translator
// matches it against the fleet's cluster labels.
func RBACPolicy(ap *policyv1alpha1.AccessPolicy) (p *rbacv3.Policy, ok bool) {
	return rbacPolicy(ap, ap.Spec.Ports, func(i int) sdk.ClientClusters {
		from := &ap.Spec.From[i]
		return sdk.ClientClusters{Any: !from.RestrictsClusters(), Names: from.Clusters}
	})
}

// rbacPolicy is RBACPolicy with ports, when the policy names ports, as
// the destination ports its permission requires, and the clusters the
// client selector From[i] admits as clusters(i) resolves them.
func rbacPolicy(ap *policyv1alpha1.AccessPolicy, ports []int32, clusters func(i int) sdk.ClientClusters) (p *rbacv3.Policy, ok bool) {
	var perms []*rbacv3.Permission
	if len(ap.Spec.Ports) > 0 {
		var or []*rbacv3.Permission
		for _, n := range ports {
			or = append(or, &rbacv3.Permission{Rule: &rbacv3.Permission_DestinationPort{DestinationPort: uint32(n)}})
		}
		perms = append(perms, orPermissions(or))
	}
	if len(ap.Spec.Methods) > 0 {
		var or []*rbacv3.Permission
		for _, m := range ap.Spec.Methods {
			or = append(or, &rbacv3.Permission{Rule: &rbacv3.Permission_Header{Header: &routev3.HeaderMatcher{
				Name: ":method", HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: envoyroute.Exact(string(m))},
			}}})
		}
		perms = append(perms, orPermissions(or))
	}
	if len(ap.Spec.Paths) > 0 {
		var or []*rbacv3.Permission
		for _, path := range ap.Spec.Paths {
			sm := envoyroute.Exact(path)
			if prefix, ok := strings.CutSuffix(path, "*"); ok {
				sm = &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: prefix}}
			}
			or = append(or, &rbacv3.Permission{Rule: &rbacv3.Permission_UrlPath{UrlPath: &matcherv3.PathMatcher{
				Rule: &matcherv3.PathMatcher_Path{Path: sm},
			}}})
		}
		perms = append(perms, orPermissions(or))
	}
	perm := &rbacv3.Permission{Rule: &rbacv3.Permission_Any{Any: true}}
	if len(perms) > 0 {
		perm = &rbacv3.Permission{Rule: &rbacv3.Permission_AndRules{AndRules: &rbacv3.Permission_Set{Rules: perms}}}
	}
	p = &rbacv3.Policy{Permissions: []*rbacv3.Permission{perm}}
	for i := range ap.Spec.From {
		p.Principals = append(p.Principals, clientPrincipal(&ap.Spec.From[i], clusters(i)))
	}
	return p, len(p.Principals) > 0
}

func (b *nodeBuilder) rbacPolicy(ap *policyv1alpha1.AccessPolicy, ports []int32) (*rbacv3.Policy, bool) {
	p, ok := rbacPolicy(ap, ports, func(i int) sdk.ClientClusters { return b.idx.clientClusters(ap, i) })
	if !ok {
		b.idx.diags.add(sdk.Errorf(ap, "spec.from", "an Allow policy needs at least one client"))
	}
	return p, ok
}

func orPermissions(ps []*rbacv3.Permission) *rbacv3.Permission {
	return &rbacv3.Permission{Rule: &rbacv3.Permission_OrRules{OrRules: &rbacv3.Permission_Set{Rules: ps}}}
}

func orPrincipals(ps []*rbacv3.Principal) *rbacv3.Principal {
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_OrIds{OrIds: &rbacv3.Principal_Set{Ids: ps}}}
}

// anySegment matches one path segment of a SPIFFE ID.
const anySegment = "[^/]+"

func authenticated(sm *matcherv3.StringMatcher) *rbacv3.Principal {
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_Authenticated_{Authenticated: &rbacv3.Principal_Authenticated{PrincipalName: sm}}}
}

func regexMatcher(re string) *matcherv3.StringMatcher {
	return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: re}}}
}

// clientPrincipal matches the clients of one ClientSelector by the SPIFFE
// ID of their certificate (see SPIFFEID): each set field must match, the
// cluster fields as clusters resolved them. When they admit no cluster,
// the principal matches no client.
func clientPrincipal(from *policyv1alpha1.ClientSelector, clusters sdk.ClientClusters) *rbacv3.Principal {
	if clusters.None() {
		return noClient()
	}
	var ids []*rbacv3.Principal
	if len(from.ServiceAccounts) > 0 {
		var or []*rbacv3.Principal
		for _, sa := range from.ServiceAccounts {
			if sa.Cluster != "" {
				or = append(or, authenticated(envoyroute.Exact(SPIFFEID(sa.Cluster, sa.Namespace, sa.Name))))
				continue
			}
			or = append(or, authenticated(regexMatcher(fmt.Sprintf("spiffe://%s/ns/%s/sa/%s",
				anySegment, regexp.QuoteMeta(sa.Namespace), regexp.QuoteMeta(sa.Name)))))
		}
		ids = append(ids, orPrincipals(or))
	}
	if len(from.Namespaces) > 0 {
		var or []*rbacv3.Principal
		for _, ns := range from.Namespaces {
			or = append(or, authenticated(regexMatcher(fmt.Sprintf("spiffe://%s/ns/%s/sa/%s",
				anySegment, regexp.QuoteMeta(ns), anySegment))))
		}
		ids = append(ids, orPrincipals(or))
	}
	if !clusters.Any {
		var or []*rbacv3.Principal
		for _, c := range clusters.Names {
			or = append(or, authenticated(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: "spiffe://" + c + "/"}}))
		}
		ids = append(ids, orPrincipals(or))
	}
	if len(ids) == 0 {
		// Any client with a certificate.
		return authenticated(nil)
	}
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_AndIds{AndIds: &rbacv3.Principal_Set{Ids: ids}}}
}

// noClient is a principal that matches no client.
func noClient() *rbacv3.Principal {
	return &rbacv3.Principal{Identifier: &rbacv3.Principal_NotId{NotId: &rbacv3.Principal{Identifier: &rbacv3.Principal_Any{Any: true}}}}
}

// clientClusters resolves the cluster fields of ap's client selector
// From[i] over the fleet (see sdk.Fleet.ClientClusters), and warns when
// its clusterSelector matches no cluster. The answer is computed once per
// policy and selector for the target's node groups.
func (idx *index) clientClusters(ap *policyv1alpha1.AccessPolicy, i int) sdk.ClientClusters {
	key := clientKey{policy: sdk.RefOf(ap), from: i}
	if cc, ok := idx.clients[key]; ok {
		return cc
	}
	cc := idx.fleet.ClientClusters(&ap.Spec.From[i])
	if d, ok := cc.Warning(ap, fmt.Sprintf("spec.from[%d]", i)); ok {
		idx.diags.add(d)
	}
	if idx.clients == nil {
		idx.clients = map[clientKey]sdk.ClientClusters{}
	}
	idx.clients[key] = cc
	return cc
}

// clientKey names an AccessPolicy's client selector From[from].
type clientKey struct {
	policy sdk.PolicyRef
	from   int
}

// workloadPorts returns the ports of destination d's workloads that the
// policy's Service ports forward to, sorted: a named targetPort resolves
// per workload, each giving its container port's number. Each port that
// resolves to nothing gets a warning, and ok is false when the policy
// names ports and none of them resolves. The answer is computed once per
// policy and Service for the target's node groups.
func (idx *index) workloadPorts(ap *policyv1alpha1.AccessPolicy, d sdk.Destination) (ports []int32, ok bool) {
	if len(ap.Spec.Ports) == 0 {
		return nil, true
	}
	key := accessPortsKey{policy: sdk.RefOf(ap), namespace: d.Service.Namespace, name: d.Service.Name}
	if ports, ok := idx.accessPorts[key]; ok {
		return ports, len(ports) > 0
	}
	resolved, problems := d.Cluster.TargetPorts(d.Service, ap.Spec.Ports)
	for _, p := range problems {
		idx.diags.add(p.Warning(ap, "spec.ports"))
	}
	for _, tp := range resolved {
		ports = append(ports, tp.Numbers...)
	}
	slices.Sort(ports)
	ports = slices.Compact(ports)
	if idx.accessPorts == nil {
		idx.accessPorts = map[accessPortsKey][]int32{}
	}
	idx.accessPorts[key] = ports
	return ports, len(ports) > 0
}

// accessPortsKey names an AccessPolicy's ports at a Service of the target.
type accessPortsKey struct {
	policy          sdk.PolicyRef
	namespace, name string
}
