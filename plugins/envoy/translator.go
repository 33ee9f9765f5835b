package envoy

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	discoveryapi "github.com/meshrelay/meshrelay/api/discovery/v1alpha1"
	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
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
		InputKinds: []string{
			"/Service", "discovery.k8s.io/EndpointSlice", "/Node", "apps/Deployment", "apps/StatefulSet",
			"apps/DaemonSet", discoveryapi.Group + "/Mesh",
		},
		OutputKinds: []string{
			Group + "/" + KindListener, Group + "/" + KindRouteConfiguration,
			Group + "/" + KindCluster, Group + "/" + KindClusterLoadAssignment,
		},
	}
}

// Translate emits, for every node group of every cluster with the envoy
// mesh, the Listeners, RouteConfigurations, Clusters and
// ClusterLoadAssignments its proxies and gRPC clients need.
func (t *Translator) Translate(ctx context.Context, req *sdk.Request, resp *sdk.Response) error {
	idx := newIndex(req.Fleet)
	for _, c := range req.Fleet.ClustersWithMesh(discoveryapi.MeshEnvoy) {
		nodes := envoyNodes(c)
		if len(nodes) == 0 {
			continue
		}
		// What a node group calls does not depend on the node group: build
		// it once per cluster and share it.
		outbound := idx.outbound(c)
		for _, node := range nodes {
			if err := ctx.Err(); err != nil {
				return err
			}
			rs := slices.Concat(outbound, idx.inbound(c, node))
			for _, r := range rs {
				spec, err := idx.encode(r.msg)
				if err != nil {
					return fmt.Errorf("node %q of cluster %q: %w", node, c.Name, err)
				}
				resp.Emit(c.Name, wrap(node, r.msg, spec), r.parents...)
			}
		}
	}
	resp.Diagnose(idx.diags.list...)
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
	name := ResourceName(msg)
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

// serviceKey names a Service in a cluster.
type serviceKey struct{ cluster, namespace, name string }

func (k serviceKey) compare(o serviceKey) int {
	return cmp.Or(cmp.Compare(k.cluster, o.cluster), cmp.Compare(k.namespace, o.namespace), cmp.Compare(k.name, o.name))
}

// virtualHost is a VirtualDestination resolved against the fleet.
type virtualHost struct {
	vd       *policyv1alpha1.VirtualDestination
	backends []sdk.Destination
}

// index is what every node group's translation shares: the fleet resolved
// once per Translate.
type index struct {
	fleet   *sdk.Fleet
	vhosts  []*virtualHost
	traffic []*policyv1alpha1.TrafficPolicy
	access  []*policyv1alpha1.AccessPolicy
	diags   diagnostics
	encoded map[proto.Message]json.RawMessage
}

func newIndex(f *sdk.Fleet) *index {
	idx := &index{fleet: f, traffic: f.TrafficPolicies(), access: f.AccessPolicies(), encoded: map[proto.Message]json.RawMessage{}}
	for _, vd := range f.VirtualDestinations() {
		idx.vhosts = append(idx.vhosts, &virtualHost{vd: vd, backends: idx.backendsOf(vd)})
	}
	return idx
}

// backendsOf returns a VirtualDestination's backing Services, sorted by
// cluster, namespace and name, reporting listed Services that do not exist.
func (idx *index) backendsOf(vd *policyv1alpha1.VirtualDestination) []sdk.Destination {
	seen := map[serviceKey]bool{}
	var out []sdk.Destination
	for i, bs := range vd.Spec.Services {
		c, ok := idx.fleet.Cluster(bs.Cluster)
		var svc *corev1.Service
		if ok {
			svc, ok = c.Service(bs.Namespace, bs.Name)
		}
		if !ok {
			idx.diags.add(sdk.Warningf(vd, fmt.Sprintf("spec.services[%d]", i),
				"service %s/%s not found in cluster %q", bs.Namespace, bs.Name, bs.Cluster))
			continue
		}
		k := serviceKey{c.Name, svc.Namespace, svc.Name}
		if !seen[k] {
			seen[k] = true
			out = append(out, sdk.Destination{Cluster: c, Service: svc})
		}
	}
	for _, d := range idx.fleet.Select(vd.Spec.DestinationSelectors) {
		k := serviceKey{d.Cluster.Name, d.Service.Namespace, d.Service.Name}
		if !seen[k] {
			seen[k] = true
			out = append(out, d)
		}
	}
	slices.SortFunc(out, func(a, b sdk.Destination) int {
		return serviceKey{a.Cluster.Name, a.Service.Namespace, a.Service.Name}.compare(serviceKey{b.Cluster.Name, b.Service.Namespace, b.Service.Name})
	})
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
			if sdk.Matches(sel, d.Cluster.Name, d.Service) {
				return true
			}
		}
	}
	return false
}

// outbound builds the resources every node group of cluster c needs to
// call out: VirtualDestinations and the cluster's Services that
// TrafficPolicies select.
func (idx *index) outbound(c *sdk.Cluster) []*resource {
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
	return b.set.sorted()
}

// inbound builds the inbound Listeners and RouteConfigurations of the
// Services of cluster c whose workloads belong to node group node.
func (idx *index) inbound(c *sdk.Cluster, node string) []*resource {
	b := &nodeBuilder{idx: idx, cluster: c, node: node, set: resourceSet{}}
	for _, svc := range c.Services() {
		if servesNode(c, svc, node) {
			b.inboundListeners(sdk.Destination{Cluster: c, Service: svc})
		}
	}
	return b.set.sorted()
}

// encode returns the protobuf JSON of a resource, once per resource.
func (idx *index) encode(m proto.Message) (json.RawMessage, error) {
	if spec, ok := idx.encoded[m]; ok {
		return spec, nil
	}
	spec, err := encodeResource(m)
	if err != nil {
		return nil, err
	}
	idx.encoded[m] = spec
	return spec, nil
}

// nodeBuilder builds one node group's resources.
type nodeBuilder struct {
	idx     *index
	cluster *sdk.Cluster
	node    string
	region  string
	set     resourceSet
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

// servesNode reports whether the Service selects pods of a workload whose
// pod template carries the node group's label.
func servesNode(c *sdk.Cluster, svc *corev1.Service, node string) bool {
	if len(svc.Spec.Selector) == 0 {
		return false
	}
	var templates []map[string]string
	for _, d := range c.Deployments() {
		templates = append(templates, d.Spec.Template.Labels)
	}
	for _, s := range c.StatefulSets() {
		templates = append(templates, s.Spec.Template.Labels)
	}
	for _, d := range c.DaemonSets() {
		templates = append(templates, d.Spec.Template.Labels)
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
