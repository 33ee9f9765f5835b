package server

import (
	"bytes"
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/meshrelay/meshrelay/api/meta"
	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/engine"
)

// outputIndex keeps what status and inspection read of the outputs, so
// that neither decodes every output object of the fleet each time it is
// asked: for each cluster's output of each backend, the set it last saw,
// every resource's parent policies (meta.PoliciesAnnotation) and labels,
// and, by policy, the set's resources it produced.
//
// It follows the outputs as delivery writes them and as readers read them
// from the store (which holds those other replicas wrote too): an output
// whose hash it holds costs a comparison, and a new one decodes only the
// resources whose content it did not hold before. It is safe for
// concurrent use; what it returns is never modified.
type outputIndex struct {
	mu      sync.Mutex
	outputs map[engine.OutputKey]*indexedOutput
}

// indexedOutput is one output set with what was decoded of its resources.
type indexedOutput struct {
	set *snapshot.Snapshot
	// resources are the set's, in its order.
	resources []indexedResource
	// byPolicy holds, for every policy (meta.PolicyRef.Key) that some
	// resource names as its parent, those resources, in the set's order.
	byPolicy map[string][]snapshot.ID
}

// indexedResource is an output resource with its parent policies and its
// labels.
type indexedResource struct {
	snapshot.Resource
	policies []string
	labels   map[string]string
}

// has reports whether the output has resources of policy (by
// meta.PolicyRef.Key).
func (o *indexedOutput) has(policy string) bool { return len(o.byPolicy[policy]) > 0 }

// of returns the indexed form of set, the output of key: the one held when
// its hash is the same, else a new one, which it holds from now on.
func (x *outputIndex) of(key engine.OutputKey, set *snapshot.Snapshot) *indexedOutput {
	x.mu.Lock()
	old := x.outputs[key]
	x.mu.Unlock()
	if old != nil && old.set.Hash() == set.Hash() {
		return old
	}
	o := indexOutput(set, old)
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.outputs == nil {
		x.outputs = map[engine.OutputKey]*indexedOutput{}
	}
	x.outputs[key] = o
	return o
}

// retain forgets the outputs keep rejects: those of clusters and backends
// that are gone.
func (x *outputIndex) retain(keep func(engine.OutputKey) bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for k := range x.outputs {
		if !keep(k) {
			delete(x.outputs, k)
		}
	}
}

// indexOutput decodes the resources of set, taking those of prev (the
// output the same key held before, or nil) whose content is unchanged.
// The resources of one output mostly name the same policies and carry the
// same labels: they share one slice and one map of each, never modified,
// and a changed resource takes the ones prev's resources hold when they
// are equal, so that an edit does not leave the output with two copies of
// each (the unchanged resources' and the changed ones').
func indexOutput(set *snapshot.Snapshot, prev *indexedOutput) *indexedOutput {
	var known map[snapshot.Hash]*indexedResource
	if prev != nil {
		known = make(map[snapshot.Hash]*indexedResource, len(prev.resources))
		for i := range prev.resources {
			known[prev.resources[i].Hash] = &prev.resources[i]
		}
	}
	o := &indexedOutput{set: set, resources: make([]indexedResource, 0, set.Len()), byPolicy: map[string][]snapshot.ID{}}
	var shared *sharedMeta
	for r := range set.All() {
		ir := indexedResource{Resource: r}
		if k, ok := known[r.Hash]; ok {
			ir.policies, ir.labels = k.policies, k.labels
		} else {
			if shared == nil {
				shared = newSharedMeta(prev)
			}
			parents, l := decodeOutputMeta(r.Body)
			ir.policies, ir.labels = shared.policiesOf(parents), shared.labelsOf(l)
		}
		for _, p := range ir.policies {
			o.byPolicy[p] = append(o.byPolicy[p], r.ID)
		}
		o.resources = append(o.resources, ir)
	}
	return o
}

// sharedMeta hands out one slice of parent policies and one map of labels
// for equal contents, starting from those an output's resources hold.
type sharedMeta struct {
	// byAnnotation holds the split policies by their annotation;
	// policies and labels the shared instances by content.
	byAnnotation map[string][]string
	policies     map[string][]string
	labels       map[string]map[string]string
}

// newSharedMeta returns a sharedMeta holding the instances of prev's
// resources (none for nil).
func newSharedMeta(prev *indexedOutput) *sharedMeta {
	m := &sharedMeta{byAnnotation: map[string][]string{}, policies: map[string][]string{}, labels: map[string]map[string]string{}}
	if prev == nil {
		return m
	}
	var last map[string]string
	for i, r := range prev.resources {
		m.policies[policiesKey(r.policies)] = r.policies
		// Neighbours mostly share one map: key each instance once.
		if i == 0 || !sameMap(r.labels, last) {
			m.labels[labelsKey(r.labels)] = r.labels
		}
		last = r.labels
	}
	return m
}

// policiesOf returns the shared slice of the policies annotation names.
func (m *sharedMeta) policiesOf(annotation string) []string {
	if ps, ok := m.byAnnotation[annotation]; ok {
		return ps
	}
	ps := meta.SplitPolicies(annotation)
	if shared, ok := m.policies[policiesKey(ps)]; ok {
		ps = shared
	} else {
		m.policies[policiesKey(ps)] = ps
	}
	m.byAnnotation[annotation] = ps
	return ps
}

// labelsOf returns the shared map equal to l.
func (m *sharedMeta) labelsOf(l map[string]string) map[string]string {
	key := labelsKey(l)
	if shared, ok := m.labels[key]; ok {
		return shared
	}
	m.labels[key] = l
	return l
}

// policiesKey is the same string for the same policies, in order.
func policiesKey(ps []string) string { return strings.Join(ps, "\n") }

// sameMap reports whether a and b are the same map instance (both nil
// included).
func sameMap(a, b map[string]string) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// decodeOutputMeta returns the parent policies (meta.PoliciesAnnotation)
// and the labels of an output object's JSON; none when it does not decode.
//
// The bodies are valid JSON, checked by the plugin host (protocol/host's
// checkBody) or by their hash when loaded from the store, so it decodes
// only the top-level "metadata" and skips the other members by their
// outline (snapshot.ObjectMembers): the spec, most of an output, is never
// decoded. A repeated "metadata" decodes again into the same struct, as
// json.Unmarshal does. A body whose outline is not an object's goes to
// json.Unmarshal; one with invalid JSON inside another member than
// "metadata", which json.Unmarshal would refuse whole, keeps its metadata.
func decodeOutputMeta(body []byte) (policies string, labels map[string]string) {
	var m objectMeta
	ok, err := snapshot.ObjectMembers(body, func(key, value []byte) error {
		if bytes.EqualFold(key, []byte("metadata")) {
			return json.Unmarshal(value, &m.Metadata)
		}
		return nil
	})
	if err != nil {
		return "", nil
	}
	if !ok {
		m = objectMeta{}
		if json.Unmarshal(body, &m) != nil {
			return "", nil
		}
	}
	return m.Metadata.Annotations[meta.PoliciesAnnotation], m.Metadata.Labels
}

// labelsKey is the same string for the same labels, and another for none
// (nil) than for an empty map.
func labelsKey(labels map[string]string) string {
	if labels == nil {
		return ""
	}
	var b strings.Builder
	b.WriteByte('{')
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		b.WriteString(strconv.Quote(k))
		b.WriteByte('=')
		b.WriteString(strconv.Quote(labels[k]))
		b.WriteByte(',')
	}
	return b.String()
}
