package server

import (
	"context"
	"errors"
	"time"

	"github.com/meshrelay/meshrelay/core/store"
)

// watchStore follows other replicas' writes so this replica translates with
// the whole fleet: their clusters' inputs, and deregistrations.
func (s *Server) watchStore(ctx context.Context) error {
	for {
		events, err := s.deps.Store.Watch(ctx)
		if err != nil {
			s.log.Warn("watch store; retrying", "error", err)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(time.Second):
				continue
			}
		}
		for ev := range events {
			s.handleStoreEvent(ctx, ev)
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}

func (s *Server) handleStoreEvent(ctx context.Context, ev store.Event) {
	// This replica's own writes need no reload; a resync does, whoever
	// announces it: the store announces its own after its change feed
	// reconnects (Redis restarted, or this replica was cut off from it),
	// and other replicas' writes were missed meanwhile.
	if ev.Replica == s.opts.ServerID && ev.Kind != store.EventResync {
		return
	}
	switch ev.Kind {
	case store.EventInput:
		s.reloadInput(ctx, ev.Cluster)
	case store.EventCluster:
		c, err := s.deps.Store.GetCluster(ctx, ev.Cluster)
		switch {
		case errors.Is(err, store.ErrNotFound) || (err == nil && c.Revoked):
			s.forgetCluster(ctx, ev.Cluster)
		case err == nil:
			s.setLabels(ev.Cluster, c.Labels)
		}
	case store.EventResync:
		clusters, err := s.deps.Store.ListClusters(ctx)
		if err != nil {
			s.log.Warn("resync from store", "error", err)
			return
		}
		for _, c := range clusters {
			if c.Revoked {
				s.forgetCluster(ctx, c.Name)
				continue
			}
			s.reloadInput(ctx, c.Name)
			s.setLabels(c.Name, c.Labels)
		}
	}
}

// reloadInput takes a cluster's input from the store into the fleet view
// when it is not the one this replica last took and the cluster's agent is
// not connected here.
// A revoked cluster's input is not taken: a replica that was cut off from
// the store may write it back for a moment before it learns of the
// deregistration.
func (s *Server) reloadInput(ctx context.Context, cluster string) {
	if c, err := s.deps.Store.GetCluster(ctx, cluster); err == nil && c.Revoked {
		return
	}
	snap, err := s.deps.Store.GetInput(ctx, cluster)
	if err != nil {
		if !errors.Is(err, store.ErrNotFound) {
			s.log.Warn("load input from store", "cluster", cluster, "error", err)
		}
		return
	}
	s.mu.Lock()
	_, local := s.streams[cluster]
	cur, has := s.fleet[cluster]
	s.mu.Unlock()
	if local || (has && cur.hash == snap.Hash()) {
		return
	}
	s.join(cluster, snap.Hash(), false)
	s.markFresh(cluster)
}
