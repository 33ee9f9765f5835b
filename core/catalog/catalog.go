package catalog

import (
	"cmp"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	json "github.com/go-json-experiment/json/v1" // encoding/json's rules and bytes, on the v2 engine
	discoveryapi "github.com/meshrelay/meshrelay/api/discovery/v1alpha1"
	"github.com/meshrelay/meshrelay/api/snapshot"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Cluster is what one cluster's inputs say runs there: its Meshes, and
// the specs of its Workloads and Destinations (the objects' metadata only
// repeats their spec's namespace and name). Its slices are sorted by
// namespace and name.
//
// Nothing in a Cluster may be modified, down to its label maps, strings
// and slices: clusters share the values they have in common (see
// intern.go).
type Cluster struct {
	Name         string
	Meshes       []discoveryapi.Mesh
	Workloads    []discoveryapi.WorkloadSpec
	Destinations []discoveryapi.DestinationSpec
	// held keeps the shared values canonical while the cluster lives.
	held held
}

// Labels and annotations the rules read.
const (
	istioInjectionLabel = "istio-injection"
	istioRevLabel       = "istio.io/rev"
	istioInject         = "sidecar.istio.io/inject"
	linkerdInject       = "linkerd.io/inject"
)

// inputs is one cluster's decoded inputs, by kind.
type inputs struct {
	cluster    string
	namespaces map[string]metav1.ObjectMeta
	nodes      map[string]map[string]string
	services   []service
	slices     []endpointSlice
	workloads  []discoveryapi.WorkloadSpec
	templates  []*podTemplate
	// workloadMeshes are the meshes of workloads[i].
	workloadMeshes []meshSet
	meshes         []discoveryapi.Mesh
	intern         *interner
}

// Derive computes a cluster's discovery objects from its input snapshot.
// Objects that do not decode are skipped: the agent validated them.
func Derive(cluster string, in *snapshot.Snapshot) *Cluster {
	d := decode(cluster, in)
	c := &Cluster{Name: cluster}
	hasMesh := func(t string) bool {
		return slices.ContainsFunc(d.meshes, func(m discoveryapi.Mesh) bool { return m.Spec.Type == t })
	}
	d.workloadMeshes = make([]meshSet, len(d.workloads))
	for i := range d.workloads {
		w := &d.workloads[i]
		d.workloadMeshes[i] = meshesOf(d.templates[i], d.namespaces[w.Namespace], hasMesh)
		w.Meshes = d.workloadMeshes[i].types()
	}
	c.Destinations = d.destinations()
	d.endpoints()
	for i := range d.workloads {
		w := &d.workloads[i]
		w.Destinations = d.intern.strList(w.Destinations)
		w.Localities = d.intern.strList(w.Localities)
	}
	c.Workloads = slices.Clip(d.workloads)
	for _, m := range d.meshes {
		m.Spec.Cluster = cluster
		m.TypeMeta = typeMeta("Mesh")
		c.Meshes = append(c.Meshes, m)
	}
	c.held = d.intern.held()
	return c
}

func typeMeta(kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: discoveryapi.APIVersion, Kind: kind}
}

// MeshWorkloads counts the cluster's workloads in the mesh type.
func (c *Cluster) MeshWorkloads(meshType string) int {
	n := 0
	for _, w := range c.Workloads {
		if slices.Contains(w.Meshes, meshType) {
			n++
		}
	}
	return n
}

func decode(cluster string, in *snapshot.Snapshot) *inputs {
	d := &inputs{cluster: cluster, namespaces: map[string]metav1.ObjectMeta{}, nodes: map[string]map[string]string{}, intern: newInterner()}
	if in == nil {
		return d
	}
	n := 0 // workloads, so that the cluster keeps no spare room
	for r := range in.Group("apps") {
		if isWorkload(r.ID.Kind) {
			n++
		}
	}
	d.workloads, d.templates = make([]discoveryapi.WorkloadSpec, 0, n), make([]*podTemplate, 0, n)
	for r := range in.All() {
		switch r.ID.Group + "/" + r.ID.Kind {
		case "/Namespace", "/Node":
			var o metav1.PartialObjectMetadata
			if json.Unmarshal(r.Body, &o) == nil {
				if r.ID.Kind == "Node" {
					d.nodes[o.Name] = o.Labels
				} else {
					d.namespaces[o.Name] = o.ObjectMeta
				}
			}
		case "/Service":
			var s service
			if json.Unmarshal(r.Body, &s) == nil {
				d.services = append(d.services, s)
			}
		case "discovery.k8s.io/EndpointSlice":
			var es endpointSlice
			if json.Unmarshal(r.Body, &es) == nil {
				d.slices = append(d.slices, es)
			}
		case "apps/Deployment", "apps/StatefulSet", "apps/DaemonSet":
			d.addWorkload(r)
		case discoveryapi.Group + "/Mesh":
			var m discoveryapi.Mesh
			if json.Unmarshal(r.Body, &m) == nil {
				d.meshes = append(d.meshes, m)
			}
		}
	}
	return d
}

func isWorkload(kind string) bool {
	return kind == "Deployment" || kind == "StatefulSet" || kind == "DaemonSet"
}

// addWorkload decodes a Deployment, StatefulSet or DaemonSet.
func (d *inputs) addWorkload(r snapshot.Resource) {
	o := new(workload)
	if json.Unmarshal(r.Body, o) != nil {
		return
	}
	var replicas int32 // none for a DaemonSet
	if r.ID.Kind != "DaemonSet" {
		replicas = ptrOr(o.Spec.Replicas, 1)
	}
	tmpl := &o.Spec.Template
	in := d.intern
	w := discoveryapi.WorkloadSpec{
		Cluster: d.cluster, Namespace: in.str(o.Namespace), Name: in.str(o.Name), Kind: in.str(r.ID.Kind),
		Labels: in.labelMap(tmpl.Labels), Replicas: replicas,
		ServiceAccount: in.str(cmp.Or(tmpl.Spec.ServiceAccountName, tmpl.Spec.DeprecatedServiceAccount, "default")),
	}
	d.workloads = append(d.workloads, w)
	d.templates = append(d.templates, tmpl)
}

func ptrOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// meshesOf returns the mesh types a pod template's pods join.
func meshesOf(tmpl *podTemplate, ns metav1.ObjectMeta, hasMesh func(string) bool) meshSet {
	var out meshSet
	if hasMesh(discoveryapi.MeshCilium) {
		out = out.with(discoveryapi.MeshCilium)
	}
	if _, ok := tmpl.Labels[discoveryapi.EnvoyNodeLabel]; ok {
		out = out.with(discoveryapi.MeshEnvoy)
	}
	if hasMesh(discoveryapi.MeshIstio) && istioInjected(tmpl, ns.Labels) {
		out = out.with(discoveryapi.MeshIstio)
	}
	if hasMesh(discoveryapi.MeshLinkerd) && linkerdInjected(tmpl, ns.Annotations) {
		out = out.with(discoveryapi.MeshLinkerd)
	}
	return out
}

func istioInjected(tmpl *podTemplate, nsLabels map[string]string) bool {
	inject := cmp.Or(tmpl.Labels[istioInject], tmpl.Annotations[istioInject])
	if inject == "false" {
		return false
	}
	_, rev := nsLabels[istioRevLabel]
	return inject == "true" || nsLabels[istioInjectionLabel] == "enabled" || rev
}

// linkerdInjected says whether Linkerd's proxy injector adds its proxy to
// a pod template's pods: the template's linkerd.io/inject annotation, else
// its namespace's, is "enabled" or "ingress" ("disabled" opts out).
func linkerdInjected(tmpl *podTemplate, nsAnnotations map[string]string) bool {
	inject := cmp.Or(tmpl.Annotations[linkerdInject], nsAnnotations[linkerdInject])
	return inject == "enabled" || inject == "ingress"
}

// destinations builds the Services' Destinations and links workloads to
// the Services that select them.
func (d *inputs) destinations() []discoveryapi.DestinationSpec {
	byLabel := d.labelIndex()
	bySvc := map[string][]*endpointSlice{}
	for i := range d.slices {
		es := &d.slices[i]
		key := es.Namespace + "/" + es.Labels[discoveryv1.LabelServiceName]
		bySvc[key] = append(bySvc[key], es)
	}
	in := d.intern
	out := make([]discoveryapi.DestinationSpec, 0, len(d.services))
	for _, svc := range d.services {
		dst := discoveryapi.DestinationSpec{
			Cluster: d.cluster, Namespace: in.str(svc.Namespace), Name: in.str(svc.Name), Labels: in.labelMap(svc.Labels),
			Type: in.str(string(cmp.Or(svc.Spec.Type, corev1.ServiceTypeClusterIP))),
		}
		if len(svc.Spec.Ports) > 0 {
			ports := make([]discoveryapi.DestinationPort, 0, len(svc.Spec.Ports))
			for _, p := range svc.Spec.Ports {
				ports = append(ports, discoveryapi.DestinationPort{
					Name: in.str(p.Name), Port: p.Port, Protocol: in.str(string(cmp.Or(p.Protocol, corev1.ProtocolTCP))),
					TargetPort: in.str(targetPort(p)), AppProtocol: in.str(ptrOr(p.AppProtocol, "")),
				})
			}
			dst.Ports = in.portList(ports)
		}
		var meshes meshSet
		for _, i := range d.selected(byLabel, svc.Namespace, svc.Spec.Selector) {
			w := &d.workloads[i]
			dst.Workloads = append(dst.Workloads, in.str(w.Kind+"/"+w.Name))
			w.Destinations = append(w.Destinations, dst.Name)
			meshes |= d.workloadMeshes[i]
		}
		dst.Workloads = in.strList(dst.Workloads)
		dst.Meshes = meshes.types()
		for _, es := range bySvc[svc.Namespace+"/"+svc.Name] {
			for _, ep := range es.Endpoints {
				dst.Endpoints++
				if ready(ep) {
					dst.ReadyEndpoints++
				}
			}
		}
		out = append(out, dst)
	}
	return out
}

// labelIndex maps "namespace/key=value" to the workloads whose pod
// template carries that label, in order.
func (d *inputs) labelIndex() map[string][]int {
	idx := map[string][]int{}
	for i, w := range d.workloads {
		for k, v := range w.Labels {
			key := w.Namespace + "/" + k + "=" + v
			idx[key] = append(idx[key], i)
		}
	}
	return idx
}

// selected returns the workloads of namespace whose pod template labels
// contain the selector, in order; none for an empty selector, which
// Kubernetes reads as selecting no pods. It checks only the workloads
// carrying the selector's rarest label.
func (d *inputs) selected(byLabel map[string][]int, namespace string, selector map[string]string) []int {
	var candidates []int
	first := true
	for k, v := range selector {
		c := byLabel[namespace+"/"+k+"="+v]
		if first || len(c) < len(candidates) {
			candidates, first = c, false
		}
	}
	var out []int
	for _, i := range candidates {
		if labelsContain(d.workloads[i].Labels, selector) {
			out = append(out, i)
		}
	}
	return out
}

func targetPort(p corev1.ServicePort) string {
	switch {
	case p.TargetPort.StrVal != "":
		return p.TargetPort.StrVal
	case p.TargetPort.IntVal != 0:
		return strconv.Itoa(int(p.TargetPort.IntVal))
	default:
		return strconv.Itoa(int(p.Port))
	}
}

func ready(ep endpoint) bool { return ep.Conditions.Ready == nil || *ep.Conditions.Ready }

// endpoints counts each workload's endpoints and their localities: an
// endpoint belongs to the workload of its namespace with the longest name
// that, followed by a dash, begins the endpoint's pod name.
func (d *inputs) endpoints() {
	byName := make(map[string]int, len(d.workloads))
	for i, w := range d.workloads {
		if _, dup := byName[w.Namespace+"/"+w.Name]; !dup {
			byName[w.Namespace+"/"+w.Name] = i
		}
	}
	localities := make([]map[string]bool, len(d.workloads))
	seen := map[string]bool{}
	for _, es := range d.slices {
		for _, ep := range es.Endpoints {
			if ep.TargetRef == nil || (ep.TargetRef.Kind != "" && ep.TargetRef.Kind != "Pod") {
				continue
			}
			pod := es.Namespace + "/" + ep.TargetRef.Name
			if seen[pod] {
				continue // one pod behind several Services counts once
			}
			seen[pod] = true
			i := owner(byName, pod)
			if i < 0 {
				continue
			}
			w := &d.workloads[i]
			w.Endpoints++
			if ready(ep) {
				w.ReadyEndpoints++
			}
			if loc := d.locality(ep); loc != "" {
				if localities[i] == nil {
					localities[i] = map[string]bool{}
				}
				localities[i][loc] = true
			}
		}
	}
	for i, locs := range localities {
		if len(locs) == 0 {
			continue
		}
		w := &d.workloads[i]
		w.Localities = make([]string, 0, len(locs))
		for l := range locs {
			w.Localities = append(w.Localities, l)
		}
		slices.Sort(w.Localities)
	}
}

// owner returns the index of the workload that named the pod
// ("namespace/pod"), or -1: the longest "namespace/workload" that a dash
// ends within the pod's name.
func owner(byName map[string]int, pod string) int {
	slash := strings.IndexByte(pod, '/')
	for i := len(pod) - 1; i > slash+1; i-- {
		if pod[i] != '-' {
			continue
		}
		if w, ok := byName[pod[:i]]; ok {
			return w
		}
	}
	return -1
}

// locality is "region/zone" of an endpoint, from its zone and its node's
// topology labels; empty when neither is known.
func (d *inputs) locality(ep endpoint) string {
	node := d.nodes[ptrOr(ep.NodeName, "")]
	region := node[corev1.LabelTopologyRegion]
	zone := cmp.Or(ptrOr(ep.Zone, ""), node[corev1.LabelTopologyZone])
	if region == "" && zone == "" {
		return ""
	}
	return region + "/" + zone
}

func labelsContain(labels, want map[string]string) bool {
	for k, v := range want {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// Fleet is every cluster's discovery objects.
type Fleet struct {
	// Clusters are sorted by name.
	Clusters []*Cluster
	// services counts the clusters having each Service.
	services map[serviceKey]int
}

// serviceKey is a Service's namespace and name.
type serviceKey struct{ namespace, name string }

// Join puts the clusters' objects together into a fleet. It does not
// modify them.
func Join(clusters []*Cluster) *Fleet {
	f := &Fleet{Clusters: slices.Clone(clusters), services: map[serviceKey]int{}}
	slices.SortFunc(f.Clusters, byName)
	for _, c := range f.Clusters {
		f.count(c, 1)
	}
	return f
}

func byName(a, b *Cluster) int { return cmp.Compare(a.Name, b.Name) }

// count adds n to the count of each of c's Services.
func (f *Fleet) count(c *Cluster, n int) {
	for _, dst := range c.Destinations {
		k := serviceKey{dst.Namespace, dst.Name}
		if f.services[k] += n; f.services[k] == 0 {
			delete(f.services, k)
		}
	}
}

// update returns the fleet of f's clusters with those named in gone
// removed and each of set in place of f's cluster of its name, or added.
// It does not modify f, and costs a copy of the cluster list and of the
// Service counts plus the changed clusters' objects, not a pass over
// every cluster's objects as Join does.
func (f *Fleet) update(set []*Cluster, gone []string) *Fleet {
	out := &Fleet{Clusters: slices.Clone(f.Clusters), services: maps.Clone(f.services)}
	// find searches the clusters that were sorted: set's names are
	// distinct, so none is looked for among those added.
	sorted := len(out.Clusters)
	find := func(name string) (int, bool) {
		return slices.BinarySearchFunc(out.Clusters[:sorted], name, func(c *Cluster, name string) int { return cmp.Compare(c.Name, name) })
	}
	var removed []int
	for _, name := range gone {
		if i, ok := find(name); ok {
			out.count(out.Clusters[i], -1)
			removed = append(removed, i)
		}
	}
	for _, i := range removed {
		out.Clusters[i] = nil // after the finds, which compare names
	}
	out.Clusters = slices.DeleteFunc(out.Clusters, func(c *Cluster) bool { return c == nil })
	sorted = len(out.Clusters)
	for _, c := range set {
		if i, ok := find(c.Name); ok {
			out.count(out.Clusters[i], -1)
			out.Clusters[i] = c
		} else {
			out.Clusters = append(out.Clusters, c)
		}
		out.count(c, 1)
	}
	if len(out.Clusters) > sorted {
		slices.SortFunc(out.Clusters, byName)
	}
	return out
}

// ServiceClusters returns how many clusters have a Service of the
// namespace and name.
func (f *Fleet) ServiceClusters(namespace, name string) int {
	return f.services[serviceKey{namespace, name}]
}

// Cache keeps each cluster's derivation for the hash of the input it came
// from, and the fleet joined from them. It is safe for concurrent use: one
// derivation runs at a time, and Current answers during one without
// waiting for it.
type Cache struct {
	// deriving is held by the derivation under way, and deriveCount is
	// how many clusters it derives.
	deriving    sync.Mutex
	deriveCount atomic.Int64
	// mu guards entries and fleet; it is held only to read or set them,
	// never while deriving.
	mu      sync.Mutex
	entries map[string]cacheEntry
	fleet   *Fleet
}

type cacheEntry struct {
	hash snapshot.Hash
	c    *Cluster
}

// Fleet returns the fleet's discovery objects for the clusters' current
// inputs, by cluster name. It derives only the clusters whose input
// changed since the last call, forgets the clusters that are gone, and
// returns the same Fleet while nothing changed. It waits for the
// derivation under way, if any, before its own.
func (c *Cache) Fleet(inputs map[string]*snapshot.Snapshot) *Fleet {
	c.deriving.Lock()
	defer c.deriving.Unlock()
	return c.derive(inputs)
}

// Current returns the fleet for inputs when that takes deriving no more
// than maxChanged clusters, after the derivation under way if it derives
// no more than that either; else, without deriving or waiting, the fleet
// last derived (nil before the first) and false. A thousand clusters'
// inputs take seconds to derive.
func (c *Cache) Current(inputs map[string]*snapshot.Snapshot, maxChanged int) (*Fleet, bool) {
	if !c.deriving.TryLock() {
		if c.deriveCount.Load() > int64(maxChanged) {
			return c.last(), false
		}
		c.deriving.Lock()
	}
	defer c.deriving.Unlock()
	if c.changed(inputs) > maxChanged {
		return c.last(), false
	}
	return c.derive(inputs), true
}

// last returns the fleet last derived, nil before the first.
func (c *Cache) last() *Fleet {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fleet
}

// changed counts the clusters whose input changed since the last
// derivation, or are gone.
func (c *Cache) changed(inputs map[string]*snapshot.Snapshot) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for name := range c.entries {
		if inputs[name] == nil {
			n++
		}
	}
	for name, in := range inputs {
		if e, ok := c.entries[name]; !ok || e.hash != in.Hash() {
			n++
		}
	}
	return n
}

// derive is Fleet's work. Callers hold c.deriving, so that only derive
// changes entries; it holds c.mu only to change them.
func (c *Cache) derive(inputs map[string]*snapshot.Snapshot) *Fleet {
	c.deriveCount.Store(math.MaxInt64) // until it is known
	defer c.deriveCount.Store(0)
	c.mu.Lock()
	if c.entries == nil {
		c.entries = map[string]cacheEntry{}
	}
	var gone []string
	for name := range c.entries {
		if inputs[name] == nil {
			delete(c.entries, name)
			gone = append(gone, name)
		}
	}
	var todo []string
	for name, in := range inputs {
		if e, ok := c.entries[name]; !ok || e.hash != in.Hash() {
			todo = append(todo, name)
		}
	}
	c.mu.Unlock()
	c.deriveCount.Store(int64(len(todo)))
	derived := make([]*Cluster, 0, len(todo))
	for _, name := range todo {
		e := cacheEntry{hash: inputs[name].Hash(), c: Derive(name, inputs[name])}
		c.mu.Lock()
		c.entries[name] = e
		c.mu.Unlock()
		derived = append(derived, e.c)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.fleet == nil || 2*(len(derived)+len(gone)) > len(c.entries):
		clusters := make([]*Cluster, 0, len(c.entries))
		for _, e := range c.entries {
			clusters = append(clusters, e.c)
		}
		c.fleet = Join(clusters)
	case len(derived)+len(gone) > 0:
		// A few clusters changed: the fleet is what it was with them
		// replaced, which costs what changed, not the fleet.
		c.fleet = c.fleet.update(derived, gone)
	}
	return c.fleet
}

// Derived returns how many clusters' discovery objects the cache holds.
func (c *Cache) Derived() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}
