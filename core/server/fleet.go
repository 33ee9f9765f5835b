package server

import (
	"context"
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/engine"
	"github.com/meshrelay/meshrelay/core/store"
)

// member is a cluster of this replica's fleet view. Its input lives in the
// store, the source of truth for inputs; a member says only what the store
// does not: which input this replica last took, when, and whether the
// cluster's agent is away.
type member struct {
	hash    snapshot.Hash
	updated time.Time
	stale   bool
}

// fleetView is the engine's view of the fleet: the members, with their
// inputs read from the store (its memory layer, a map read).
type fleetView struct{ s *Server }

var (
	_ engine.View    = fleetView{}
	_ engine.Labeled = fleetView{}
	_ engine.Tracked = fleetView{}
)

// Has reports whether a cluster is a member. join, setLabels, setStale
// and leave, the only changes of the view, name their cluster to the
// engine (engine.Tracked).
func (v fleetView) Has(cluster string) bool {
	v.s.mu.Lock()
	defer v.s.mu.Unlock()
	_, ok := v.s.fleet[cluster]
	return ok
}

func (v fleetView) Clusters() []string {
	v.s.mu.Lock()
	defer v.s.mu.Unlock()
	return slices.Collect(maps.Keys(v.s.fleet))
}

func (v fleetView) Input(cluster string) (*snapshot.Snapshot, bool, bool) {
	in, m, ok := v.s.input(context.Background(), cluster)
	return in, m.stale, ok
}

// Labels returns a cluster's labels, as the registry held them when this
// replica last read its record.
func (v fleetView) Labels(cluster string) map[string]string { return v.s.clusterLabels(cluster) }

// Delivered reads the store: the output delivered for cluster and backend,
// by this replica or another.
func (v fleetView) Delivered(cluster, backend string) (*snapshot.Snapshot, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), storeReadTimeout)
	defer cancel()
	out, err := v.s.deps.Store.GetOutput(ctx, cluster, backend)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		v.s.log.Warn("read the output delivered before", "cluster", cluster, "backend", backend, "error", err)
	}
	return out, err == nil
}

// storeReadTimeout bounds a read of the store on the data path. The
// server's store answers reads from memory; a remote store may not.
const storeReadTimeout = 5 * time.Second

// input returns a member's input from the store, with its membership.
func (s *Server) input(ctx context.Context, cluster string) (*snapshot.Snapshot, member, bool) {
	s.mu.Lock()
	m, ok := s.fleet[cluster]
	s.mu.Unlock()
	if !ok {
		return nil, member{}, false
	}
	in, err := s.deps.Store.GetInput(ctx, cluster)
	if err != nil {
		return nil, member{}, false
	}
	return in, m, true
}

// inputs returns every member's input from the store, by cluster.
func (s *Server) inputs(ctx context.Context) map[string]*snapshot.Snapshot {
	s.mu.Lock()
	names := slices.Collect(maps.Keys(s.fleet))
	s.mu.Unlock()
	out := make(map[string]*snapshot.Snapshot, len(names))
	for _, name := range names {
		if in, _, ok := s.input(ctx, name); ok {
			out[name] = in
		}
	}
	return out
}

// join records that this replica took the input of the given hash as a
// cluster's input, from its agent or from the store, and tells the engine.
func (s *Server) join(cluster string, hash snapshot.Hash, stale bool) {
	s.mu.Lock()
	_, known := s.labels[cluster]
	s.mu.Unlock()
	var labels map[string]string
	if !known {
		labels = s.registryLabels(cluster)
	}
	s.mu.Lock()
	if _, known := s.labels[cluster]; !known {
		// Unless a registry event brought newer ones meanwhile.
		s.labels[cluster] = labels
	}
	s.fleet[cluster] = member{hash: hash, updated: time.Now(), stale: stale}
	s.mu.Unlock()
	s.engine.RefreshCluster(cluster)
}

// clusterLabels returns a cluster's labels, as the plugins see them.
func (s *Server) clusterLabels(cluster string) map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.labels[cluster]
}

// registryLabels reads a cluster's labels from its registry record; none
// when it cannot be read (a later change of the record brings them).
func (s *Server) registryLabels(cluster string) map[string]string {
	ctx, cancel := context.WithTimeout(context.Background(), storeReadTimeout)
	defer cancel()
	c, err := s.deps.Store.GetCluster(ctx, cluster)
	if err != nil {
		if !errors.Is(err, store.ErrNotFound) {
			s.log.Warn("read the cluster's labels", "cluster", cluster, "error", err)
		}
		return nil
	}
	return c.Labels
}

// setLabels records a cluster's labels, read from its registry record
// after it changed here or in another replica, and tells the engine when
// they differ from those a member of its fleet had.
func (s *Server) setLabels(cluster string, labels map[string]string) {
	s.mu.Lock()
	old, known := s.labels[cluster]
	s.labels[cluster] = maps.Clone(labels)
	_, member := s.fleet[cluster]
	s.mu.Unlock()
	if member && (!known || !maps.Equal(old, labels)) {
		s.engine.RefreshCluster(cluster)
	}
}

// setStale marks a member stale (its agent left) or fresh.
func (s *Server) setStale(cluster string, stale bool) {
	s.mu.Lock()
	m, ok := s.fleet[cluster]
	changed := ok && m.stale != stale
	if changed {
		m.stale = stale
		s.fleet[cluster] = m
	}
	s.mu.Unlock()
	if changed {
		s.engine.RefreshCluster(cluster)
	}
}

// leave drops a cluster from the fleet view.
func (s *Server) leave(cluster string) {
	s.mu.Lock()
	_, ok := s.fleet[cluster]
	delete(s.fleet, cluster)
	delete(s.labels, cluster)
	s.mu.Unlock()
	if ok {
		s.engine.RefreshCluster(cluster)
	}
}

// deliver consumes the engine's cycles, off the engine's goroutine: it
// writes every changed output to the store, whether or not its agent is
// connected here, wakes the agent's stream, records the cycle, and hands
// the engine back what it did not write (engine.Engine.Advance).
func (s *Server) deliver(ctx context.Context, ready <-chan engine.Ready) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case r := <-ready:
			var unwritten []engine.Output
			for _, o := range r.Outputs {
				if !s.deliverOutput(ctx, o) {
					unwritten = append(unwritten, o)
				}
			}
			s.resumeCurrent(ctx, r.Current)
			s.cycleDone(r.Stats)
			s.kickCatalog()
			s.engine.Advance(unwritten)
		}
	}
}

// deliverOutput writes o to the store and offers it to its agent's stream.
// It reports whether the store holds o: an output of a cluster that left
// the fleet, or whose agent left this replica, is not written, nor is one
// the store refused.
func (s *Server) deliverOutput(ctx context.Context, o engine.Output) bool {
	s.m.outputs.Inc()
	s.mu.Lock()
	_, here := s.streams[o.Key.Cluster]
	_, member := s.fleet[o.Key.Cluster]
	s.mu.Unlock()
	if !member {
		return false // left the fleet (deregistered) since the cycle read it
	}
	if !here && s.opts.Targets == TargetsConnected {
		// Its agent left this replica since the cycle read the view: the
		// replica it went to computes its outputs now, and this older one
		// must not overwrite theirs. Should the agent come back first, the
		// engine hands this output on again.
		return false
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	written := true
	if err := s.deps.Store.PutOutput(wctx, o.Key.Cluster, o.Key.Backend, o.Snapshot); err != nil {
		s.log.Warn("store output", "cluster", o.Key.Cluster, "backend", o.Key.Backend, "error", err)
		written = false
	} else {
		// Indexed now, so that status and inspection find it decoded.
		s.outputIndex.of(o.Key, o.Snapshot)
	}
	// Looked up after the write: a stream that attached since then read
	// this output from the store.
	s.mu.Lock()
	st := s.streams[o.Key.Cluster]
	s.mu.Unlock()
	if st != nil {
		st.offer(o.Key.Backend, o.Snapshot)
	}
	return written
}

// resumeCurrent offers each stream here the stored outputs the engine
// found current and that the stream does not send yet: a stream starts
// before the engine computes its cluster, so an output stored by another
// replica that the agent does not hold (it may have left before getting
// it) reaches the agent once the engine's answer shows it is current.
func (s *Server) resumeCurrent(ctx context.Context, current []engine.Current) {
	for _, c := range current {
		s.mu.Lock()
		st := s.streams[c.Key.Cluster]
		s.mu.Unlock()
		if st == nil || st.wants(c.Key.Backend) {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, storeReadTimeout)
		o, err := s.deps.Store.GetOutput(rctx, c.Key.Cluster, c.Key.Backend)
		cancel()
		if err != nil || o.Hash() != c.Hash {
			continue // superseded meanwhile: delivery hands on the newer one
		}
		st.offerIfNone(c.Key.Backend, o)
	}
}

// startingOutputs are what a stream starts from: the outputs the store
// holds for the cluster, delivered by this replica or another, each with
// whether it is the one this replica's engine handed on last (so it is
// current, not an older copy). A store that cannot be read gives none.
func (s *Server) startingOutputs(ctx context.Context, cluster string) map[string]startingOutput {
	stored, err := s.outputs(ctx, cluster)
	if err != nil {
		s.log.Warn("read the outputs a stream resumes from", "cluster", cluster, "error", err)
	}
	marks := s.engine.Marks(cluster)
	out := make(map[string]startingOutput, len(stored))
	for b, o := range stored {
		m, ok := marks[b]
		out[b] = startingOutput{snap: o, current: ok && m.Hash == o.Hash()}
	}
	return out
}

// startingOutput is a stored output a stream starts from.
type startingOutput struct {
	snap *snapshot.Snapshot
	// current is true when this replica's engine handed it on last.
	current bool
}

// outputs returns the outputs the store holds for cluster, by backend, of
// the backends this server's translators serve. An error is never an
// empty answer: the caller must not take it for outputs that emptied.
func (s *Server) outputs(ctx context.Context, cluster string) (map[string]*snapshot.Snapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, storeReadTimeout)
	defer cancel()
	all, err := s.deps.Store.ListOutputs(ctx, cluster)
	if err != nil {
		return nil, err
	}
	for b := range all {
		if !s.serves(b) {
			delete(all, b) // of a plugin this server no longer runs
		}
	}
	return all, nil
}

// computedOutputs returns the outputs of a cluster whose outputs this
// replica computes (every cluster with --targets all, its own agents'
// otherwise), for status: each replica reports its own targets. A store
// that cannot be read reports none.
func (s *Server) computedOutputs(ctx context.Context, cluster string) map[string]*snapshot.Snapshot {
	s.mu.Lock()
	_, local := s.streams[cluster]
	s.mu.Unlock()
	if !local && s.opts.Targets == TargetsConnected {
		return nil
	}
	outs, err := s.outputs(ctx, cluster)
	if err != nil {
		s.log.Warn("read outputs for status", "cluster", cluster, "error", err)
	}
	return outs
}
