package sdk

import (
	"cmp"
	"encoding/json"
	"maps"
	"slices"
	"sync"

	discoveryapi "github.com/meshrelay/meshrelay/api/discovery/v1alpha1"
	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// SourceClusterAnnotation is set by the SDK on policies that were defined in
// a workload cluster rather than in the management source; its value is the
// cluster's name.
const SourceClusterAnnotation = "meshrelay.io/source-cluster"

// objectKey identifies an object in a cluster's inputs.
type objectKey struct {
	Group, Version, Kind, Namespace, Name string
}

func (k objectKey) compare(o objectKey) int {
	return cmp.Or(cmp.Compare(k.Group, o.Group), cmp.Compare(k.Kind, o.Kind),
		cmp.Compare(k.Namespace, o.Namespace), cmp.Compare(k.Name, o.Name), cmp.Compare(k.Version, o.Version))
}

// Fleet is the view a translator reads: every cluster and every valid policy.
// It is read-only; a Fleet may be shared between calls, so translators must
// not modify what it returns.
type Fleet struct {
	clusters []*Cluster
	byName   map[string]*Cluster
	traffic  []*policyv1alpha1.TrafficPolicy
	access   []*policyv1alpha1.AccessPolicy
	virtual  []*policyv1alpha1.VirtualDestination
}

// Clusters returns every cluster, sorted by name.
func (f *Fleet) Clusters() []*Cluster { return f.clusters }

// Cluster returns the named cluster.
func (f *Fleet) Cluster(name string) (*Cluster, bool) {
	c, ok := f.byName[name]
	return c, ok
}

// ClustersWithMesh returns the clusters where discovery found the mesh type
// (istio, cilium, envoy), sorted by name.
func (f *Fleet) ClustersWithMesh(mesh string) []*Cluster {
	var out []*Cluster
	for _, c := range f.clusters {
		if c.HasMesh(mesh) {
			out = append(out, c)
		}
	}
	return out
}

// TrafficPolicies returns the valid TrafficPolicies, sorted by namespace and name.
func (f *Fleet) TrafficPolicies() []*policyv1alpha1.TrafficPolicy { return f.traffic }

// AccessPolicies returns the valid AccessPolicies, sorted by namespace and name.
func (f *Fleet) AccessPolicies() []*policyv1alpha1.AccessPolicy { return f.access }

// VirtualDestinations returns the valid VirtualDestinations, sorted by namespace and name.
func (f *Fleet) VirtualDestinations() []*policyv1alpha1.VirtualDestination { return f.virtual }

// VirtualDestination returns the VirtualDestination with the given namespace and name.
func (f *Fleet) VirtualDestination(namespace, name string) (*policyv1alpha1.VirtualDestination, bool) {
	for _, vd := range f.virtual {
		if vd.Namespace == namespace && vd.Name == name {
			return vd, true
		}
	}
	return nil, false
}

// Destination is a Kubernetes Service in one cluster of the fleet.
type Destination struct {
	Cluster *Cluster
	Service *corev1.Service
}

// Select returns the Services matching any of the selectors, sorted by
// cluster, namespace and name. An empty selector list matches nothing; an
// empty selector matches every Service.
func (f *Fleet) Select(selectors []policyv1alpha1.DestinationSelector) []Destination {
	var out []Destination
	for _, c := range f.clusters {
		for _, svc := range c.Services() {
			for _, sel := range selectors {
				if Matches(sel, c.Name, svc) {
					out = append(out, Destination{Cluster: c, Service: svc})
					break
				}
			}
		}
	}
	return out
}

// Matches reports whether a Service in cluster matches the selector: each
// non-empty field of the selector must match.
func Matches(sel policyv1alpha1.DestinationSelector, cluster string, svc *corev1.Service) bool {
	if len(sel.Clusters) > 0 && !slices.Contains(sel.Clusters, cluster) {
		return false
	}
	if len(sel.Namespaces) > 0 && !slices.Contains(sel.Namespaces, svc.Namespace) {
		return false
	}
	if len(sel.Names) > 0 && !slices.Contains(sel.Names, svc.Name) {
		return false
	}
	for k, v := range sel.Labels {
		if svc.Labels[k] != v {
			return false
		}
	}
	return true
}

// Cluster is one workload cluster's inputs, decoded on demand.
type Cluster struct {
	// Name is the cluster's registered name.
	Name string
	// Stale is true while the cluster's agent is disconnected; its last
	// inputs still count.
	Stale bool

	meshes  []string
	objects map[objectKey][]byte

	mu    sync.Mutex
	cache map[string]any
}

// Meshes returns the mesh types discovery found in the cluster, sorted.
func (c *Cluster) Meshes() []string { return c.meshes }

// HasMesh reports whether discovery found the mesh type in the cluster.
func (c *Cluster) HasMesh(mesh string) bool { return slices.Contains(c.meshes, mesh) }

// Services returns the cluster's Services, sorted by namespace and name.
func (c *Cluster) Services() []*corev1.Service { return decodeKind[corev1.Service](c, "", "Service") }

// Service returns one Service.
func (c *Cluster) Service(namespace, name string) (*corev1.Service, bool) {
	return findNamed(c.Services(), namespace, name)
}

// EndpointSlices returns the cluster's EndpointSlices, sorted by namespace and name.
func (c *Cluster) EndpointSlices() []*discoveryv1.EndpointSlice {
	return decodeKind[discoveryv1.EndpointSlice](c, "discovery.k8s.io", "EndpointSlice")
}

// Deployments returns the cluster's Deployments, sorted by namespace and name.
func (c *Cluster) Deployments() []*appsv1.Deployment {
	return decodeKind[appsv1.Deployment](c, "apps", "Deployment")
}

// StatefulSets returns the cluster's StatefulSets, sorted by namespace and name.
func (c *Cluster) StatefulSets() []*appsv1.StatefulSet {
	return decodeKind[appsv1.StatefulSet](c, "apps", "StatefulSet")
}

// DaemonSets returns the cluster's DaemonSets, sorted by namespace and name.
func (c *Cluster) DaemonSets() []*appsv1.DaemonSet {
	return decodeKind[appsv1.DaemonSet](c, "apps", "DaemonSet")
}

// ServiceAccounts returns the cluster's ServiceAccounts, sorted by namespace and name.
func (c *Cluster) ServiceAccounts() []*corev1.ServiceAccount {
	return decodeKind[corev1.ServiceAccount](c, "", "ServiceAccount")
}

// Namespaces returns the cluster's Namespaces, sorted by name.
func (c *Cluster) Namespaces() []*corev1.Namespace {
	return decodeKind[corev1.Namespace](c, "", "Namespace")
}

// Nodes returns the cluster's Nodes (their labels carry localities), sorted by name.
func (c *Cluster) Nodes() []*corev1.Node { return decodeKind[corev1.Node](c, "", "Node") }

// MeshInfo returns the Mesh resources discovery computed, sorted by name.
func (c *Cluster) MeshInfo() []*discoveryapi.Mesh {
	return decodeKind[discoveryapi.Mesh](c, discoveryapi.Group, "Mesh")
}

// Gateways returns the cluster's east-west gateways, sorted by namespace and name.
func (c *Cluster) Gateways() []*discoveryapi.Gateway {
	return decodeKind[discoveryapi.Gateway](c, discoveryapi.Group, "Gateway")
}

// Object is an input of a kind the SDK has no type for.
type Object struct {
	Group, Version, Kind, Namespace, Name string
	// Raw is the object's canonical JSON.
	Raw json.RawMessage
}

// Objects returns the inputs of any group and kind, sorted by namespace and
// name, undecoded.
func (c *Cluster) Objects(group, kind string) []Object {
	var out []Object
	for _, k := range c.keys(group, kind) {
		out = append(out, Object{Group: k.Group, Version: k.Version, Kind: k.Kind, Namespace: k.Namespace, Name: k.Name, Raw: c.objects[k]})
	}
	return out
}

// Endpoint is one address backing a Service, with its locality.
type Endpoint struct {
	Address string
	// Ports maps port names (empty for an unnamed port) to numbers.
	Ports  map[string]int32
	Ready  bool
	Zone   string
	Region string
	// Node is the node the endpoint runs on, when known.
	Node string
}

// Endpoints returns the endpoints of a Service from its EndpointSlices, with
// region and zone taken from the slice's zone hints and the node's
// topology.kubernetes.io labels. Sorted by address.
func (c *Cluster) Endpoints(namespace, service string) []Endpoint {
	regions := map[string]string{}
	zones := map[string]string{}
	for _, n := range c.Nodes() {
		regions[n.Name] = n.Labels[corev1.LabelTopologyRegion]
		zones[n.Name] = n.Labels[corev1.LabelTopologyZone]
	}
	var out []Endpoint
	for _, es := range c.EndpointSlices() {
		if es.Namespace != namespace || es.Labels[discoveryv1.LabelServiceName] != service {
			continue
		}
		ports := map[string]int32{}
		for _, p := range es.Ports {
			if p.Port != nil {
				ports[deref(p.Name)] = *p.Port
			}
		}
		for _, ep := range es.Endpoints {
			e := Endpoint{Ports: ports, Ready: ep.Conditions.Ready == nil || *ep.Conditions.Ready, Node: deref(ep.NodeName), Zone: deref(ep.Zone)}
			if e.Node != "" {
				e.Region = regions[e.Node]
				e.Zone = cmp.Or(e.Zone, zones[e.Node])
			}
			for _, a := range ep.Addresses {
				e.Address = a
				out = append(out, e)
			}
		}
	}
	slices.SortFunc(out, func(a, b Endpoint) int { return cmp.Compare(a.Address, b.Address) })
	return out
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func (c *Cluster) keys(group, kind string) []objectKey {
	var ks []objectKey
	for k := range c.objects {
		if k.Group == group && k.Kind == kind {
			ks = append(ks, k)
		}
	}
	slices.SortFunc(ks, objectKey.compare)
	return ks
}

// decodeKind decodes every input of one kind into T, once per Cluster.
// Objects that do not decode are skipped: the agent validated them when it
// discovered them.
func decodeKind[T any](c *Cluster, group, kind string) []*T {
	cacheKey := group + "/" + kind
	c.mu.Lock()
	defer c.mu.Unlock()
	if v, ok := c.cache[cacheKey]; ok {
		return v.([]*T)
	}
	var out []*T
	for _, k := range c.keys(group, kind) {
		v := new(T)
		if err := json.Unmarshal(c.objects[k], v); err != nil {
			continue
		}
		out = append(out, v)
	}
	if c.cache == nil {
		c.cache = map[string]any{}
	}
	c.cache[cacheKey] = out
	return out
}

type namedObject interface {
	GetNamespace() string
	GetName() string
}

func findNamed[T namedObject](objs []T, namespace, name string) (T, bool) {
	for _, o := range objs {
		if o.GetNamespace() == namespace && o.GetName() == name {
			return o, true
		}
	}
	var zero T
	return zero, false
}

// newCluster builds a cluster from its raw inputs. objects is owned by the
// new Cluster.
func newCluster(name string, stale bool, meshes []string, objects map[objectKey][]byte) *Cluster {
	ms := slices.Clone(meshes)
	slices.Sort(ms)
	return &Cluster{Name: name, Stale: stale, meshes: slices.Compact(ms), objects: objects}
}

// newFleet assembles a fleet from clusters and decoded, valid policies.
func newFleet(clusters []*Cluster, policies []policyv1alpha1.Policy) *Fleet {
	f := &Fleet{byName: make(map[string]*Cluster, len(clusters))}
	for _, c := range clusters {
		f.byName[c.Name] = c
	}
	f.clusters = slices.SortedFunc(maps.Values(f.byName), func(a, b *Cluster) int { return cmp.Compare(a.Name, b.Name) })
	slices.SortFunc(policies, func(a, b policyv1alpha1.Policy) int {
		return cmp.Or(cmp.Compare(a.GetNamespace(), b.GetNamespace()), cmp.Compare(a.GetName(), b.GetName()),
			cmp.Compare(a.GetAnnotations()[SourceClusterAnnotation], b.GetAnnotations()[SourceClusterAnnotation]))
	})
	for _, p := range policies {
		switch p := p.(type) {
		case *policyv1alpha1.TrafficPolicy:
			f.traffic = append(f.traffic, p)
		case *policyv1alpha1.AccessPolicy:
			f.access = append(f.access, p)
		case *policyv1alpha1.VirtualDestination:
			f.virtual = append(f.virtual, p)
		}
	}
	return f
}
