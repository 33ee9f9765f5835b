package envoy

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/api/xds"
	"github.com/meshrelay/meshrelay/plugins/internal/envoyroute"
	"github.com/meshrelay/meshrelay/sdk"
	corev1 "k8s.io/api/core/v1"
)

// Names of the filters the translator configures.
const (
	RouterFilter = envoyroute.RouterFilter
	FaultFilter  = envoyroute.FaultFilter
	RBACFilter   = "envoy.filters.http.rbac"
	HCMFilter    = envoyroute.HCMFilter
	// NetworkRBACFilter and TCPProxyFilter make the inbound Listeners of
	// ports that are not HTTP.
	NetworkRBACFilter = "envoy.filters.network.rbac"
	TCPProxyFilter    = "envoy.filters.network.tcp_proxy"
)

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
		if envoyroute.TCPPort(sp) {
			for _, tp := range tps {
				b.idx.diags.add(withCluster(sdk.Warningf(tp, "spec.destinationSelectors",
					"port %d of Service %s/%s is not HTTP (%s): the envoy backend routes only HTTP, so the policy's rules do not apply there",
					sp.Port, d.Service.Namespace, d.Service.Name, envoyroute.PortProtocol(sp)), d.Cluster.Name))
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
	routes, fault := envoyroute.Routes(tps, func(tp *policyv1alpha1.TrafficPolicy, path string, d policyv1alpha1.Destination) (string, bool) {
		return b.destinationCluster(tp, path, d, t)
	}, t.defaultCluster)
	b.hosts = append(b.hosts, &outboundHost{hostname: t.hostname, port: t.port, routes: routes, fault: fault, bare: withBareName, parents: parents})
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
			HttpFilters:    envoyroute.HTTPFilters(h.fault),
		}
		names := []string{hostPort}
		if h.bare {
			names = append(names, h.hostname)
		}
		for _, name := range names {
			set.add(xds.ListenerType, &listenerv3.Listener{
				Name:        name,
				ApiListener: &listenerv3.ApiListener{ApiListener: envoyroute.Any(hcm)},
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
			HttpFilters: envoyroute.HTTPFilters(fault),
		}
		set.add(xds.RouteType, rc, parents...)
		set.add(xds.ListenerType, &listenerv3.Listener{
			Name:             OutboundListenerName(port),
			Address:          socketAddress("0.0.0.0", uint32(port)),
			TrafficDirection: corev3.TrafficDirection_OUTBOUND,
			FilterChains: []*listenerv3.FilterChain{{
				Name: rc.Name,
				Filters: []*listenerv3.Filter{{
					Name:       HCMFilter,
					ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: envoyroute.Any(hcm)},
				}},
			}},
		}, parents...)
	}
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
