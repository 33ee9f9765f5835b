package sdk

import (
	"cmp"
	"encoding/json"
	"maps"
	"slices"
	"sync"

	jsonv1 "github.com/go-json-experiment/json/v1"
	discoveryapi "github.com/meshrelay/meshrelay/api/discovery/v1alpha1"
	"github.com/meshrelay/meshrelay/api/meta"
	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/api/snapshot"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// SourceClusterAnnotation is set by the SDK on policies that were defined in
// a workload cluster rather than in the management source; its value is the
// cluster's name.
const SourceClusterAnnotation = meta.SourceClusterAnnotation

// Kinds of policies, as the fleet's read records name them.
const (
	kindTrafficPolicy      = "TrafficPolicy"
	kindAccessPolicy       = "AccessPolicy"
	kindVirtualDestination = "VirtualDestination"
)

// fleetData is one state of the fleet, shared by every view of it.
type fleetData struct {
	clusters []*clusterData
	byName   map[string]*clusterData
	traffic  []*policyv1alpha1.TrafficPolicy
	access   []*policyv1alpha1.AccessPolicy
	virtual  []*policyv1alpha1.VirtualDestination
	// shared holds the values of [Shared]; nil outside a session.
	shared *sharedValues
}

// Fleet is the view a translator reads: every cluster and every valid policy.
// It is read-only; a Fleet may be shared between calls, so translators must
// not modify what it returns. The Fleet of a [Request] is valid while its
// TranslateTarget call runs: the SDK changes it in place for the next
// update, so a Translator must not keep it.
//
// The Fleet given to [Translator.TranslateTarget] records what the
// computation reads through it — which clusters, which kinds and objects,
// which selectors, which policies — so that the SDK knows which targets a
// later change concerns. Everything a target's outputs depend on must be
// read through it.
type Fleet struct {
	d   *fleetData
	rec *recorder // nil when reads are not recorded
}

// Clusters returns every cluster, sorted by name. A target computation that
// calls it depends on every cluster's presence, staleness and meshes.
func (f *Fleet) Clusters() []*Cluster {
	f.rec.add(read{op: readList})
	return f.handles(f.d.clusters)
}

func (f *Fleet) handles(cds []*clusterData) []*Cluster {
	out := make([]*Cluster, len(cds))
	for i, cd := range cds {
		out[i] = cd.handle(f.rec)
	}
	return out
}

// Cluster returns the named cluster.
func (f *Fleet) Cluster(name string) (*Cluster, bool) {
	f.rec.add(read{op: readMeta, cluster: name})
	cd, ok := f.d.byName[name]
	if !ok {
		return nil, false
	}
	return cd.handle(f.rec), true
}

// ClustersWithMesh returns the clusters where discovery found the mesh type
// (istio, cilium, envoy), sorted by name.
func (f *Fleet) ClustersWithMesh(mesh string) []*Cluster {
	f.rec.add(read{op: readList, name: mesh})
	var out []*Cluster
	for _, cd := range f.d.clusters {
		if slices.Contains(cd.meshes, mesh) {
			out = append(out, cd.handle(f.rec))
		}
	}
	return out
}

// TrafficPolicies returns the valid TrafficPolicies, sorted by namespace and name.
func (f *Fleet) TrafficPolicies() []*policyv1alpha1.TrafficPolicy {
	f.rec.add(read{op: readPolicies, kind: kindTrafficPolicy})
	return f.d.traffic
}

// AccessPolicies returns the valid AccessPolicies, sorted by namespace and name.
func (f *Fleet) AccessPolicies() []*policyv1alpha1.AccessPolicy {
	f.rec.add(read{op: readPolicies, kind: kindAccessPolicy})
	return f.d.access
}

// VirtualDestinations returns the valid VirtualDestinations, sorted by namespace and name.
func (f *Fleet) VirtualDestinations() []*policyv1alpha1.VirtualDestination {
	f.rec.add(read{op: readPolicies, kind: kindVirtualDestination})
	return f.d.virtual
}

// VirtualDestination returns the VirtualDestination with the given namespace and name.
func (f *Fleet) VirtualDestination(namespace, name string) (*policyv1alpha1.VirtualDestination, bool) {
	for _, vd := range f.VirtualDestinations() {
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

// Key returns the name of d's Service in its cluster.
func (d Destination) Key() ServiceKey {
	return ServiceKey{Cluster: d.Cluster.Name, Namespace: d.Service.Namespace, Name: d.Service.Name}
}

// ServiceKey names a Service in one cluster of the fleet. It is comparable,
// so translators may key maps with it.
type ServiceKey struct {
	Cluster, Namespace, Name string
}

// String returns "cluster/namespace/name".
func (k ServiceKey) String() string { return k.Cluster + "/" + k.Namespace + "/" + k.Name }

// InCluster returns "namespace/name in cluster", as a sentence names a Service.
func (k ServiceKey) InCluster() string { return k.Namespace + "/" + k.Name + " in " + k.Cluster }

// Compare orders keys by cluster, namespace and name.
func (k ServiceKey) Compare(o ServiceKey) int {
	return cmp.Or(cmp.Compare(k.Cluster, o.Cluster), cmp.Compare(k.Namespace, o.Namespace), cmp.Compare(k.Name, o.Name))
}

// Select returns the Services of every cluster matching any of the
// selectors, sorted by cluster, namespace and name. An empty selector list
// matches nothing; an empty selector matches every Service.
//
// A target computation that calls Select depends on which Services match and
// on the content of each one that does; a change to a Service that matches
// neither before nor after does not concern it. When a target's outputs
// depend only on its own cluster's Services, [Cluster.Select] is cheaper.
func (f *Fleet) Select(selectors []policyv1alpha1.DestinationSelector) []Destination {
	if len(selectors) == 0 {
		return nil
	}
	f.rec.addSelect("", selectors)
	var out []Destination
	for _, cd := range f.d.clusters {
		var h *Cluster
		for _, svc := range cd.selectServices(selectors) {
			if h == nil {
				h = cd.handle(f.rec)
			}
			f.rec.add(read{op: readObject, cluster: cd.name, kind: "Service", namespace: svc.Namespace, name: svc.Name})
			out = append(out, Destination{Cluster: h, Service: svc})
		}
	}
	return out
}

// SelectsAny reports whether any Service of the fleet matches one of the
// selectors. A target computation that calls it depends only on whether
// Services start or stop matching, not on their content.
func (f *Fleet) SelectsAny(selectors []policyv1alpha1.DestinationSelector) bool {
	if len(selectors) == 0 {
		return false
	}
	f.rec.addSelect("", selectors)
	for _, cd := range f.d.clusters {
		if len(cd.selectServices(selectors)) > 0 {
			return true
		}
	}
	return false
}

// clusterData is one workload cluster's inputs, shared by every view of it
// and decoded on demand, once.
type clusterData struct {
	name    string
	stale   bool
	meshes  []string
	labels  map[string]string
	objects map[snapshot.ID][]byte

	mu    sync.Mutex
	cache map[string]any
	// decodes counts the kinds decoded into cache, for tests.
	decodes int
	// decoded, when set, learns of every cache this cluster fills, so
	// that a session can drop the caches after an update.
	decoded *decodeLog
}

// decodeLog collects the clusters whose decode caches an update filled.
// A Translator's session drops them after each update. A target is
// computed again only after a change, mostly one of its own cluster's
// inputs, which replaces that cluster's data and its caches anyway; only
// fleet-wide changes (a policy edit) decode again what they read. Kept,
// the typed objects would cost about as much per cluster as the raw inputs
// (go test -bench PluginHeap ./internal/bench/).
type decodeLog struct {
	mu       sync.Mutex
	clusters []*clusterData
}

func (l *decodeLog) add(cd *clusterData) {
	l.mu.Lock()
	l.clusters = append(l.clusters, cd)
	l.mu.Unlock()
}

// drop empties the caches of the clusters logged since the last drop.
func (l *decodeLog) drop() {
	l.mu.Lock()
	clusters := l.clusters
	l.clusters = nil
	l.mu.Unlock()
	for _, cd := range clusters {
		cd.dropDecoded()
	}
}

// dropDecoded forgets what the cluster's inputs decoded to; a later read
// decodes them again.
func (cd *clusterData) dropDecoded() {
	cd.mu.Lock()
	cd.cache = nil
	cd.mu.Unlock()
}

// handle returns a view of the cluster that records reads into rec.
func (cd *clusterData) handle(rec *recorder) *Cluster {
	return &Cluster{Name: cd.name, Stale: cd.stale, d: cd, rec: rec}
}

// Cluster is one workload cluster's inputs, decoded on demand.
type Cluster struct {
	// Name is the cluster's registered name.
	Name string
	// Stale is true while the cluster's agent is disconnected; its last
	// inputs still count.
	Stale bool

	d   *clusterData
	rec *recorder
}

func (c *Cluster) readKind(group, kind string) {
	c.rec.add(read{op: readObjects, cluster: c.Name, group: group, kind: kind})
}

// Meshes returns the mesh types discovery found in the cluster, sorted.
func (c *Cluster) Meshes() []string {
	c.rec.add(read{op: readMeta, cluster: c.Name})
	return c.d.meshes
}

// Labels returns the cluster's labels in the server's registry (meshrelay
// cluster label), which cluster selectors match. A target computation that
// calls it depends on them.
func (c *Cluster) Labels() map[string]string {
	c.rec.add(read{op: readLabels, cluster: c.Name})
	return c.d.labels
}

// Admits reports whether the selector's cluster fields (clusters and
// clusterSelector) admit this cluster. A target computation that calls it
// depends on the cluster's labels when the selector has a clusterSelector.
func (c *Cluster) Admits(sel policyv1alpha1.DestinationSelector) bool {
	if sel.ClusterSelector != nil {
		c.rec.add(read{op: readLabels, cluster: c.Name})
	}
	return sel.AdmitsCluster(c.d.meta())
}

// AdmitsClients reports whether a client selector's cluster fields
// (clusters and clusterSelector) admit the clients of this cluster: it is
// named or its labels match, or neither field is set. A target
// computation that calls it depends on the cluster's labels when the
// selector has a clusterSelector. [Fleet.ClientClusters] answers for
// every cluster at once.
func (c *Cluster) AdmitsClients(sel *policyv1alpha1.ClientSelector) bool {
	if sel.ClusterSelector != nil {
		c.rec.add(read{op: readLabels, cluster: c.Name})
	}
	return sel.AdmitsCluster(c.d.meta())
}

// Matches reports whether svc, a Service of this cluster, matches the
// selector, as [policyv1alpha1.DestinationSelector.Matches] decides. A
// target computation that calls it depends on the cluster's labels when
// the selector has a clusterSelector.
func (c *Cluster) Matches(sel policyv1alpha1.DestinationSelector, svc *corev1.Service) bool {
	if sel.ClusterSelector != nil {
		c.rec.add(read{op: readLabels, cluster: c.Name})
	}
	return sel.Matches(c.d.meta(), svc.Namespace, svc.Name, svc.Labels)
}

// HasMesh reports whether discovery found the mesh type in the cluster.
func (c *Cluster) HasMesh(mesh string) bool { return slices.Contains(c.Meshes(), mesh) }

// Services returns the cluster's Services, sorted by namespace and name.
func (c *Cluster) Services() []*corev1.Service {
	c.readKind("", "Service")
	return c.d.services()
}

// Service returns one Service.
func (c *Cluster) Service(namespace, name string) (*corev1.Service, bool) {
	c.rec.add(read{op: readObject, cluster: c.Name, kind: "Service", namespace: namespace, name: name})
	return findNamed(c.d.services(), namespace, name)
}

// Select returns the cluster's Services that match any of the selectors,
// sorted by namespace and name. A target computation that calls it depends
// on every Service of this cluster, and on its labels when a selector has
// a clusterSelector.
func (c *Cluster) Select(selectors []policyv1alpha1.DestinationSelector) []Destination {
	if len(selectors) == 0 {
		return nil
	}
	c.readKind("", "Service")
	if slices.ContainsFunc(selectors, func(s policyv1alpha1.DestinationSelector) bool { return s.ClusterSelector != nil }) {
		c.rec.add(read{op: readLabels, cluster: c.Name})
	}
	var out []Destination
	for _, svc := range c.d.selectServices(selectors) {
		out = append(out, Destination{Cluster: c, Service: svc})
	}
	return out
}

// EndpointSlices returns the cluster's EndpointSlices, sorted by namespace and name.
func (c *Cluster) EndpointSlices() []*discoveryv1.EndpointSlice {
	c.readKind("discovery.k8s.io", "EndpointSlice")
	return c.d.endpointSlices()
}

// Deployments returns the cluster's Deployments, sorted by namespace and name.
func (c *Cluster) Deployments() []*appsv1.Deployment {
	c.readKind("apps", "Deployment")
	return decodeKind[appsv1.Deployment](c.d, "apps", "Deployment")
}

// StatefulSets returns the cluster's StatefulSets, sorted by namespace and name.
func (c *Cluster) StatefulSets() []*appsv1.StatefulSet {
	c.readKind("apps", "StatefulSet")
	return decodeKind[appsv1.StatefulSet](c.d, "apps", "StatefulSet")
}

// DaemonSets returns the cluster's DaemonSets, sorted by namespace and name.
func (c *Cluster) DaemonSets() []*appsv1.DaemonSet {
	c.readKind("apps", "DaemonSet")
	return decodeKind[appsv1.DaemonSet](c.d, "apps", "DaemonSet")
}

// ServiceAccounts returns the cluster's ServiceAccounts, sorted by namespace and name.
func (c *Cluster) ServiceAccounts() []*corev1.ServiceAccount {
	c.readKind("", "ServiceAccount")
	return decodeKind[corev1.ServiceAccount](c.d, "", "ServiceAccount")
}

// Namespaces returns the cluster's Namespaces, sorted by name.
func (c *Cluster) Namespaces() []*corev1.Namespace {
	c.readKind("", "Namespace")
	return decodeKind[corev1.Namespace](c.d, "", "Namespace")
}

// Nodes returns the cluster's Nodes (their labels carry localities), sorted by name.
func (c *Cluster) Nodes() []*corev1.Node {
	c.readKind("", "Node")
	return c.d.nodes()
}

// MeshInfo returns the Mesh resources discovery computed, sorted by name.
func (c *Cluster) MeshInfo() []*discoveryapi.Mesh {
	c.readKind(discoveryapi.Group, "Mesh")
	return decodeKind[discoveryapi.Mesh](c.d, discoveryapi.Group, "Mesh")
}

// Gateways returns the cluster's east-west gateways, sorted by namespace and name.
func (c *Cluster) Gateways() []*discoveryapi.Gateway {
	c.readKind(discoveryapi.Group, "Gateway")
	return decodeKind[discoveryapi.Gateway](c.d, discoveryapi.Group, "Gateway")
}

// Object is an input of a kind the SDK has no type for: its identity (the
// fields Group, Version, Kind, Namespace and Name of [snapshot.ID]) and its
// body.
type Object struct {
	snapshot.ID
	// Raw is the object's canonical JSON.
	Raw json.RawMessage
}

// Objects returns the inputs of any group and kind, sorted by namespace and
// name, undecoded.
func (c *Cluster) Objects(group, kind string) []Object {
	c.readKind(group, kind)
	var out []Object
	for _, k := range c.d.keys(group, kind) {
		out = append(out, Object{ID: k, Raw: c.d.objects[k]})
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
	// Pod is the name of the endpoint's Pod (its targetRef), when known.
	Pod string
}

// Endpoints returns the endpoints of a Service from its EndpointSlices, with
// region and zone taken from the slice's zone hints and the node's
// topology.kubernetes.io labels. Sorted by address. A target computation
// that calls it depends on the Service's EndpointSlices and on the
// cluster's Nodes, not on other Services' endpoints.
func (c *Cluster) Endpoints(namespace, service string) []Endpoint {
	c.rec.add(read{op: readEndpoints, cluster: c.Name, namespace: namespace, name: service})
	regions := map[string]string{}
	zones := map[string]string{}
	for _, n := range c.d.nodes() {
		regions[n.Name] = n.Labels[corev1.LabelTopologyRegion]
		zones[n.Name] = n.Labels[corev1.LabelTopologyZone]
	}
	var out []Endpoint
	for _, es := range c.d.endpointSlices() {
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
			if r := ep.TargetRef; r != nil && (r.Kind == "" || r.Kind == "Pod") {
				e.Pod = r.Name
			}
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

func (cd *clusterData) services() []*corev1.Service {
	return decodeKind[corev1.Service](cd, "", "Service")
}

func (cd *clusterData) endpointSlices() []*discoveryv1.EndpointSlice {
	return decodeKind[discoveryv1.EndpointSlice](cd, "discovery.k8s.io", "EndpointSlice")
}

func (cd *clusterData) nodes() []*corev1.Node { return decodeKind[corev1.Node](cd, "", "Node") }

// selectServices returns the cluster's Services matching any selector,
// deciding on names before decoding where the selectors allow it.
func (cd *clusterData) selectServices(sels []policyv1alpha1.DestinationSelector) []*corev1.Service {
	m := cd.meta()
	if !slices.ContainsFunc(sels, func(s policyv1alpha1.DestinationSelector) bool { return s.AdmitsCluster(m) }) {
		return nil
	}
	var out []*corev1.Service
	for _, svc := range cd.services() {
		if policyv1alpha1.MatchesAny(sels, m, svc.Namespace, svc.Name, svc.Labels) {
			out = append(out, svc)
		}
	}
	return out
}

func (cd *clusterData) keys(group, kind string) []snapshot.ID {
	var ks []snapshot.ID
	for k := range cd.objects {
		if k.Group == group && k.Kind == kind {
			ks = append(ks, k)
		}
	}
	slices.SortFunc(ks, snapshot.ID.Compare)
	return ks
}

// decodeKind decodes every input of one kind into T, once per clusterData.
// Objects that do not decode are skipped: the agent validated them when it
// discovered them. jsonv1 is encoding/json on the v2 engine: the same
// values (FuzzEngineAgreesWithEncodingJSON) at about half the cost.
func decodeKind[T any](cd *clusterData, group, kind string) []*T {
	cacheKey := group + "/" + kind
	cd.mu.Lock()
	defer cd.mu.Unlock()
	if v, ok := cd.cache[cacheKey]; ok {
		return v.([]*T)
	}
	cd.decodes++
	var out []*T
	for _, k := range cd.keys(group, kind) {
		v := new(T)
		if err := jsonv1.Unmarshal(cd.objects[k], v); err != nil {
			continue
		}
		out = append(out, v)
	}
	if cd.cache == nil {
		cd.cache = map[string]any{}
		if cd.decoded != nil {
			cd.decoded.add(cd)
		}
	}
	cd.cache[cacheKey] = out
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

// newClusterData builds a cluster from its raw inputs. objects is owned by
// the result and must not change afterwards.
func newClusterData(name string, stale bool, meshes []string, labels map[string]string, objects map[snapshot.ID][]byte) *clusterData {
	ms := slices.Clone(meshes)
	slices.Sort(ms)
	return &clusterData{name: name, stale: stale, meshes: slices.Compact(ms), labels: labels, objects: objects}
}

// meta returns what cluster selectors look at.
func (cd *clusterData) meta() policyv1alpha1.ClusterMeta {
	return policyv1alpha1.ClusterMeta{Name: cd.name, Labels: cd.labels}
}

// newFleetData assembles a fleet from clusters and decoded, valid policies.
func newFleetData(clusters []*clusterData, policies []policyv1alpha1.Policy, shared *sharedValues) *fleetData {
	d := &fleetData{byName: make(map[string]*clusterData, len(clusters)), shared: shared}
	for _, c := range clusters {
		d.byName[c.name] = c
	}
	d.clusters = slices.Clone(clusters)
	slices.SortFunc(d.clusters, func(a, b *clusterData) int { return cmp.Compare(a.name, b.name) })
	d.clusters = slices.CompactFunc(d.clusters, func(a, b *clusterData) bool { return a.name == b.name })
	d.setPolicies(policies)
	return d
}

// next returns a copy of d with updates applied; see [fleetData.apply].
// d is not changed.
func (d *fleetData) next(updates map[string]*clusterData, policies []policyv1alpha1.Policy, setPolicies bool) *fleetData {
	n := &fleetData{byName: maps.Clone(d.byName), clusters: slices.Clone(d.clusters), shared: d.shared, traffic: d.traffic, access: d.access, virtual: d.virtual}
	n.apply(updates, policies, setPolicies)
	return n
}

// apply replaces, adds or, for a nil value, removes the clusters of
// updates, and sets policies when setPolicies is true. It costs what the
// updates touched, not the fleet's size, unless many clusters joined or
// left, when it sorts the clusters again.
func (d *fleetData) apply(updates map[string]*clusterData, policies []policyv1alpha1.Policy, setPolicies bool) {
	byName := func(c *clusterData, name string) int { return cmp.Compare(c.name, name) }
	if len(updates) > 64 {
		for name, c := range updates {
			if c == nil {
				delete(d.byName, name)
			} else {
				d.byName[name] = c
			}
		}
		d.clusters = slices.SortedFunc(maps.Values(d.byName), func(a, b *clusterData) int { return cmp.Compare(a.name, b.name) })
	} else {
		for name, c := range updates {
			i, found := slices.BinarySearchFunc(d.clusters, name, byName)
			switch {
			case c == nil && found:
				d.clusters = slices.Delete(d.clusters, i, i+1)
				delete(d.byName, name)
			case c == nil:
			case found:
				d.clusters[i], d.byName[name] = c, c
			default:
				d.clusters = slices.Insert(d.clusters, i, c)
				d.byName[name] = c
			}
		}
	}
	if setPolicies {
		d.traffic, d.access, d.virtual = nil, nil, nil
		d.setPolicies(policies)
	}
}

// setPolicies sorts policies and files them by kind.
func (d *fleetData) setPolicies(policies []policyv1alpha1.Policy) {
	slices.SortFunc(policies, func(a, b policyv1alpha1.Policy) int {
		return cmp.Or(cmp.Compare(a.GetNamespace(), b.GetNamespace()), cmp.Compare(a.GetName(), b.GetName()),
			cmp.Compare(a.GetAnnotations()[SourceClusterAnnotation], b.GetAnnotations()[SourceClusterAnnotation]))
	})
	for _, p := range policies {
		switch p := p.(type) {
		case *policyv1alpha1.TrafficPolicy:
			d.traffic = append(d.traffic, p)
		case *policyv1alpha1.AccessPolicy:
			d.access = append(d.access, p)
		case *policyv1alpha1.VirtualDestination:
			d.virtual = append(d.virtual, p)
		}
	}
}

// view returns a Fleet over d that records reads into rec (nil: none).
func (d *fleetData) view(rec *recorder) *Fleet { return &Fleet{d: d, rec: rec} }
