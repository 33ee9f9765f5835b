package server

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/engine"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// policiesAnnotation lists an output object's parent policies as
// "Kind/namespace/name", comma separated; the SDK stamps it.
const policiesAnnotation = "meshrelay.io/policies"

// PolicyRef names a policy and where it was defined.
type PolicyRef struct {
	Kind, Namespace, Name string
	// SourceCluster is empty for the management source.
	SourceCluster string
}

func (r PolicyRef) key() string { return r.Kind + "/" + r.Namespace + "/" + r.Name }

// Status returns the fleet's status as the admin API reports it.
func (s *Server) Status(ctx context.Context) (*relayv1.Status, error) {
	clusters, err := s.clusterStatuses(ctx)
	if err != nil {
		return nil, err
	}
	st := &relayv1.Status{ServerId: s.opts.ServerID, Clusters: clusters}
	state, herr := s.storeHealth()
	st.Store = state
	if state != "ok" {
		st.Store += ": " + errString(herr)
	}
	s.mu.Lock()
	st.SafeMode = s.safe.on
	st.WaitingFor = s.safe.waitingList()
	s.mu.Unlock()
	for _, p := range s.engine.Status() {
		st.Plugins = append(st.Plugins, &relayv1.PluginStatus{Name: p.Name, Backends: p.Backends, Healthy: p.Healthy, Error: p.Error})
	}
	for _, ps := range s.policyStatuses() {
		st.Policies = append(st.Policies, ps.proto())
	}
	st.Trust = s.trust.statuses()
	return st, nil
}

// clusterStatuses joins the registry, the streams and the view.
func (s *Server) clusterStatuses(ctx context.Context) ([]*relayv1.ClusterStatus, error) {
	records, err := s.deps.Store.ListClusters(ctx)
	if err != nil {
		return nil, err
	}
	view := map[string]engine.ClusterInfo{}
	for _, ci := range s.engine.Clusters() {
		view[ci.Name] = ci
	}
	var out []*relayv1.ClusterStatus
	for _, c := range records {
		cs := &relayv1.ClusterStatus{Name: c.Name, Revoked: c.Revoked, Replica: c.Replica}
		if !c.Registered.IsZero() {
			cs.Registered = timestamppb.New(c.Registered)
		}
		if !c.LastSeen.IsZero() {
			cs.LastSeen = timestamppb.New(c.LastSeen)
		}
		s.mu.Lock()
		_, local := s.streams[c.Name]
		acks := make(map[string]ackState)
		for k, a := range s.acks {
			if k.Cluster == c.Name {
				acks[k.Backend] = a
			}
		}
		s.mu.Unlock()
		cs.Connected = local || (c.Replica != "" && c.Replica != s.opts.ServerID && time.Since(c.LastSeen) < freshWindowHeartbeats*s.opts.Heartbeat)
		if local {
			cs.Replica = s.opts.ServerID
		}
		if in, m, ok := s.input(ctx, c.Name); ok {
			cs.InputVersion = in.Version()
			cs.InputHash = in.Hash().Short()
			cs.InputUpdated = timestamppb.New(m.updated)
			cs.InputResources = int32(in.Len())
		}
		if ci, ok := view[c.Name]; ok {
			cs.Meshes, cs.Stale = ci.Meshes, ci.Stale
		}
		outs := s.engine.Outputs(c.Name)
		for _, b := range slices.Sorted(mapsKeys(outs)) {
			o := outs[b]
			a, acked := acks[b]
			cs.Outputs = append(cs.Outputs, &relayv1.OutputStatus{
				Backend: b, Resources: int32(o.Snapshot.Len()), Hash: o.Snapshot.Hash().Short(),
				Applied: acked && a.hash == o.Snapshot.Hash(), Errors: int32(len(a.errors)),
			})
		}
		out = append(out, cs)
	}
	return out, nil
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// policyStatus is one policy's folded status.
type policyStatus struct {
	ref      PolicyRef
	state    policyv1alpha1.PolicyState
	targets  []string
	applied  []string
	errors   []string
	warnings []string
	status   policyv1alpha1.PolicyStatus
}

func (p policyStatus) proto() *relayv1.PolicyStatus {
	return &relayv1.PolicyStatus{
		Kind: p.ref.Kind, Namespace: p.ref.Namespace, Name: p.ref.Name, SourceCluster: p.ref.SourceCluster,
		State: string(p.state), AppliedClusters: int32(len(p.applied)), TargetClusters: int32(len(p.targets)),
		Errors: p.errors, Warnings: p.warnings,
	}
}

// policyStatuses folds validation, the plugins' diagnostics and the agents'
// apply results into each policy's status.
func (s *Server) policyStatuses() []policyStatus {
	sources := s.policySources()
	acks := s.ackStates()

	// Which clusters' outputs each policy reaches, and where they applied.
	type reach struct {
		targets, failed map[string]bool
		errors          []string
	}
	reaches := map[string]*reach{}
	parents := s.parentIndex()
	for _, ci := range s.engine.Clusters() {
		for backend, o := range s.engine.Outputs(ci.Name) {
			a, acked := acks[engine.OutputKey{Cluster: ci.Name, Backend: backend}]
			current := acked && a.hash == o.Snapshot.Hash()
			for r := range o.Snapshot.All() {
				for _, parent := range parents.of(r) {
					rc := reaches[parent]
					if rc == nil {
						rc = &reach{targets: map[string]bool{}, failed: map[string]bool{}}
						reaches[parent] = rc
					}
					rc.targets[ci.Name] = true
					if !current {
						rc.failed[ci.Name] = true
					} else if msg, bad := a.errors[r.ID]; bad {
						rc.failed[ci.Name] = true
						rc.errors = append(rc.errors, fmt.Sprintf("%s: apply %s %s/%s: %s", ci.Name, r.ID.Kind, r.ID.Namespace, r.ID.Name, msg))
					}
				}
			}
		}
	}
	parents.done()
	diags := append(s.engine.Diagnostics(), s.trust.diagnostics()...)

	var out []policyStatus
	for _, src := range sources {
		ps := policyStatus{ref: PolicyRef{Kind: src.res.ID.Kind, Namespace: src.res.ID.Namespace, Name: src.res.ID.Name, SourceCluster: src.cluster}}
		var generation int64
		policies, err := policyv1alpha1.Decode(src.res.Body)
		switch {
		case err != nil:
			ps.errors = append(ps.errors, err.Error())
		case len(policies) == 1:
			generation = policies[0].GetGeneration()
			for _, fe := range policies[0].Validate() {
				ps.errors = append(ps.errors, fe.Error())
				ps.status.Diagnostics = append(ps.status.Diagnostics, policyv1alpha1.Diagnostic{
					Severity: policyv1alpha1.SeverityError, Summary: fe.ErrorBody(), Path: fe.Field})
			}
		}
		invalid := len(ps.errors) > 0
		for _, d := range diags {
			if d.Policy.Kind != ps.ref.Kind || d.Policy.Namespace != ps.ref.Namespace || d.Policy.Name != ps.ref.Name || d.Policy.Cluster != ps.ref.SourceCluster {
				continue
			}
			text := d.Summary
			if d.Path != "" {
				text = d.Path + ": " + text
			}
			text += " (" + cmp.Or(d.Plugin, "engine") + ")"
			sev := policyv1alpha1.SeverityWarning
			if strings.EqualFold(d.Severity, "error") {
				sev = policyv1alpha1.SeverityError
				if !slices.Contains(ps.errors, text) {
					ps.errors = append(ps.errors, text)
				}
			} else if !slices.Contains(ps.warnings, text) {
				ps.warnings = append(ps.warnings, text)
			}
			ps.status.Diagnostics = append(ps.status.Diagnostics, policyv1alpha1.Diagnostic{
				Severity: sev, Summary: d.Summary, Detail: d.Detail, Path: d.Path, Cluster: d.Cluster, Plugin: d.Plugin})
		}
		if ps.ref.Kind == policyv1alpha1.KindMeshTrust && ps.ref.SourceCluster == "" {
			ps.targets, ps.applied = s.trust.reach(ps.ref)
		}
		if rc := reaches[ps.ref.key()]; rc != nil {
			for c := range rc.targets {
				ps.targets = append(ps.targets, c)
				if !rc.failed[c] {
					ps.applied = append(ps.applied, c)
				}
			}
			slices.Sort(ps.targets)
			slices.Sort(ps.applied)
			slices.Sort(rc.errors)
			ps.errors = append(ps.errors, rc.errors...)
		}
		switch {
		case invalid:
			ps.state = policyv1alpha1.StateInvalid
		case len(ps.errors) > 0:
			ps.state = policyv1alpha1.StateFailed
		case len(ps.targets) > 0 && len(ps.applied) < len(ps.targets):
			ps.state = policyv1alpha1.StatePending
		default:
			ps.state = policyv1alpha1.StateAccepted
		}
		ps.status.ObservedGeneration = generation
		ps.status.State = ps.state
		for _, c := range ps.targets {
			cr := policyv1alpha1.ClusterResult{Cluster: c}
			if slices.Contains(ps.applied, c) {
				cr.Applied = 1
			}
			ps.status.Clusters = append(ps.status.Clusters, cr)
		}
		out = append(out, ps)
	}
	slices.SortFunc(out, func(a, b policyStatus) int {
		return cmp.Or(cmp.Compare(a.ref.Kind, b.ref.Kind), cmp.Compare(a.ref.Namespace, b.ref.Namespace),
			cmp.Compare(a.ref.Name, b.ref.Name), cmp.Compare(a.ref.SourceCluster, b.ref.SourceCluster))
	})
	return out
}

// policySource is a policy as its source holds it: the management source
// (cluster empty) or a workload cluster's inputs.
type policySource struct {
	cluster string
	res     snapshot.Resource
}

// policySources returns every policy of the management source and of the
// workload clusters' inputs.
func (s *Server) policySources() []policySource {
	var sources []policySource
	s.mu.Lock()
	for r := range s.policies.All() {
		sources = append(sources, policySource{res: r})
	}
	s.mu.Unlock()
	for name, in := range s.inputs(context.Background()) {
		for r := range in.All() {
			if r.ID.Group == policyv1alpha1.GroupName {
				sources = append(sources, policySource{cluster: name, res: r})
			}
		}
	}
	return sources
}

// ackStates returns a copy of what the agents said about their outputs.
func (s *Server) ackStates() map[engine.OutputKey]ackState {
	s.mu.Lock()
	defer s.mu.Unlock()
	acks := make(map[engine.OutputKey]ackState, len(s.acks))
	for k, v := range s.acks {
		acks[k] = v
	}
	return acks
}

// parentIndex remembers the parent policies of output resources by content
// hash, so that folding status does not decode every output object each
// time. Each fold keeps only the entries it used.
type parentIndex struct {
	s          *Server
	prev, next map[snapshot.Hash][]string
}

func (s *Server) parentIndex() *parentIndex {
	s.mu.Lock()
	defer s.mu.Unlock()
	return &parentIndex{s: s, prev: s.parents, next: make(map[snapshot.Hash][]string, len(s.parents))}
}

func (p *parentIndex) of(r snapshot.Resource) []string {
	if ps, ok := p.next[r.Hash]; ok {
		return ps
	}
	ps, ok := p.prev[r.Hash]
	if !ok {
		ps = parentsOf(r)
	}
	p.next[r.Hash] = ps
	return ps
}

// done keeps the entries this fold used for the next one.
func (p *parentIndex) done() {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	p.s.parents = p.next
}

// parentsOf returns the parent policies an output resource names.
func parentsOf(r snapshot.Resource) []string {
	var obj struct {
		Metadata struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(r.Body, &obj); err != nil {
		return nil
	}
	v := obj.Metadata.Annotations[policiesAnnotation]
	if v == "" {
		return nil
	}
	return strings.Split(v, ",")
}

// writeStatus writes one policy's status, with a MeshTrust's own fields
// where the writer takes them.
func (s *Server) writeStatus(ctx context.Context, w StatusWriter, ps policyStatus) error {
	ew, ok := w.(interface {
		WriteStatusWith(context.Context, PolicyRef, policyv1alpha1.PolicyStatus, map[string]any) error
	})
	if ps.ref.Kind != policyv1alpha1.KindMeshTrust || !ok {
		return w.WriteStatus(ctx, ps.ref, ps.status)
	}
	return ew.WriteStatusWith(ctx, ps.ref, ps.status, s.trust.kubeStatus(ps.ref))
}

// writePolicyStatus writes each management policy's status back to its
// source, when the source can take it.
func (s *Server) writePolicyStatus(ctx context.Context) {
	w, ok := s.deps.Policies.(StatusWriter)
	if !ok {
		return
	}
	for _, ps := range s.policyStatuses() {
		if ps.ref.SourceCluster != "" {
			continue
		}
		if err := s.writeStatus(ctx, w, ps); err != nil {
			s.log.Warn("write policy status", "policy", ps.ref.key(), "error", err)
		}
	}
}
