package agent

import (
	"context"
	"errors"
	"fmt"

	"github.com/meshrelay/meshrelay/api/snapshot"
)

// GroupSink is a Sink that takes the resources of some API groups only:
// the xDS server takes the xDS resources (group api/xds.Group), the kube
// sink every other group. A Sink that is not a GroupSink takes every
// group.
type GroupSink interface {
	Sink
	// TakesGroup reports whether the sink takes resources of group.
	TakesGroup(group string) bool
}

// ErrNoSink is wrapped by the per-resource error of a resource whose API
// group no sink of the agent takes.
var ErrNoSink = errors.New("no sink of the agent takes its API group")

// Sinks are where the agent's outputs go, routed by what they are, not by
// backend: of every backend's output, each sink gets the resources of the
// API groups it takes ([GroupSink]), all of them when it is a plain Sink.
// A sink gets its part even when that is empty, so that it prunes what the
// backend no longer emits there; a resource no sink takes fails with
// [ErrNoSink]. Sinks is itself a Sink: it applies to every sink in order
// and merges their results, the first error for a resource winning.
type Sinks []Sink

// Apply hands each sink its part of desired and merges the results.
func (ss Sinks) Apply(ctx context.Context, backend string, desired *snapshot.Snapshot, prune bool) (map[snapshot.ID]error, error) {
	out := map[snapshot.ID]error{}
	var errs []error
	for _, s := range ss {
		part, err := ss.part(s, desired)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		res, err := s.Apply(ctx, backend, part, prune)
		if err != nil {
			errs = append(errs, err)
		}
		for id, e := range res {
			if out[id] == nil {
				out[id] = e
			}
		}
	}
	if desired != nil {
		for r := range desired.All() {
			if !ss.taken(r.ID.Group) {
				out[r.ID] = fmt.Errorf("%s: %w", r.ID, ErrNoSink)
			}
		}
	}
	return out, errors.Join(errs...)
}

// part returns the resources of desired that s takes, under desired's
// version: desired itself when it takes them all.
func (Sinks) part(s Sink, desired *snapshot.Snapshot) (*snapshot.Snapshot, error) {
	gs, ok := s.(GroupSink)
	if !ok || desired == nil {
		return desired, nil
	}
	var kept []snapshot.Resource
	for r := range desired.All() {
		if gs.TakesGroup(r.ID.Group) {
			kept = append(kept, r)
		}
	}
	if len(kept) == desired.Len() {
		return desired, nil
	}
	return snapshot.New(desired.Version(), kept)
}

// taken reports whether some sink takes resources of group.
func (ss Sinks) taken(group string) bool {
	for _, s := range ss {
		if gs, ok := s.(GroupSink); !ok || gs.TakesGroup(group) {
			return true
		}
	}
	return false
}

// DeclareKinds tells every sink that prunes by kind ([KindSink]) the
// declared kinds of the groups it takes.
func (ss Sinks) DeclareKinds(backend string, kinds []snapshot.GroupKind) error {
	var errs []error
	for _, s := range ss {
		ks, ok := s.(KindSink)
		if !ok {
			continue
		}
		mine := kinds
		if gs, ok := s.(GroupSink); ok {
			mine = nil
			for _, k := range kinds {
				if gs.TakesGroup(k.Group) {
					mine = append(mine, k)
				}
			}
		}
		errs = append(errs, ks.DeclareKinds(backend, mine))
	}
	return errors.Join(errs...)
}
