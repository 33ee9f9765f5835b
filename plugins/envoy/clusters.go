package envoy

import (
	"cmp"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	discoveryapi "github.com/meshrelay/meshrelay/api/discovery/v1alpha1"
	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/api/xds"
	"github.com/meshrelay/meshrelay/plugins/internal/envoyroute"
	"github.com/meshrelay/meshrelay/sdk"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// connectTimeout bounds connection attempts to upstream endpoints.
const connectTimeout = 5 * time.Second

// VirtualClusterName names the Cluster (and ClusterLoadAssignment) of one
// port of a VirtualDestination's hostname.
func VirtualClusterName(hostname string, port int32) string {
	return "vd|" + hostname + "|" + portString(port)
}

// ServiceClusterName names the Cluster (and ClusterLoadAssignment) of one
// port of a Service in one workload cluster.
func ServiceClusterName(cluster, namespace, name string, port int32) string {
	return "svc|" + cluster + "|" + namespace + "|" + name + "|" + portString(port)
}

// SubsetClusterName names the Cluster (and ClusterLoadAssignment) of one
// port of a Service in one workload cluster narrowed to the endpoints whose
// pods carry all the subset's labels: ServiceClusterName then
// "|key=value,key=value", keys sorted.
func SubsetClusterName(cluster, namespace, name string, port int32, subset map[string]string) string {
	return ServiceClusterName(cluster, namespace, name, port) + "|" + labelsString(subset)
}

// labelsString is a label set as "key=value,key=value", keys sorted.
func labelsString(labels map[string]string) string {
	var b strings.Builder
	for i, k := range slices.Sorted(maps.Keys(labels)) {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k + "=" + labels[k])
	}
	return b.String()
}

// member is one backing Service of an upstream, at one of its ports.
type member struct {
	dest sdk.Destination
	port corev1.ServicePort
}

// upstream is what a Cluster and its ClusterLoadAssignment are built from.
type upstream struct {
	name     string
	members  []member
	failover *policyv1alpha1.Failover
	outlier  *policyv1alpha1.OutlierDetection
	parents  []policyv1alpha1.Policy
	// subset, when set, keeps only the endpoints whose pods carry all
	// these labels (see podLabels).
	subset map[string]string
	// owner and path are the policy and field warnings about the
	// upstream's endpoints are reported on; no warning without owner.
	owner policyv1alpha1.Policy
	path  string
}

// vdCluster ensures the Cluster of a VirtualDestination port and returns its name.
func (b *nodeBuilder) vdCluster(vh *virtualHost, vp policyv1alpha1.VirtualPort) string {
	name := VirtualClusterName(vh.vd.Spec.Hostname, vp.Number)
	if b.set.has(xds.ClusterType, name) {
		return name
	}
	target := cmp.Or(vp.TargetPort, vp.Number)
	u := upstream{name: name, failover: vh.vd.Spec.Failover, outlier: vh.vd.Spec.OutlierDetection, parents: []policyv1alpha1.Policy{vh.vd}, owner: vh.vd, path: "spec.services"}
	for _, d := range vh.backends {
		sp, ok := servicePort(d.Service, target)
		if !ok && len(d.Service.Spec.Ports) == 1 {
			sp, ok = d.Service.Spec.Ports[0], true
		}
		if !ok {
			b.idx.diags.add(withCluster(sdk.Warningf(vh.vd, "spec.ports", "service %s/%s has no port %d; its endpoints are left out",
				d.Service.Namespace, d.Service.Name, target), d.Cluster.Name))
			continue
		}
		u.members = append(u.members, member{dest: d, port: sp})
	}
	b.addUpstream(u)
	return name
}

// serviceCluster ensures the Cluster of one Service port and returns its
// name; warnings about its endpoints go to owner at path.
func (b *nodeBuilder) serviceCluster(d sdk.Destination, sp corev1.ServicePort, owner policyv1alpha1.Policy, path string) string {
	name := ServiceClusterName(d.Cluster.Name, d.Service.Namespace, d.Service.Name, sp.Port)
	if !b.set.has(xds.ClusterType, name) {
		b.addUpstream(upstream{name: name, members: []member{{dest: d, port: sp}}, owner: owner, path: path})
	}
	return name
}

// subsetCluster ensures the Cluster of one Service port narrowed to a
// subset and returns its name.
func (b *nodeBuilder) subsetCluster(d sdk.Destination, sp corev1.ServicePort, subset map[string]string, owner policyv1alpha1.Policy, path string) string {
	name := SubsetClusterName(d.Cluster.Name, d.Service.Namespace, d.Service.Name, sp.Port, subset)
	if !b.set.has(xds.ClusterType, name) {
		b.addUpstream(upstream{name: name, members: []member{{dest: d, port: sp}}, subset: subset, owner: owner, path: path})
	}
	return name
}

// workload is the pod template of a Deployment, StatefulSet or DaemonSet.
type workload struct {
	name   string
	labels map[string]string
}

// serviceWorkloads returns the pod templates of the workloads of the
// Service's cluster, in its namespace, whose labels its selector matches.
// It reads the cluster's Deployments, StatefulSets and DaemonSets.
func serviceWorkloads(d sdk.Destination) []workload {
	sel := d.Service.Spec.Selector
	if len(sel) == 0 {
		return nil
	}
	var out []workload
	add := func(ns, name string, labels map[string]string) {
		if ns == d.Service.Namespace && labelsContain(labels, sel) {
			out = append(out, workload{name: name, labels: labels})
		}
	}
	for _, w := range d.Cluster.Deployments() {
		add(w.Namespace, w.Name, w.Spec.Template.Labels)
	}
	for _, w := range d.Cluster.StatefulSets() {
		add(w.Namespace, w.Name, w.Spec.Template.Labels)
	}
	for _, w := range d.Cluster.DaemonSets() {
		add(w.Namespace, w.Name, w.Spec.Template.Labels)
	}
	return out
}

// podLabels returns the labels of an endpoint's pod: the pod template
// labels of the Service's workload whose name, with a dash, begins the
// pod's name (the longest such name), as Deployments, StatefulSets and
// DaemonSets name their pods. An endpoint without a Pod targetRef, or
// whose pod no workload claims, has none.
func podLabels(ws []workload, ep sdk.Endpoint) (map[string]string, bool) {
	var best *workload
	for i, w := range ws {
		if ep.Pod != "" && strings.HasPrefix(ep.Pod, w.name+"-") && (best == nil || len(w.name) > len(best.name)) {
			best = &ws[i]
		}
	}
	if best == nil {
		return nil, false
	}
	return best.labels, true
}

func labelsContain(labels, want map[string]string) bool {
	for k, v := range want {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// clusterNetwork returns the network of a cluster: the first network its
// meshes report (Istio's topology.istio.io/network), empty when none does.
func clusterNetwork(c *sdk.Cluster) string {
	for _, m := range c.MeshInfo() {
		if m.Spec.Network != "" {
			return m.Spec.Network
		}
	}
	return ""
}

// eastWestGateways returns the IP addresses and cross-network ports of a
// cluster's Istio east-west gateways, as the Istio backend reaches them:
// gateways of the istio mesh or of no mesh, the port 15443 unless
// discovery says otherwise. Hostname addresses are left out (an EDS
// endpoint is an IP).
func eastWestGateways(c *sdk.Cluster) []*corev3.Address {
	var out []*corev3.Address
	for _, g := range c.Gateways() {
		if g.Spec.Mesh != "" && g.Spec.Mesh != discoveryapi.MeshIstio {
			continue
		}
		port := uint32(DefaultGatewayPort)
		if g.Spec.Port > 0 {
			port = uint32(g.Spec.Port)
		}
		for _, a := range g.Spec.Addresses {
			if net.ParseIP(a) != nil {
				out = append(out, socketAddress(a, port))
			}
		}
	}
	return out
}

// DefaultGatewayPort is Istio's east-west gateway cross-network port.
const DefaultGatewayPort = 15443

func withCluster(d sdk.Diagnostic, cluster string) sdk.Diagnostic {
	d.Cluster = cluster
	return d
}

func adsConfigSource() *corev3.ConfigSource {
	return &corev3.ConfigSource{
		ResourceApiVersion:    corev3.ApiVersion_V3,
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
	}
}

func (b *nodeBuilder) addUpstream(u upstream) {
	c := &clusterv3.Cluster{
		Name:                 u.name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{EdsConfig: adsConfigSource(), ServiceName: u.name},
		ConnectTimeout:       durationpb.New(connectTimeout),
		LbPolicy:             clusterv3.Cluster_ROUND_ROBIN,
	}
	if od := u.outlier; od != nil {
		c.OutlierDetection = &clusterv3.OutlierDetection{
			Consecutive_5Xx:    wrapperspb.UInt32(uint32(od.ConsecutiveErrors)),
			Interval:           durationpb.New(od.Interval.Duration),
			BaseEjectionTime:   durationpb.New(od.BaseEjectionTime.Duration),
			MaxEjectionPercent: wrapperspb.UInt32(uint32(od.MaxEjectionPercent)),
		}
	}
	b.set.add(xds.ClusterType, c, u.parents...)
	b.set.add(xds.EndpointType, b.loadAssignment(u), u.parents...)
}

// localityKey groups endpoints into one LocalityLbEndpoints.
type localityKey struct {
	priority              int
	region, zone, cluster string
}

func (k localityKey) compare(o localityKey) int {
	return cmp.Or(cmp.Compare(k.priority, o.priority), cmp.Compare(k.region, o.region),
		cmp.Compare(k.zone, o.zone), cmp.Compare(k.cluster, o.cluster))
}

// loadAssignment gathers the ready endpoints of every member, grouped in
// localities (region, zone, and the workload cluster as sub-zone), each
// weighted by its number of endpoints, with priorities from the failover
// order. A member on another network than the node group's cluster is
// reached through its cluster's east-west gateways (remoteNetwork).
func (b *nodeBuilder) loadAssignment(u upstream) *endpointv3.ClusterLoadAssignment {
	groups := map[localityKey][]*endpointv3.LbEndpoint{}
	// weights counts the endpoints of each locality, gateways standing
	// for several.
	weights := map[localityKey]uint32{}
	seen := map[string]bool{}
	local := clusterNetwork(b.cluster)
	for _, m := range u.members {
		if network := clusterNetwork(m.dest.Cluster); network != local {
			b.remoteNetwork(u, m, network, local, groups, weights)
			continue
		}
		var ws []workload
		if u.subset != nil {
			ws = serviceWorkloads(m.dest)
		}
		for _, ep := range m.dest.Cluster.Endpoints(m.dest.Service.Namespace, m.dest.Service.Name) {
			port := endpointPort(ep, m.port)
			if !ep.Ready || port == 0 {
				continue
			}
			if u.subset != nil {
				if labels, ok := podLabels(ws, ep); !ok || !labelsContain(labels, u.subset) {
					continue
				}
			}
			addr := fmt.Sprintf("%s|%s|%d", m.dest.Cluster.Name, ep.Address, port)
			if seen[addr] {
				continue
			}
			seen[addr] = true
			k := localityKey{priority: b.priority(u.failover, m.dest.Cluster.Name, ep.Region), region: ep.Region, zone: ep.Zone, cluster: m.dest.Cluster.Name}
			weights[k]++
			groups[k] = append(groups[k], &endpointv3.LbEndpoint{
				HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
					Address: socketAddress(ep.Address, uint32(port)),
				}},
			})
		}
	}
	keys := make([]localityKey, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, localityKey.compare)
	// Priorities must be contiguous from 0: renumber the ones in use.
	var used []int
	for _, k := range keys {
		if !slices.Contains(used, k.priority) {
			used = append(used, k.priority)
		}
	}
	cla := &endpointv3.ClusterLoadAssignment{ClusterName: u.name}
	for _, k := range keys {
		eps := groups[k]
		cla.Endpoints = append(cla.Endpoints, &endpointv3.LocalityLbEndpoints{
			Locality:            &corev3.Locality{Region: k.region, Zone: k.zone, SubZone: k.cluster},
			LbEndpoints:         eps,
			LoadBalancingWeight: wrapperspb.UInt32(weights[k]),
			Priority:            uint32(slices.Index(used, k.priority)),
		})
	}
	return cla
}

// remoteNetwork adds the endpoints of a member whose cluster is on
// another network than the node group's: its pods' IPs are not reachable,
// so, as the Istio backend does, the cluster's east-west gateways stand
// for them, each in the locality of the endpoints it stands for and
// weighted by their number. Without a gateway, or for a subset (a gateway
// cannot narrow traffic to one), the member's endpoints are left out with
// a warning.
func (b *nodeBuilder) remoteNetwork(u upstream, m member, network, local string, groups map[localityKey][]*endpointv3.LbEndpoint, weights map[localityKey]uint32) {
	c := m.dest.Cluster
	warn := func(format string, args ...any) {
		if u.owner != nil {
			b.idx.diags.add(withCluster(sdk.Warningf(u.owner, u.path, format, args...), b.cluster.Name))
		}
	}
	if u.subset != nil {
		warn("service %s/%s of cluster %q is on network %q, not %q: the envoy backend does not route to a subset through an east-west gateway; its endpoints are left out",
			m.dest.Service.Namespace, m.dest.Service.Name, c.Name, network, local)
		return
	}
	gws := eastWestGateways(c)
	if len(gws) == 0 {
		warn("service %s/%s of cluster %q is on network %q, not %q, and that cluster has no discovered east-west gateway with an IP address; its endpoints are left out",
			m.dest.Service.Namespace, m.dest.Service.Name, c.Name, network, local)
		return
	}
	count := map[localityKey]uint32{}
	for _, ep := range c.Endpoints(m.dest.Service.Namespace, m.dest.Service.Name) {
		if !ep.Ready || endpointPort(ep, m.port) == 0 {
			continue
		}
		count[localityKey{priority: b.priority(u.failover, c.Name, ep.Region), region: ep.Region, zone: ep.Zone, cluster: c.Name}]++
	}
	for k, n := range count {
		weights[k] += n
	gateways:
		for _, gw := range gws {
			// Another Service of the same cluster may have added the
			// gateway to the locality already: it stands for both.
			for _, ep := range groups[k] {
				if proto.Equal(ep.GetEndpoint().GetAddress(), gw) {
					ep.LoadBalancingWeight = wrapperspb.UInt32(ep.GetLoadBalancingWeight().GetValue() + n)
					continue gateways
				}
			}
			groups[k] = append(groups[k], &endpointv3.LbEndpoint{
				HostIdentifier:      &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: gw}},
				LoadBalancingWeight: wrapperspb.UInt32(n),
			})
		}
	}
}

// priority ranks an endpoint of workload cluster cluster: by its place in
// a Priority failover list (unlisted clusters last, together), or for
// Locality failover the node's own cluster first, then its region, then
// the rest.
func (b *nodeBuilder) priority(f *policyv1alpha1.Failover, cluster, region string) int {
	if f == nil {
		return 0
	}
	switch f.Mode {
	case policyv1alpha1.FailoverPriority:
		if i := slices.Index(f.Priority, cluster); i >= 0 {
			return i
		}
		return len(f.Priority)
	case policyv1alpha1.FailoverLocality:
		switch {
		case cluster == b.cluster.Name:
			return 0
		case region != "" && region == b.region:
			return 1
		}
		return 2
	}
	return 0
}

// endpointPort is the endpoint's number for a Service port: the
// EndpointSlice port of the same name, else a numeric target port.
func endpointPort(ep sdk.Endpoint, sp corev1.ServicePort) int32 {
	if p, ok := ep.Ports[sp.Name]; ok {
		return p
	}
	if sp.TargetPort.Type == intstr.Int && sp.TargetPort.IntVal != 0 {
		return sp.TargetPort.IntVal
	}
	if len(ep.Ports) == 1 {
		for _, p := range ep.Ports {
			return p
		}
	}
	return 0
}

func socketAddress(ip string, port uint32) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Protocol:      corev3.SocketAddress_TCP,
		Address:       ip,
		PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port},
	}}}
}

// HTTPProtocolOptions is the key of a Cluster's HTTP protocol options in
// its typed_extension_protocol_options.
const HTTPProtocolOptions = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"

// withDownstreamProtocol returns a copy of an outbound Cluster for Envoy
// node groups: Envoy speaks HTTP/1.1 upstream unless told otherwise, which
// gRPC backends refuse, so it speaks the protocol the request came in
// with (HTTP/2 for gRPC). gRPC clients need no such option.
func withDownstreamProtocol(c *clusterv3.Cluster) *clusterv3.Cluster {
	c = proto.Clone(c).(*clusterv3.Cluster)
	c.TypedExtensionProtocolOptions = map[string]*anypb.Any{
		HTTPProtocolOptions: envoyroute.Any(&upstreamhttpv3.HttpProtocolOptions{
			UpstreamProtocolOptions: &upstreamhttpv3.HttpProtocolOptions_UseDownstreamProtocolConfig{
				UseDownstreamProtocolConfig: &upstreamhttpv3.HttpProtocolOptions_UseDownstreamHttpConfig{
					HttpProtocolOptions:  &corev3.Http1ProtocolOptions{},
					Http2ProtocolOptions: &corev3.Http2ProtocolOptions{},
				},
			},
		}),
	}
	return c
}
