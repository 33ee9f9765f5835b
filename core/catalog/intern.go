package catalog

import (
	"encoding/binary"
	"runtime"
	"slices"
	"sync"
	"unique"
	"weak"

	discoveryapi "github.com/meshrelay/meshrelay/api/discovery/v1alpha1"
)

// The same application runs in many clusters, so their discovery objects
// repeat the same namespaces, names, label sets and port names. A
// derivation shares them: every string it keeps is the canonical copy of
// package unique, and every label map the one canonical map of its pairs.
// Canonical values are held weakly by the process and strongly by the
// Clusters that use them (Cluster.held), so a value lives exactly as long
// as some cluster has it: names an agent chooses cannot grow the tables
// beyond what the clusters themselves hold.

// labelSet is a canonical label map. Its map is never modified.
type labelSet struct{ m map[string]string }

// labelSets holds each canonical label map weakly, by labelsKey. It is
// the counterpart of package unique's table for maps, which unique cannot
// hold (a map is not comparable); a collected labelSet's entry is deleted
// by its cleanup.
var labelSets = struct {
	sync.Mutex
	m map[string]weak.Pointer[labelSet]
}{m: map[string]weak.Pointer[labelSet]{}}

// canonicalLabels returns the canonical labelSet with m's pairs, making m
// itself canonical when there is none: the caller must not modify m
// afterwards.
func canonicalLabels(m map[string]string) *labelSet {
	key := labelsKey(m)
	labelSets.Lock()
	defer labelSets.Unlock()
	if ls := labelSets.m[key].Value(); ls != nil {
		return ls
	}
	ls := &labelSet{m: m}
	wp := weak.Make(ls)
	labelSets.m[key] = wp
	runtime.AddCleanup(ls, forgetLabels, labelSetEntry{key, wp})
	return ls
}

type labelSetEntry struct {
	key string
	wp  weak.Pointer[labelSet]
}

// forgetLabels deletes a collected labelSet's entry, unless a newer
// labelSet of the same pairs has replaced it.
func forgetLabels(e labelSetEntry) {
	labelSets.Lock()
	defer labelSets.Unlock()
	if labelSets.m[e.key] == e.wp {
		delete(labelSets.m, e.key)
	}
}

// labelsKey encodes a map's pairs, sorted by key, each string preceded by
// its length, so that two maps have the same key exactly when they have
// the same pairs.
func labelsKey(m map[string]string) string {
	keys := make([]string, 0, len(m))
	n := 0
	for k, v := range m {
		keys = append(keys, k)
		n += len(k) + len(v) + 2*binary.MaxVarintLen64
	}
	slices.Sort(keys)
	b := make([]byte, 0, n)
	for _, k := range keys {
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		b = binary.AppendUvarint(b, uint64(len(m[k])))
		b = append(b, m[k]...)
	}
	return string(b)
}

// interner shares one cluster's values with the other clusters'. It
// remembers what it handed out, so that the Cluster can hold it.
type interner struct {
	strs map[string]unique.Handle[string]
	sets map[*labelSet]struct{}
}

func newInterner() *interner {
	return &interner{strs: map[string]unique.Handle[string]{}, sets: map[*labelSet]struct{}{}}
}

// str returns the canonical copy of s.
func (in *interner) str(s string) string {
	if s == "" {
		return ""
	}
	h, ok := in.strs[s]
	if !ok {
		h = unique.Make(s)
		in.strs[s] = h
	}
	return h.Value()
}

// strSlice interns each of ss in place and returns it clipped to its length.
func (in *interner) strSlice(ss []string) []string {
	for i, s := range ss {
		ss[i] = in.str(s)
	}
	return slices.Clip(ss)
}

// labels returns the canonical map with m's pairs; m must not be modified
// afterwards. Empty and nil maps are returned as they are.
func (in *interner) labels(m map[string]string) map[string]string {
	if len(m) == 0 {
		return m
	}
	ls := canonicalLabels(m)
	in.sets[ls] = struct{}{}
	return ls.m
}

// held returns what a Cluster must hold to keep the values it was handed
// canonical.
func (in *interner) held() held {
	h := held{
		strs:   make([]unique.Handle[string], 0, len(in.strs)),
		labels: make([]*labelSet, 0, len(in.sets)),
	}
	for _, s := range in.strs {
		h.strs = append(h.strs, s)
	}
	for ls := range in.sets {
		h.labels = append(h.labels, ls)
	}
	return h
}

// held keeps a Cluster's canonical values canonical while it lives.
type held struct {
	strs   []unique.Handle[string]
	labels []*labelSet
}

// meshTypes are the mesh types, sorted.
var meshTypes = [...]string{discoveryapi.MeshCilium, discoveryapi.MeshEnvoy, discoveryapi.MeshIstio, discoveryapi.MeshLinkerd}

// meshSet is a set of meshTypes, bit i for meshTypes[i].
type meshSet uint8

// meshSets are the sorted slices of every meshSet, shared by every
// workload and destination; the empty set's is nil.
var meshSets = func() [1 << len(meshTypes)][]string {
	var out [1 << len(meshTypes)][]string
	for s := range out {
		for i, t := range meshTypes {
			if s&(1<<i) != 0 {
				out[s] = append(out[s], t)
			}
		}
		out[s] = slices.Clip(out[s])
	}
	return out
}()

func (s meshSet) with(meshType string) meshSet {
	return s | 1<<slices.Index(meshTypes[:], meshType)
}

// types returns the set's mesh types, sorted: a shared slice.
func (s meshSet) types() []string { return meshSets[s] }
