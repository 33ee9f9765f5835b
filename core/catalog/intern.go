package catalog

import (
	"encoding/binary"
	"iter"
	"maps"
	"runtime"
	"slices"
	"sync"
	"unique"
	"weak"

	discoveryapi "github.com/meshrelay/meshrelay/api/discovery/v1alpha1"
)

// The same application runs in many clusters, so their discovery objects
// repeat the same namespaces, names, label sets and port names. A
// derivation shares them: every string of a spec is the canonical copy of
// package unique, and every label map, Service port list and list of
// strings the one canonical value equal to it.
// Canonical values are held weakly by the process and strongly by the
// Clusters that use them (Cluster.held), so a value lives exactly as long
// as some cluster has it: names an agent chooses cannot grow the tables
// beyond what the clusters themselves hold.

// shared is a canonical value. Its value is never modified.
type shared[T any] struct{ v T }

// canon holds canonical values of T weakly, by a key that identifies
// them: the counterpart of package unique's table for values unique
// cannot hold (a map or slice is not comparable). A collected value's
// entry is deleted by its cleanup.
type canon[T any] struct {
	mu sync.Mutex
	m  map[string]weak.Pointer[shared[T]]
}

// labelSets are the canonical label maps, by labelsKey; portLists the
// canonical Service port lists, by portsKey; stringLists the canonical
// lists of strings (localities, a workload's Services, a Service's
// workloads), by stringsKey.
var (
	labelSets   = &canon[map[string]string]{m: map[string]weak.Pointer[shared[map[string]string]]{}}
	portLists   = &canon[[]discoveryapi.DestinationPort]{m: map[string]weak.Pointer[shared[[]discoveryapi.DestinationPort]]{}}
	stringLists = &canon[[]string]{m: map[string]weak.Pointer[shared[[]string]]{}}
)

// get returns the canonical value of key, making v canonical when there is
// none: the caller must not modify v afterwards.
func (c *canon[T]) get(key []byte, v T) *shared[T] {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.m[string(key)].Value(); s != nil {
		return s
	}
	s := &shared[T]{v: v}
	wp := weak.Make(s)
	c.m[string(key)] = wp
	runtime.AddCleanup(s, c.forget, canonEntry[T]{string(key), wp})
	return s
}

// has says whether the table holds a value of key.
func (c *canon[T]) has(key []byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.m[string(key)]
	return ok
}

type canonEntry[T any] struct {
	key string
	wp  weak.Pointer[shared[T]]
}

// forget deletes a collected value's entry, unless a newer value of the
// same key has replaced it.
func (c *canon[T]) forget(e canonEntry[T]) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m[e.key] == e.wp {
		delete(c.m, e.key)
	}
}

// labelsKey encodes a map's pairs, sorted by key, each string preceded by
// its length, so that two maps have the same key exactly when they have
// the same pairs.
func labelsKey(m map[string]string) []byte {
	keys := make([]string, 0, len(m))
	n := 0
	for k, v := range m {
		keys = append(keys, k)
		n += len(k) + len(v) + 2*binary.MaxVarintLen64
	}
	slices.Sort(keys)
	b := make([]byte, 0, n)
	for _, k := range keys {
		b = appendString(b, k)
		b = appendString(b, m[k])
	}
	return b
}

// portsKey encodes a port list, each string preceded by its length, so
// that two lists have the same key exactly when they are equal.
func portsKey(ports []discoveryapi.DestinationPort) []byte {
	var b []byte
	for _, p := range ports {
		b = binary.AppendVarint(b, int64(p.Port))
		for _, s := range []string{p.Name, p.Protocol, p.TargetPort, p.AppProtocol} {
			b = appendString(b, s)
		}
	}
	return b
}

// stringsKey encodes a list of strings, each preceded by its length, so
// that two lists have the same key exactly when they are equal.
func stringsKey(ss []string) []byte {
	var b []byte
	for _, s := range ss {
		b = appendString(b, s)
	}
	return b
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// interner shares one cluster's values with the other clusters'. It
// remembers what it handed out, so that the Cluster can hold it.
type interner struct {
	strs   map[string]unique.Handle[string]
	labels map[*shared[map[string]string]]struct{}
	ports  map[*shared[[]discoveryapi.DestinationPort]]struct{}
	lists  map[*shared[[]string]]struct{}
}

func newInterner() *interner {
	return &interner{
		strs:   map[string]unique.Handle[string]{},
		labels: map[*shared[map[string]string]]struct{}{},
		ports:  map[*shared[[]discoveryapi.DestinationPort]]struct{}{},
		lists:  map[*shared[[]string]]struct{}{},
	}
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

// strList returns the canonical list equal to ss, of canonical strings;
// ss must not be modified afterwards. An empty list is returned as it is.
func (in *interner) strList(ss []string) []string {
	if len(ss) == 0 {
		return ss
	}
	for i, s := range ss {
		ss[i] = in.str(s)
	}
	if cap(ss) > len(ss) {
		ss = slices.Clone(ss)
	}
	s := stringLists.get(stringsKey(ss), ss)
	in.lists[s] = struct{}{}
	return s.v
}

// labelMap returns the canonical map with m's pairs; m must not be
// modified afterwards. Empty and nil maps are returned as they are.
func (in *interner) labelMap(m map[string]string) map[string]string {
	if len(m) == 0 {
		return m
	}
	s := labelSets.get(labelsKey(m), m)
	in.labels[s] = struct{}{}
	return s.v
}

// portList returns the canonical list equal to ports; ports must not be
// modified afterwards. An empty list is returned as it is.
func (in *interner) portList(ports []discoveryapi.DestinationPort) []discoveryapi.DestinationPort {
	if len(ports) == 0 {
		return ports
	}
	s := portLists.get(portsKey(ports), ports)
	in.ports[s] = struct{}{}
	return s.v
}

// held returns what a Cluster must hold to keep the values it was handed
// canonical.
func (in *interner) held() held {
	return held{
		strs:   collect(maps.Values(in.strs), len(in.strs)),
		labels: collect(maps.Keys(in.labels), len(in.labels)),
		ports:  collect(maps.Keys(in.ports), len(in.ports)),
		lists:  collect(maps.Keys(in.lists), len(in.lists)),
	}
}

// collect returns the n values of seq in a slice of capacity n.
func collect[T any](seq iter.Seq[T], n int) []T {
	return slices.AppendSeq(make([]T, 0, n), seq)
}

// held keeps a Cluster's canonical values canonical while it lives.
type held struct {
	strs   []unique.Handle[string]
	labels []*shared[map[string]string]
	ports  []*shared[[]discoveryapi.DestinationPort]
	lists  []*shared[[]string]
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
