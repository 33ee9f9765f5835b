package sdk

import (
	"cmp"
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"sync"

	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/api/snapshot"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// readOp is what a recorded read looked at.
type readOp uint8

const (
	// readObjects: every object of group/kind in cluster.
	readObjects readOp = iota + 1
	// readObject: one object of group/kind in cluster, by namespace and name.
	readObject
	// readEndpoints: the endpoints of Service namespace/name in cluster,
	// which come from its EndpointSlices and the cluster's Nodes.
	readEndpoints
	// readSelect: which Services match a selector list (its canonical
	// JSON in name), in cluster or, when cluster is empty, fleet-wide.
	readSelect
	// readMeta: one cluster's presence, staleness and meshes.
	readMeta
	// readList: which clusters exist, with their staleness and meshes;
	// name, when set, narrows it to the clusters with that mesh.
	readList
	// readPolicies: the valid policies of kind.
	readPolicies
	// readShared: the [Shared] value of key name.
	readShared
	// readLabels: one cluster's labels.
	readLabels
	// readClients: which clusters a client selector's clusterSelector
	// matches (its cluster fields, kept as a one-selector list under the
	// key in name).
	readClients

	lastReadOp = readClients
)

// read is one recorded read. Reads are compared by value, so recording the
// same read twice keeps one.
type read struct {
	op                                    readOp
	cluster, group, kind, namespace, name string
}

// decodes reports whether the read may decode the objects of its cluster,
// or of every cluster when it names none.
func (r read) decodes() bool {
	switch r.op {
	case readObjects, readObject, readEndpoints, readSelect:
		return true
	}
	return false
}

// global reports whether the read concerns no cluster in particular.
func (r read) global() bool {
	return r.cluster == "" && r.op != readMeta
}

// recorder collects the reads of one computation. A nil recorder records
// nothing. It is safe for concurrent use.
type recorder struct {
	mu        sync.Mutex
	reads     map[read]struct{}
	selectors map[string][]policyv1alpha1.DestinationSelector
}

func newRecorder() *recorder { return &recorder{reads: map[read]struct{}{}} }

func (r *recorder) add(rd read) {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.reads[rd] = struct{}{}
	r.mu.Unlock()
}

// addSelect records a selector read; the selectors are kept by their JSON.
func (r *recorder) addSelect(cluster string, sels []policyv1alpha1.DestinationSelector) {
	if r == nil {
		return
	}
	raw, _ := json.Marshal(sels) // plain data: cannot fail
	key := string(raw)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reads[read{op: readSelect, cluster: cluster, name: key}] = struct{}{}
	if r.selectors == nil {
		r.selectors = map[string][]policyv1alpha1.DestinationSelector{}
	}
	if _, ok := r.selectors[key]; !ok {
		r.selectors[key] = sels
	}
}

// addClients records a read of which clusters sel's cluster fields admit;
// they are kept as a destination selector with those fields only, whose
// admission of a cluster is the same.
func (r *recorder) addClients(sel policyv1alpha1.DestinationSelector) {
	if r == nil {
		return
	}
	raw, _ := json.Marshal(sel) // plain data: cannot fail
	key := "clients:" + string(raw)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reads[read{op: readClients, name: key}] = struct{}{}
	if r.selectors == nil {
		r.selectors = map[string][]policyv1alpha1.DestinationSelector{}
	}
	if _, ok := r.selectors[key]; !ok {
		r.selectors[key] = []policyv1alpha1.DestinationSelector{sel}
	}
}

// readSet is the frozen result of a recorder.
type readSet struct {
	reads     []read
	selectors map[string][]policyv1alpha1.DestinationSelector
}

func (r *recorder) freeze() *readSet {
	r.mu.Lock()
	defer r.mu.Unlock()
	rs := &readSet{reads: slices.Collect(maps.Keys(r.reads)), selectors: r.selectors}
	slices.SortFunc(rs.reads, compareReads)
	return rs
}

func compareReads(a, b read) int {
	switch {
	case a.op != b.op:
		return int(a.op) - int(b.op)
	case a.cluster != b.cluster:
		return cmp.Compare(a.cluster, b.cluster)
	case a.group != b.group:
		return cmp.Compare(a.group, b.group)
	case a.kind != b.kind:
		return cmp.Compare(a.kind, b.kind)
	case a.namespace != b.namespace:
		return cmp.Compare(a.namespace, b.namespace)
	default:
		return cmp.Compare(a.name, b.name)
	}
}

// clusters returns the clusters the set's reads are bound to, and whether
// it has fleet-wide reads.
func (rs *readSet) clusters() (names []string, global bool) {
	for _, r := range rs.reads {
		if r.global() {
			global = true
			continue
		}
		if len(names) == 0 || names[len(names)-1] != r.cluster {
			names = append(names, r.cluster)
		}
	}
	slices.Sort(names)
	return slices.Compact(names), global
}

// objectChange is one input object that an update changed. old or new is
// nil when the object was absent.
type objectChange struct {
	key      snapshot.ID
	old, new []byte
}

// serviceMeta is what selectors look at in a Service.
type serviceMeta struct {
	namespace, name string
	labels          map[string]string
}

// change is what one update changed, indexed for the questions reads ask.
type change struct {
	// kinds holds "group/Kind" of changed objects, by cluster.
	kinds map[string]map[string]bool
	// objects holds the changed objects' identities, by cluster.
	objects map[string]map[objectID]bool
	// endpoints holds namespace/service of changed EndpointSlices (old
	// and new), by cluster.
	endpoints map[string]map[[2]string]bool
	// services holds the old and new form of every changed Service, by cluster.
	services map[string][]serviceMeta
	// meta holds the clusters whose presence, staleness or meshes changed,
	// with their old and new meshes.
	meta map[string][]string
	// presence holds the clusters that joined or left the fleet.
	presence map[string]bool
	// policyKinds holds the kinds of policies that changed.
	policyKinds map[string]bool
	// shared holds the keys of Shared values that changed.
	shared map[string]bool
	// labels holds the old and new labels of the clusters whose labels
	// changed.
	labels map[string][2]map[string]string
	// left holds the labels of the clusters that left the fleet.
	left map[string]map[string]string
	// clusterLabels returns a cluster's labels in the new fleet, for
	// matching changed Services against cluster selectors.
	clusterLabels func(cluster string) map[string]string
}

// objectID is an object's identity without its version.
type objectID struct{ group, kind, namespace, name string }

func newChange() *change {
	return &change{
		kinds: map[string]map[string]bool{}, objects: map[string]map[objectID]bool{},
		endpoints: map[string]map[[2]string]bool{}, services: map[string][]serviceMeta{},
		meta: map[string][]string{}, presence: map[string]bool{}, policyKinds: map[string]bool{}, shared: map[string]bool{},
		labels: map[string][2]map[string]string{}, left: map[string]map[string]string{},
	}
}

// addObject records a changed object of cluster.
func (c *change) addObject(cluster string, oc objectChange) {
	k := oc.key
	if c.kinds[cluster] == nil {
		c.kinds[cluster] = map[string]bool{}
		c.objects[cluster] = map[objectID]bool{}
	}
	c.kinds[cluster][k.Group+"/"+k.Kind] = true
	c.objects[cluster][objectID{k.Group, k.Kind, k.Namespace, k.Name}] = true
	switch {
	case k.Group == "" && k.Kind == "Service":
		for _, labels := range oc.labels() {
			c.services[cluster] = append(c.services[cluster], serviceMeta{namespace: k.Namespace, name: k.Name, labels: labels})
		}
	case k.Group == "discovery.k8s.io" && k.Kind == "EndpointSlice":
		for _, labels := range oc.labels() {
			if c.endpoints[cluster] == nil {
				c.endpoints[cluster] = map[[2]string]bool{}
			}
			c.endpoints[cluster][[2]string{k.Namespace, labels[discoveryv1.LabelServiceName]}] = true
		}
	}
}

// labels returns the labels of the object before and after the change,
// where it existed; an object that does not decode has none.
func (oc objectChange) labels() []map[string]string {
	var out []map[string]string
	for _, raw := range [][]byte{oc.old, oc.new} {
		if raw == nil {
			continue
		}
		labels, _ := snapshot.DecodeLabels(raw)
		out = append(out, labels)
	}
	return out
}

// addMeta records that a cluster appeared, left, or changed staleness or meshes.
func (c *change) addMeta(cluster string, oldMeshes, newMeshes []string) {
	c.meta[cluster] = append(append(c.meta[cluster], oldMeshes...), newMeshes...)
}

// addLabels records that a cluster's labels changed.
func (c *change) addLabels(cluster string, old, new map[string]string) {
	if prev, ok := c.labels[cluster]; ok {
		old = prev[0]
	}
	c.labels[cluster] = [2]map[string]string{old, new}
}

// empty reports whether the change touches nothing.
func (c *change) empty() bool {
	return len(c.kinds) == 0 && len(c.meta) == 0 && len(c.policyKinds) == 0 && len(c.shared) == 0 && len(c.labels) == 0
}

// clusters returns the clusters the change touches.
func (c *change) clusters() []string {
	names := slices.Collect(maps.Keys(c.kinds))
	for n := range c.meta {
		names = append(names, n)
	}
	for n := range c.labels {
		names = append(names, n)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// global reports whether the change can touch fleet-wide reads.
func (c *change) global() bool {
	return len(c.policyKinds) > 0 || len(c.shared) > 0 || len(c.meta) > 0 || len(c.services) > 0 || len(c.labels) > 0
}

// touches reports whether the change concerns any read of rs.
func (c *change) touches(rs *readSet) bool {
	return slices.ContainsFunc(rs.reads, func(r read) bool { return c.touchesRead(r, rs) })
}

// touchesBoundIn reports whether the change concerns a read of rs bound to
// cluster, which is all a bound read concerns (the fleet-wide reads are
// checked through the index). rs.reads is sorted by op,
// then cluster, so each op's reads of the cluster are found by binary
// search: a value or target that read every cluster of a large fleet
// costs a few lookups per changed cluster, not one per read.
func (c *change) touchesBoundIn(rs *readSet, cluster string) bool {
	type opCluster struct {
		op      readOp
		cluster string
	}
	byOpCluster := func(r read, k opCluster) int {
		if r.op != k.op {
			return int(r.op) - int(k.op)
		}
		return cmp.Compare(r.cluster, k.cluster)
	}
	for op := readObjects; op <= lastReadOp; op++ {
		i, _ := slices.BinarySearchFunc(rs.reads, opCluster{op, cluster}, byOpCluster)
		for ; i < len(rs.reads) && rs.reads[i].op == op && rs.reads[i].cluster == cluster; i++ {
			if c.touchesRead(rs.reads[i], rs) {
				return true
			}
		}
	}
	return false
}

func (c *change) touchesRead(r read, rs *readSet) bool {
	switch r.op {
	case readObjects:
		return c.kinds[r.cluster][r.group+"/"+r.kind]
	case readObject:
		return c.objects[r.cluster][objectID{r.group, r.kind, r.namespace, r.name}]
	case readEndpoints:
		return c.endpoints[r.cluster][[2]string{r.namespace, r.name}] || c.kinds[r.cluster]["/Node"]
	case readSelect:
		sels := rs.selectors[r.name]
		for cluster, metas := range c.services {
			if r.cluster != "" && cluster != r.cluster {
				continue
			}
			if c.membershipChanged(cluster, metas, sels) {
				return true
			}
		}
		for cluster, ls := range c.labels {
			if r.cluster != "" && cluster != r.cluster {
				continue
			}
			if admissionChanged(cluster, ls, sels) {
				return true
			}
		}
		return false
	case readLabels:
		_, ok := c.labels[r.cluster]
		return ok
	case readClients:
		sels := rs.selectors[r.name]
		for cluster, ls := range c.labels {
			if admissionChanged(cluster, ls, sels) {
				return true
			}
		}
		for cluster := range c.presence {
			cm := policyv1alpha1.ClusterMeta{Name: cluster}
			if c.clusterLabels != nil {
				cm.Labels = c.clusterLabels(cluster)
			}
			if labeled(sels, cm) {
				return true
			}
		}
		return false
	case readMeta:
		_, ok := c.meta[r.cluster]
		return ok
	case readList:
		if r.name == "" {
			return len(c.meta) > 0
		}
		for _, meshes := range c.meta {
			if slices.Contains(meshes, r.name) {
				return true
			}
		}
		return false
	case readPolicies:
		return c.policyKinds[r.kind]
	case readShared:
		return c.shared[r.name]
	}
	return true
}

// admissionChanged reports whether the change of a cluster's labels
// (old, new) changes whether a selector with a clusterSelector admits it:
// its Services may then start or stop matching.
func admissionChanged(cluster string, ls [2]map[string]string, sels []policyv1alpha1.DestinationSelector) bool {
	old := policyv1alpha1.ClusterMeta{Name: cluster, Labels: ls[0]}
	new := policyv1alpha1.ClusterMeta{Name: cluster, Labels: ls[1]}
	return slices.ContainsFunc(sels, func(s policyv1alpha1.DestinationSelector) bool {
		return s.ClusterSelector != nil && s.AdmitsCluster(old) != s.AdmitsCluster(new)
	})
}

// labeled reports whether a selector of sels with a clusterSelector
// admits c.
func labeled(sels []policyv1alpha1.DestinationSelector, c policyv1alpha1.ClusterMeta) bool {
	return slices.ContainsFunc(sels, func(s policyv1alpha1.DestinationSelector) bool {
		return s.ClusterSelector != nil && s.AdmitsCluster(c)
	})
}

// membershipChanged reports whether a Service of cluster started or stopped
// matching the selectors. metas holds each changed Service's old form
// before its new form; an added or removed Service has only one.
func (c *change) membershipChanged(cluster string, metas []serviceMeta, sels []policyv1alpha1.DestinationSelector) bool {
	type state struct{ n, matched int }
	seen := map[[2]string]*state{}
	cm := policyv1alpha1.ClusterMeta{Name: cluster}
	if c.clusterLabels != nil {
		cm.Labels = c.clusterLabels(cluster)
	}
	for _, m := range metas {
		k := [2]string{m.namespace, m.name}
		st := seen[k]
		if st == nil {
			st = &state{}
			seen[k] = st
		}
		st.n++
		if policyv1alpha1.MatchesAny(sels, cm, m.namespace, m.name, m.labels) {
			st.matched++
		}
	}
	for _, st := range seen {
		// A Service seen once was added or removed: it matters if it matches.
		// Seen twice (old and new): it matters if exactly one form matches.
		if (st.n == 1 && st.matched == 1) || (st.n == 2 && st.matched == 1) {
			return true
		}
	}
	return false
}

// sharedValues holds the values of [Shared] across a session's updates,
// with their reads filed in an index, so that refreshing them after a
// change visits only the values it concerns.
type sharedValues struct {
	mu     sync.Mutex
	values map[string]*sharedValue
	index  readIndex
}

// sharedValue is one Shared value: how to compute it, its value for the
// current fleet and what computing it read.
type sharedValue struct {
	once    sync.Once
	compute func(*Fleet) any
	value   any
	reads   *readSet
}

func newSharedValues() *sharedValues {
	return &sharedValues{values: map[string]*sharedValue{}, index: newReadIndex()}
}

// get returns the value of key over fleet d, computing it once.
func (s *sharedValues) get(d *fleetData, key string, compute func(*Fleet) any) any {
	s.mu.Lock()
	v, ok := s.values[key]
	if !ok {
		v = &sharedValue{compute: compute}
		s.values[key] = v
	}
	s.mu.Unlock()
	v.once.Do(func() {
		v.value, v.reads = computeShared(d, v.compute)
		s.mu.Lock()
		s.index.set(key, v.reads)
		s.mu.Unlock()
	})
	return v.value
}

func computeShared(d *fleetData, compute func(*Fleet) any) (any, *readSet) {
	rec := newRecorder()
	value := compute(d.view(rec))
	return value, rec.freeze()
}

// refresh brings every value up to the new fleet d: a value whose reads
// the change touches is computed again, and its key is added to the change
// when the result differs. Values are not nested, so one pass suffices.
func (s *sharedValues) refresh(d *fleetData, c *change) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for key := range s.index.touched(c) {
		v := s.values[key]
		value, reads := computeShared(d, v.compute)
		if !reflect.DeepEqual(value, v.value) {
			c.shared[key] = true
		}
		nv := &sharedValue{compute: v.compute, value: value, reads: reads}
		nv.once.Do(func() {})
		s.values[key] = nv
		s.index.set(key, reads)
	}
}

// reset forgets every value, as a full update does.
func (s *sharedValues) reset() {
	s.mu.Lock()
	s.values = map[string]*sharedValue{}
	s.index = newReadIndex()
	s.mu.Unlock()
}
