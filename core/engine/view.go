package engine

import (
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/meshrelay/meshrelay/api/snapshot"
)

// View is the fleet an engine translates: every cluster's current input
// and whether it is stale, and the outputs delivered before. The server's
// View reads the store, the source of truth for inputs and outputs; the
// engine keeps no copy of either, only the marks (hash and version) of the
// outputs it handed on. Implementations are safe for concurrent use and
// cheap to call once per cluster and cycle; the engine holds no lock of
// its own while it calls them.
type View interface {
	// Clusters returns the names of the clusters in the fleet.
	Clusters() []string
	// Input returns a cluster's input and whether it is stale (its agent
	// is away; stale inputs still count). ok is false when the input
	// cannot be read; a cluster the engine translated before keeps its
	// last state then (it leaves the fleet only by leaving Clusters).
	Input(cluster string) (in *snapshot.Snapshot, stale, ok bool)
	// Delivered returns the output last delivered for cluster and backend,
	// by this engine or another (a replica the cluster's agent was
	// connected to, a run before a restart). The engine compares its first
	// answer for a key with it, so that an output that changed or emptied
	// meanwhile reaches the agent that still holds the old one.
	Delivered(cluster, backend string) (*snapshot.Snapshot, bool)
}

// Labeled is a View that knows each cluster's labels (the server's
// registry holds them); the engine hands them to the translators with the
// cluster's inputs, and a change of labels alone is a change of the
// cluster. A View that is not Labeled has clusters without labels.
type Labeled interface {
	// Labels returns the labels of a cluster of the fleet; the caller
	// does not change the map.
	Labels(cluster string) map[string]string
}

// Tracked is a View whose owner names to the engine each cluster that
// changed — its input, staleness or labels, joining or leaving the fleet
// — with [Engine.RefreshCluster], and calls [Engine.Refresh] for any
// other change. A cycle then reads only the clusters named since the
// last one, instead of every cluster of the fleet: after one cluster's
// change it costs that cluster, not the fleet. A View that is not
// Tracked is read whole every cycle.
type Tracked interface {
	View
	// Has reports whether a cluster is in the fleet (in Clusters).
	Has(cluster string) bool
}

// fullReadEvery bounds how long a Tracked view goes without being read
// whole: a change its owner failed to name is seen within it.
const fullReadEvery = 10 * time.Second

// MemView is a View held in memory, for an engine used alone (offline
// translation, tests): its owner sets inputs with SetInput, SetStale and
// RemoveCluster, runs [Engine.Step] (or Run, after Engine.Refresh), and
// hands each [Ready] to Deliver, which keeps the outputs as the store
// would.
type MemView struct {
	mu       sync.Mutex
	clusters map[string]memCluster
	outputs  map[OutputKey]*snapshot.Snapshot
}

type memCluster struct {
	input  *snapshot.Snapshot
	stale  bool
	labels map[string]string
}

// NewMemView returns an empty fleet.
func NewMemView() *MemView {
	return &MemView{clusters: map[string]memCluster{}, outputs: map[OutputKey]*snapshot.Snapshot{}}
}

// Clusters returns the names of the clusters.
func (m *MemView) Clusters() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Collect(maps.Keys(m.clusters))
}

// Input returns a cluster's input and whether it is stale.
func (m *MemView) Input(cluster string) (*snapshot.Snapshot, bool, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.clusters[cluster]
	return c.input, c.stale, ok
}

// Delivered returns the output Deliver kept for cluster and backend.
func (m *MemView) Delivered(cluster, backend string) (*snapshot.Snapshot, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.outputs[OutputKey{Cluster: cluster, Backend: backend}]
	return s, ok
}

// SetInput records a cluster's input; it reports whether the view changed.
func (m *MemView) SetInput(cluster string, s *snapshot.Snapshot) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.clusters[cluster]
	changed := c.input == nil || c.input.Hash() != s.Hash()
	c.input = s
	m.clusters[cluster] = c
	return changed
}

// SetLabels sets a cluster's labels; it reports whether the view changed.
func (m *MemView) SetLabels(cluster string, labels map[string]string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.clusters[cluster]
	if !ok || maps.Equal(c.labels, labels) {
		return false
	}
	c.labels = maps.Clone(labels)
	m.clusters[cluster] = c
	return true
}

// Labels returns a cluster's labels: MemView is Labeled.
func (m *MemView) Labels(cluster string) map[string]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.clusters[cluster].labels
}

// SetStale marks a cluster stale (its agent is away; its input still
// counts) or fresh; it reports whether the view changed.
func (m *MemView) SetStale(cluster string, stale bool) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.clusters[cluster]
	if !ok || c.stale == stale {
		return false
	}
	c.stale = stale
	m.clusters[cluster] = c
	return true
}

// RemoveCluster drops a cluster and its outputs, as a deregistration
// does; it reports whether the view changed.
func (m *MemView) RemoveCluster(cluster string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.clusters[cluster]
	delete(m.clusters, cluster)
	for k := range m.outputs {
		if k.Cluster == cluster {
			delete(m.outputs, k)
		}
	}
	return ok
}

// Deliver keeps the outputs of r, of the clusters still in the view, and
// returns those it did not keep, for Engine.Advance.
func (m *MemView) Deliver(r Ready) (unwritten []Output) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, o := range r.Outputs {
		if _, ok := m.clusters[o.Key.Cluster]; !ok {
			unwritten = append(unwritten, o)
			continue
		}
		m.outputs[o.Key] = o.Snapshot
	}
	return unwritten
}

// Output returns the output kept for key.
func (m *MemView) Output(key OutputKey) (*snapshot.Snapshot, bool) {
	return m.Delivered(key.Cluster, key.Backend)
}

// Outputs returns the outputs kept for a cluster, by backend.
func (m *MemView) Outputs(cluster string) map[string]*snapshot.Snapshot {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]*snapshot.Snapshot{}
	for k, s := range m.outputs {
		if k.Cluster == cluster {
			out[k.Backend] = s
		}
	}
	return out
}

// meshCache remembers each cluster's meshes by input hash, so that a cycle
// decodes a cluster's Mesh resources only when its input changed.
type meshCache struct {
	mu     sync.Mutex
	byName map[string]cachedMeshes
}

type cachedMeshes struct {
	hash   snapshot.Hash
	meshes []string
}

// getLocked returns a cluster's meshes. Callers hold c.mu.
func (c *meshCache) getLocked(cluster string, in *snapshot.Snapshot) []string {
	if m, ok := c.byName[cluster]; ok && m.hash == in.Hash() {
		return m.meshes
	}
	m := cachedMeshes{hash: in.Hash(), meshes: Meshes(in)}
	c.byName[cluster] = m
	return m.meshes
}

// keep forgets the clusters not in view. The cache holds every cluster
// of the view read last, so it looks over its entries only when it holds
// more clusters than view has.
func (c *meshCache) keep(view map[string]clusterState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.byName) <= len(view) {
		return
	}
	for name := range c.byName {
		if _, ok := view[name]; !ok {
			delete(c.byName, name)
		}
	}
}

// read takes the view's current fleet, with each cluster's meshes. A
// cluster of the fleet whose input cannot be read keeps its state in prev
// (the last cycle's view), so that a failed read neither removes it from
// the translators' view nor prunes its outputs.
func (e *Engine) read(prev map[string]clusterState) map[string]clusterState {
	names := e.view.Clusters()
	view := make(map[string]clusterState, len(names))
	e.meshes.mu.Lock()
	defer e.meshes.mu.Unlock()
	for _, name := range names {
		if cs, ok := e.readOne(name); ok {
			view[name] = cs
		} else if cs, had := prev[name]; had {
			view[name] = cs
		}
	}
	return view
}

// readChanged is read for a Tracked view: it reads the clusters named
// changed again into prev, in place, and returns it as the view, with
// what each of those clusters was before (was lacks one that was not in
// prev), whether a cluster left, and the clusters whose input could not
// be read (they keep their state, and are to be read again next cycle).
// Changing the map in place, rather than a copy, keeps a cycle after a
// one-cluster change from costing a copy of the fleet's entries.
func (e *Engine) readChanged(prev map[string]clusterState, tracked Tracked, changed map[string]struct{}) (view, was map[string]clusterState, left bool, unread []string) {
	view, was = prev, make(map[string]clusterState, len(changed))
	for name := range changed {
		if cs, ok := prev[name]; ok {
			was[name] = cs
		}
	}
	e.meshes.mu.Lock()
	defer e.meshes.mu.Unlock()
	for name := range changed {
		if !tracked.Has(name) {
			if _, had := view[name]; had {
				delete(view, name)
				left = true
			}
			continue
		}
		if cs, ok := e.readOne(name); ok {
			view[name] = cs
		} else {
			unread = append(unread, name)
		}
	}
	return view, was, left, unread
}

// differing returns the clusters whose state differs between two views,
// those in one only included.
func differing(prev, view map[string]clusterState) []string {
	var names []string
	for name, cs := range view {
		if old, ok := prev[name]; !ok || !old.Same(cs) {
			names = append(names, name)
		}
	}
	for name := range prev {
		if _, ok := view[name]; !ok {
			names = append(names, name)
		}
	}
	return names
}

// readOne reads one cluster of the fleet; false when its input cannot be
// read. Callers hold e.meshes.mu.
func (e *Engine) readOne(name string) (clusterState, bool) {
	in, stale, ok := e.view.Input(name)
	if !ok || in == nil {
		return clusterState{}, false
	}
	cs := clusterState{Input: in, Stale: stale, Meshes: e.meshes.getLocked(name, in)}
	if labeled, ok := e.view.(Labeled); ok {
		cs.Labels = labeled.Labels(name)
	}
	return cs, true
}
