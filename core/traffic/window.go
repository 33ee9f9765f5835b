package traffic

import (
	"maps"
	"slices"
	"sync"
)

// Drop reasons, the keys of a window's dropped counts.
const (
	// DropEdges: a sample for a new edge once the window held MaxEdges.
	DropEdges = "edges"
	// DropSeries: a series a stream reported once it held its maximum.
	DropSeries = "series"
	// DropLabel: a sample whose names are too long, not printable or missing.
	DropLabel = "label"
	// DropPoints: data points of a request beyond its maximum.
	DropPoints = "points"
	// DropSize: edges left out of a window to keep it under its size.
	DropSize = "size"
	// DropRefused: a window, or part of one, the server refused.
	DropRefused = "refused"
	// DropUnsent: edges of a window the agent could not send (no stream,
	// or its queue full).
	DropUnsent = "unsent"
)

// Window accumulates the edges of one cluster over the current window. It
// holds at most MaxEdges edges (the cardinality cap of the cluster):
// samples of further edges are dropped and counted. It is safe for
// concurrent use.
type Window struct {
	// MaxEdges bounds the edges of one window.
	MaxEdges int

	mu      sync.Mutex
	edges   map[Edge]*Stats
	dropped map[string]uint64
}

// NewWindow returns an empty window holding at most maxEdges edges.
func NewWindow(maxEdges int) *Window {
	return &Window{MaxEdges: maxEdges, edges: map[Edge]*Stats{}, dropped: map[string]uint64{}}
}

// Add adds s to edge e, or counts it dropped when e is not valid or the
// window is full.
func (w *Window) Add(e Edge, s *Stats) {
	if s.Empty() {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !e.Valid() {
		w.dropped[DropLabel]++
		return
	}
	cur, ok := w.edges[e]
	if !ok {
		if len(w.edges) >= w.MaxEdges {
			w.dropped[DropEdges]++
			return
		}
		cur = &Stats{}
		w.edges[e] = cur
	}
	cur.Add(s)
}

// Drop counts n things dropped for reason.
func (w *Window) Drop(reason string, n uint64) {
	if n == 0 {
		return
	}
	w.mu.Lock()
	w.dropped[reason] += n
	w.mu.Unlock()
}

// Take returns what the window holds and empties it.
func (w *Window) Take() (map[Edge]*Stats, map[string]uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	edges, dropped := w.edges, w.dropped
	w.edges, w.dropped = map[Edge]*Stats{}, map[string]uint64{}
	return edges, dropped
}

// sortedEdges returns the keys of edges in a stable order.
func sortedEdges(edges map[Edge]*Stats) []Edge {
	return slices.SortedFunc(maps.Keys(edges), func(a, b Edge) int {
		for _, c := range [][2]string{
			{a.DestinationCluster, b.DestinationCluster}, {a.DestinationService, b.DestinationService},
			{a.SourceWorkload, b.SourceWorkload}, {a.Protocol, b.Protocol},
		} {
			if c[0] != c[1] {
				if c[0] < c[1] {
					return -1
				}
				return 1
			}
		}
		return 0
	})
}
