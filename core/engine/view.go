package engine

import (
	"maps"
	"slices"
	"sync"

	"github.com/meshrelay/meshrelay/api/snapshot"
)

// View is the fleet an engine translates: every cluster's current input
// and whether it is stale, and the outputs delivered before. The server's
// View reads the store, the source of truth for inputs and outputs; the
// engine keeps no copy of the inputs, only what each translator's session
// has seen. Implementations are safe for concurrent use and cheap to call
// once per cluster and cycle (the engine calls Delivered holding its lock).
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

// memView is the engine's own View when Options.View is unset: the inputs
// given with SetInput, SetStale and RemoveCluster, for engines used alone
// (offline translation, tests).
type memView struct {
	mu       sync.Mutex
	clusters map[string]memCluster
}

type memCluster struct {
	input *snapshot.Snapshot
	stale bool
}

func (m *memView) Clusters() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Collect(maps.Keys(m.clusters))
}

func (m *memView) Input(cluster string) (*snapshot.Snapshot, bool, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.clusters[cluster]
	return c.input, c.stale, ok
}

// Delivered reports none: an engine used alone delivers nothing it must
// compare with later.
func (m *memView) Delivered(string, string) (*snapshot.Snapshot, bool) { return nil, false }

// set records a cluster's input; it reports whether the view changed.
func (m *memView) set(cluster string, s *snapshot.Snapshot) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.clusters[cluster]
	changed := c.input == nil || c.input.Hash() != s.Hash()
	c.input = s
	m.clusters[cluster] = c
	return changed
}

// setStale marks a cluster stale or fresh; it reports whether the view changed.
func (m *memView) setStale(cluster string, stale bool) bool {
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

// remove drops a cluster; it reports whether the view changed.
func (m *memView) remove(cluster string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.clusters[cluster]
	delete(m.clusters, cluster)
	return ok
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

// keep forgets the clusters not in view.
func (c *meshCache) keep(view map[string]clusterState) {
	c.mu.Lock()
	defer c.mu.Unlock()
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
	if e.mem != nil {
		return e.readOwn()
	}
	names := e.view.Clusters()
	view := make(map[string]clusterState, len(names))
	labeled, _ := e.view.(Labeled)
	e.meshes.mu.Lock()
	defer e.meshes.mu.Unlock()
	for _, name := range names {
		in, stale, ok := e.view.Input(name)
		if !ok || in == nil {
			if cs, had := prev[name]; had {
				view[name] = cs
			}
			continue
		}
		cs := clusterState{input: in, stale: stale, meshes: e.meshes.getLocked(name, in)}
		if labeled != nil {
			cs.labels = labeled.Labels(name)
		}
		view[name] = cs
	}
	return view
}

// readOwn reads the engine's own view under one lock.
func (e *Engine) readOwn() map[string]clusterState {
	e.mem.mu.Lock()
	defer e.mem.mu.Unlock()
	e.meshes.mu.Lock()
	defer e.meshes.mu.Unlock()
	view := make(map[string]clusterState, len(e.mem.clusters))
	for name, c := range e.mem.clusters {
		view[name] = clusterState{input: c.input, stale: c.stale, meshes: e.meshes.getLocked(name, c.input)}
	}
	return view
}
