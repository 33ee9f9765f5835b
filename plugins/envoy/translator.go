package envoy

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discoveryapi "github.com/meshrelay/meshrelay/api/discovery/v1alpha1"
	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/api/xds"
	"github.com/meshrelay/meshrelay/sdk"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
)

// Backend is the backend the translator serves.
const Backend = "envoy"

// Translator maps the fleet's policies to xDS resources for every Envoy
// node group (xDS node ID) found in clusters with the envoy mesh.
type Translator struct{}

// New returns the Envoy translator.
func New() *Translator { return &Translator{} }

var _ sdk.Translator = (*Translator)(nil)

// Describe says what the translator is.
func (*Translator) Describe() sdk.Description {
	return sdk.Description{
		Name:     "envoy",
		Version:  "0.1.0",
		Backends: []string{Backend},
		Meshes:   []string{Backend},
		OutputKinds: []string{
			xds.Group + "/" + xds.KindListener, xds.Group + "/" + xds.KindRouteConfiguration,
			xds.Group + "/" + xds.KindCluster, xds.Group + "/" + xds.KindClusterLoadAssignment,
		},
	}
}

// TranslateTarget emits, for every node group of the target, the
// Listeners, RouteConfigurations, Clusters and ClusterLoadAssignments its
// proxies and gRPC clients need. The SDK computes only targets with the
// envoy mesh, the mesh the backend declares. Every target reports the
// VirtualDestinations' missing Services.
func (t *Translator) TranslateTarget(ctx context.Context, req *sdk.Request, resp *sdk.Response) error {
	resp.DiagnoseFleet(virtualDestinationWarnings(req.Fleet)...)
	c := req.Target
	nodes := envoyNodes(c)
	if len(nodes) == 0 {
		return nil
	}
	idx := newIndex(req.Fleet, c)
	proxies := envoyProxies(c)
	for _, node := range nodes {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("node %q: %w", node, err)
		}
		if err := idx.emit(resp, node, slices.Concat(idx.outbound(proxies[node]), idx.inbound(node, proxies[node]))); err != nil {
			return err
		}
	}
	resp.DiagnoseFleet(idx.diags.list...)
	return nil
}

// envoyNodes returns the node IDs of the cluster's envoy meshes, sorted.
func envoyNodes(c *sdk.Cluster) []string {
	var out []string
	for _, m := range c.MeshInfo() {
		if m.Spec.Type == discoveryapi.MeshEnvoy {
			out = append(out, m.Spec.EnvoyNodes...)
		}
	}
	slices.Sort(out)
	return slices.Compact(slices.DeleteFunc(out, func(s string) bool { return s == "" }))
}

// envoyProxies returns the kind of proxy of each node group of the
// cluster's envoy meshes that is an Envoy group (discoveryapi.EnvoyProxies);
// every other node group is a gRPC group.
func envoyProxies(c *sdk.Cluster) map[string]string {
	out := map[string]string{}
	for _, m := range c.MeshInfo() {
		if m.Spec.Type != discoveryapi.MeshEnvoy {
			continue
		}
		for node, proxy := range m.Spec.EnvoyProxies {
			if proxy == discoveryapi.EnvoyProxyEnvoy {
				out[node] = proxy
			}
		}
	}
	return out
}

// diagnostics collects diagnostics once each, in the order first reported.
type diagnostics struct {
	seen map[string]bool
	list []sdk.Diagnostic
}

func (d *diagnostics) add(diag sdk.Diagnostic) {
	key := fmt.Sprint(diag.Severity, diag.Policy, diag.Path, diag.Summary, diag.Cluster)
	if d.seen == nil {
		d.seen = map[string]bool{}
	}
	if d.seen[key] {
		return
	}
	d.seen[key] = true
	d.list = append(d.list, diag)
}

// resource is one xDS resource of a node group and the policies it derives from.
type resource struct {
	typeURL string
	name    string
	msg     proto.Message
	parents []policyv1alpha1.Policy
}

// resourceSet is the resources of one node group, by type and name.
type resourceSet map[string]*resource

func (s resourceSet) has(typeURL, name string) bool {
	_, ok := s[typeURL+"\x00"+name]
	return ok
}

func (s resourceSet) add(typeURL string, msg proto.Message, parents ...policyv1alpha1.Policy) {
	name := xds.ResourceName(msg)
	key := typeURL + "\x00" + name
	if r, ok := s[key]; ok {
		r.parents = appendParents(r.parents, parents...)
		return
	}
	s[key] = &resource{typeURL: typeURL, name: name, msg: msg, parents: appendParents(nil, parents...)}
}

func (s resourceSet) sorted() []*resource {
	out := make([]*resource, 0, len(s))
	for _, r := range s {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b *resource) int {
		return cmp.Or(cmp.Compare(a.typeURL, b.typeURL), cmp.Compare(a.name, b.name))
	})
	return out
}

func appendParents(ps []policyv1alpha1.Policy, more ...policyv1alpha1.Policy) []policyv1alpha1.Policy {
	for _, p := range more {
		if p == nil || slices.Contains(ps, p) {
			continue
		}
		ps = append(ps, p)
	}
	return ps
}

// virtualHost is a VirtualDestination resolved against the fleet.
type virtualHost struct {
	vd       *policyv1alpha1.VirtualDestination
	backends []sdk.Destination
}

// index is what the node groups of one target share: the policies and the
// VirtualDestinations resolved once per target computation.
type index struct {
	fleet   *sdk.Fleet
	target  *sdk.Cluster
	vhosts  []*virtualHost
	traffic []*policyv1alpha1.TrafficPolicy
	access  []*policyv1alpha1.AccessPolicy
	diags   diagnostics
	encoded map[proto.Message]json.RawMessage
	// templates holds the pod template labels of the target's
	// workloads, read when a Service first needs them.
	templates     []map[string]string
	templatesRead bool
	// accessPorts caches workloadPorts, clients clientClusters.
	accessPorts map[accessPortsKey][]int32
	clients     map[clientKey]sdk.ClientClusters
	// outboundBase holds the Clusters and ClusterLoadAssignments every
	// node group calls and outboundHosts their routes, built once;
	// outboundByProxy the resources of each kind of node group.
	outboundBase    resourceSet
	outboundHosts   []*outboundHost
	outboundByProxy map[string][]*resource
}

// newIndex resolves the fleet's policies for target. The backing Services
// of VirtualDestinations come from a value every target shares (see
// virtualBackends); only their clusters and endpoints are read here.
func newIndex(f *sdk.Fleet, target *sdk.Cluster) *index {
	idx := &index{fleet: f, target: target, traffic: f.TrafficPolicies(), access: f.AccessPolicies(), encoded: map[proto.Message]json.RawMessage{}}
	backends := virtualBackends(f)
	for _, vd := range f.VirtualDestinations() {
		idx.vhosts = append(idx.vhosts, &virtualHost{vd: vd, backends: idx.destinations(backends[sdk.RefOf(vd)])})
	}
	return idx
}

// destinations turns shared backends into Destinations whose clusters
// record this target's reads.
func (idx *index) destinations(bs []backend) []sdk.Destination {
	out := make([]sdk.Destination, 0, len(bs))
	for _, b := range bs {
		c, ok := idx.fleet.Cluster(b.cluster)
		if !ok {
			// The shared value is computed over the same fleet: cannot happen.
			continue
		}
		out = append(out, sdk.Destination{Cluster: c, Service: b.service()})
	}
	return out
}

// trafficFor returns the TrafficPolicies selecting any of the destinations.
func (idx *index) trafficFor(dests []sdk.Destination) []*policyv1alpha1.TrafficPolicy {
	var out []*policyv1alpha1.TrafficPolicy
	for _, tp := range idx.traffic {
		if selectsAny(tp.Spec.DestinationSelectors, dests) {
			out = append(out, tp)
		}
	}
	return out
}

// accessFor returns the AccessPolicies selecting the destination.
func (idx *index) accessFor(d sdk.Destination) []*policyv1alpha1.AccessPolicy {
	var out []*policyv1alpha1.AccessPolicy
	for _, ap := range idx.access {
		if selectsAny(ap.Spec.DestinationSelectors, []sdk.Destination{d}) {
			out = append(out, ap)
		}
	}
	return out
}

func selectsAny(sels []policyv1alpha1.DestinationSelector, dests []sdk.Destination) bool {
	for _, d := range dests {
		for _, sel := range sels {
			if d.Cluster.Matches(sel, d.Service) {
				return true
			}
		}
	}
	return false
}

// outbound returns the resources a node group of the given kind of proxy
// (discoveryapi.EnvoyProxyEnvoy, else gRPC) needs to call out:
// VirtualDestinations and the target's Services that TrafficPolicies
// select. What a node group calls does not depend on the node group: the
// routes, Clusters and ClusterLoadAssignments are built once, the
// Listeners once per kind, and node groups share them.
func (idx *index) outbound(proxy string) []*resource {
	if rs, ok := idx.outboundByProxy[proxy]; ok {
		return rs
	}
	if idx.outboundByProxy == nil {
		c := idx.target
		b := &nodeBuilder{idx: idx, cluster: c, set: resourceSet{}, region: clusterRegion(c)}
		for _, vh := range idx.vhosts {
			b.virtualHostListeners(vh)
		}
		for _, svc := range c.Services() {
			d := sdk.Destination{Cluster: c, Service: svc}
			if tps := idx.trafficFor([]sdk.Destination{d}); len(tps) > 0 {
				b.serviceListeners(d, tps)
			}
		}
		idx.outboundBase, idx.outboundHosts = b.set, b.hosts
		idx.outboundByProxy = map[string][]*resource{}
	}
	set := maps.Clone(idx.outboundBase)
	if proxy == discoveryapi.EnvoyProxyEnvoy {
		for key, r := range set {
			if c, ok := r.msg.(*clusterv3.Cluster); ok {
				set[key] = &resource{typeURL: r.typeURL, name: r.name, msg: withDownstreamProtocol(c), parents: r.parents}
			}
		}
		socketListeners(set, idx.outboundHosts)
	} else {
		apiListeners(set, idx.outboundHosts)
	}
	rs := set.sorted()
	idx.outboundByProxy[proxy] = rs
	return rs
}

// inbound builds the inbound Listeners and RouteConfigurations of the
// target's Services whose workloads belong to node group node.
func (idx *index) inbound(node, proxy string) []*resource {
	c := idx.target
	b := &nodeBuilder{idx: idx, cluster: c, node: node, envoy: proxy == discoveryapi.EnvoyProxyEnvoy, set: resourceSet{}}
	for _, svc := range c.Services() {
		if len(svc.Spec.Selector) > 0 && servesNode(idx.podTemplates(), svc, node) {
			b.inboundListeners(sdk.Destination{Cluster: c, Service: svc})
		}
	}
	return b.set.sorted()
}

// podTemplates returns the pod template labels of the target's
// Deployments, StatefulSets and DaemonSets.
func (idx *index) podTemplates() []map[string]string {
	if idx.templatesRead {
		return idx.templates
	}
	idx.templatesRead = true
	c := idx.target
	for _, d := range c.Deployments() {
		idx.templates = append(idx.templates, d.Spec.Template.Labels)
	}
	for _, s := range c.StatefulSets() {
		idx.templates = append(idx.templates, s.Spec.Template.Labels)
	}
	for _, d := range c.DaemonSets() {
		idx.templates = append(idx.templates, d.Spec.Template.Labels)
	}
	return idx.templates
}

// nodeBuilder builds one node group's resources.
type nodeBuilder struct {
	idx     *index
	cluster *sdk.Cluster
	node    string
	region  string
	set     resourceSet
	// envoy is whether the node group is Envoy proxies, not gRPC.
	envoy bool
	// hosts are the outbound hosts recorded (see outbound).
	hosts []*outboundHost
}

// clusterRegion returns the region most of the cluster's Nodes are in.
func clusterRegion(c *sdk.Cluster) string {
	count := map[string]int{}
	best := ""
	for _, n := range c.Nodes() {
		r := n.Labels[corev1.LabelTopologyRegion]
		if r == "" {
			continue
		}
		count[r]++
		if count[r] > count[best] || (count[r] == count[best] && r < best) {
			best = r
		}
	}
	return best
}

// servesNode reports whether the Service selects pods of a workload, given
// by its pod template labels, that carry the node group's label.
func servesNode(templates []map[string]string, svc *corev1.Service, node string) bool {
	if len(svc.Spec.Selector) == 0 {
		return false
	}
	for _, labels := range templates {
		if labels[discoveryapi.EnvoyNodeLabel] != node {
			continue
		}
		match := true
		for k, v := range svc.Spec.Selector {
			if labels[k] != v {
				match = false
				break
			}
		}
		if match {
			return true
		}
	}
	return false
}

// servicePort finds the Service's port numbered port; 0 (or a number the
// Service lacks, when it has only one port) means its only port.
func servicePort(svc *corev1.Service, port int32) (corev1.ServicePort, bool) {
	for _, p := range svc.Spec.Ports {
		if p.Port == port {
			return p, true
		}
	}
	if len(svc.Spec.Ports) == 1 && port == 0 {
		return svc.Spec.Ports[0], true
	}
	return corev1.ServicePort{}, false
}

func portString(p int32) string { return strconv.Itoa(int(p)) }
