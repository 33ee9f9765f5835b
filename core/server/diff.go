package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/pluginhost"
	"github.com/meshrelay/meshrelay/core/preview"
	"github.com/meshrelay/meshrelay/core/server/trust"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// diffTimeout bounds one diff: two translations of the whole fleet.
const diffTimeout = 2 * time.Minute

// errDiffBusy refuses a diff while another runs: each holds a second view
// of the fleet in every plugin while it runs.
var errDiffBusy = status.Error(codes.ResourceExhausted, "another diff is running; try again when it is done")

// Diff previews a change of the management source's policies over every
// cluster, with the installed plugins on scratch sessions; it changes
// nothing.
func (a *admin) Diff(ctx context.Context, req *relayv1.DiffRequest) (*relayv1.DiffResponse, error) {
	if err := a.authorize(ctx); err != nil {
		return nil, err
	}
	change, err := diffChange(req)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	select {
	case a.s.diffs <- struct{}{}:
		defer func() { <-a.s.diffs }()
	default:
		return nil, errDiffBusy
	}
	ctx, cancel := context.WithTimeout(ctx, diffTimeout)
	defer cancel()
	fleet, err := a.s.previewFleet(ctx)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "read the fleet: %v", err)
	}
	translators, closeAll, err := a.s.scratchTranslators(ctx)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "open plugin sessions: %v", err)
	}
	defer closeAll()
	rep, err := preview.Run(ctx, translators, fleet, change)
	switch {
	case errors.Is(err, preview.ErrChange):
		return nil, status.Error(codes.InvalidArgument, err.Error())
	case err != nil:
		return nil, status.Errorf(codes.Unavailable, "diff: %v", err)
	}
	body, err := json.Marshal(rep)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "encode the diff: %v", err)
	}
	return &relayv1.DiffResponse{Report: body}, nil
}

// diffChange decodes a diff request.
func diffChange(req *relayv1.DiffRequest) (preview.Change, error) {
	var c preview.Change
	for _, p := range req.GetUpserts() {
		r, err := snapshot.ResourceFromProto(p)
		if err != nil {
			return c, fmt.Errorf("upsert: %w", err)
		}
		c.Upserts = append(c.Upserts, r)
	}
	for _, p := range req.GetDeletes() {
		id, err := snapshot.IDFromProto(p)
		if err != nil {
			return c, fmt.Errorf("delete: %w", err)
		}
		c.Deletes = append(c.Deletes, id)
	}
	return c, nil
}

// previewFleet returns every member's input and the policies the
// translators see now. An input that cannot be read fails the preview: a
// diff over part of the fleet would say nothing changes where it cannot
// know.
func (s *Server) previewFleet(ctx context.Context) (preview.Fleet, error) {
	s.mu.Lock()
	names := slices.Sorted(maps.Keys(s.fleet))
	policies := s.policies
	s.mu.Unlock()
	fleet := preview.Fleet{Inputs: make(map[string]*snapshot.Snapshot, len(names)), Labels: make(map[string]map[string]string, len(names))}
	if policies != nil {
		fleet.Policies = filterSnapshot(policies, func(r snapshot.Resource) bool { return !trust.IsPolicy(r) })
	}
	for _, name := range names {
		rctx, cancel := context.WithTimeout(ctx, storeReadTimeout)
		in, err := s.deps.Store.GetInput(rctx, name)
		cancel()
		if err != nil {
			return preview.Fleet{}, fmt.Errorf("input of %s: %w", name, err)
		}
		fleet.Inputs[name] = in
		fleet.Labels[name] = s.clusterLabels(name)
	}
	return fleet, nil
}

// scratchTranslators opens a scratch session with every translator, so a
// preview leaves what the engine's sessions hold alone. A translator that
// cannot open one fails the preview.
func (s *Server) scratchTranslators(ctx context.Context) ([]pluginhost.Translator, func(), error) {
	var out []pluginhost.Translator
	var opened []*pluginhost.Scratch
	closeAll := func() {
		for _, sc := range opened {
			sc.Close()
		}
	}
	for _, t := range s.deps.Translators {
		st, ok := t.(pluginhost.Scratcher)
		if !ok {
			closeAll()
			return nil, nil, fmt.Errorf("translator %q cannot open a scratch session", t.Name())
		}
		sc, err := st.Scratch(ctx)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		opened = append(opened, sc)
		out = append(out, sc)
	}
	return out, closeAll, nil
}
