package server

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/meshrelay/meshrelay/api/meta"
	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/engine"
	"github.com/meshrelay/meshrelay/core/store"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

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
	for _, ps := range s.policyStatuses(ctx) {
		st.Policies = append(st.Policies, ps.proto())
	}
	st.Trust = s.trust.Statuses()
	st.Version = statusVersion(st)
	return st, nil
}

// statusVersion hashes what st says less the clusters' last-seen times,
// which change at each heartbeat without news, so that a reader polling
// the status (the web UI's event streams) sends it on only when it
// changed.
func statusVersion(st *relayv1.Status) string {
	seen := make([]*timestamppb.Timestamp, len(st.Clusters))
	for i, c := range st.Clusters {
		seen[i], c.LastSeen = c.LastSeen, nil
	}
	data, err := proto.MarshalOptions{Deterministic: true}.Marshal(st)
	for i, c := range st.Clusters {
		c.LastSeen = seen[i]
	}
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:16])
}

// clusterStatuses joins the registry, the streams, the view, the inputs
// and the outputs.
func (s *Server) clusterStatuses(ctx context.Context) ([]*relayv1.ClusterStatus, error) {
	records, err := s.deps.Store.ListClusters(ctx)
	if err != nil {
		return nil, err
	}
	view := map[string]engine.ClusterInfo{}
	for _, ci := range s.engine.Clusters() {
		view[ci.Name] = ci
	}
	acks := s.ackStates()
	out := make([]*relayv1.ClusterStatus, 0, len(records))
	for _, c := range records {
		cs := s.registryStatus(c)
		if in, m, ok := s.input(ctx, c.Name); ok {
			cs.InputVersion = in.Version()
			cs.InputHash = in.Hash().Short()
			cs.InputUpdated = timestamppb.New(m.updated)
			cs.InputResources = int32(in.Len())
		}
		if ci, ok := view[c.Name]; ok {
			cs.Meshes, cs.Stale = ci.Meshes, ci.Stale
		}
		for _, o := range s.outputsOf(ctx, c.Name, acks) {
			cs.Outputs = append(cs.Outputs, &relayv1.OutputStatus{
				Backend: o.backend, Resources: int32(o.set.Len()), Hash: o.set.Hash().Short(),
				Applied: o.applied, Errors: int32(len(o.ack.errors)),
			})
		}
		out = append(out, cs)
	}
	return out, nil
}

// registryStatus is a cluster's status as its registry record and this
// replica's streams say: registered, last seen, revoked, and connected to
// this replica or, lately, to another.
func (s *Server) registryStatus(c store.Cluster) *relayv1.ClusterStatus {
	cs := &relayv1.ClusterStatus{Name: c.Name, Revoked: c.Revoked, Replica: c.Replica, Labels: c.Labels, RegistryVersion: c.Version}
	if !c.Registered.IsZero() {
		cs.Registered = timestamppb.New(c.Registered)
	}
	if !c.LastSeen.IsZero() {
		cs.LastSeen = timestamppb.New(c.LastSeen)
	}
	s.mu.Lock()
	_, local := s.streams[c.Name]
	s.mu.Unlock()
	cs.Connected = local || (c.Replica != "" && c.Replica != s.opts.ServerID && time.Since(c.LastSeen) < freshWindowHeartbeats*s.opts.Heartbeat)
	if local {
		cs.Replica = s.opts.ServerID
	}
	return cs
}

// clusterOutput is one backend's output of a cluster as status and
// inspection show it, with what the cluster's agent said of it.
type clusterOutput struct {
	backend string
	set     *snapshot.Snapshot
	ack     ackState
	// applied says the agent acked this very output.
	applied bool
}

// outputsOf returns the outputs of cluster this replica computes
// (computedOutputs), by backend, each with its agent's ack from acks
// (ackStates).
func (s *Server) outputsOf(ctx context.Context, cluster string, acks map[engine.OutputKey]ackState) []clusterOutput {
	outs := s.computedOutputs(ctx, cluster)
	out := make([]clusterOutput, 0, len(outs))
	for _, b := range slices.Sorted(maps.Keys(outs)) {
		o := outs[b]
		a, acked := acks[engine.OutputKey{Cluster: cluster, Backend: b}]
		out = append(out, clusterOutput{backend: b, set: o, ack: a, applied: acked && a.hash == o.Hash()})
	}
	return out
}

// policyStatus is one policy's folded status.
type policyStatus struct {
	ref      meta.PolicyRef
	state    policyv1alpha1.PolicyState
	targets  []string
	applied  []string
	errors   []string
	warnings []string
	status   policyv1alpha1.PolicyStatus
}

func (p policyStatus) proto() *relayv1.PolicyStatus {
	return &relayv1.PolicyStatus{
		Kind: p.ref.Kind, Namespace: p.ref.Namespace, Name: p.ref.Name, SourceCluster: p.ref.Cluster,
		State: string(p.state), AppliedClusters: int32(len(p.applied)), TargetClusters: int32(len(p.targets)),
		Errors: p.errors, Warnings: p.warnings, Rollout: rolloutText(p.status.Rollout),
	}
}

// policyStatuses folds validation, the plugins' diagnostics and the agents'
// apply results into each policy's status, in three steps: collect what
// the fold reads, fold each policy, order them.
func (s *Server) policyStatuses(ctx context.Context) []policyStatus {
	in := s.collectStatusInputs(ctx)
	out := make([]policyStatus, 0, len(in.sources))
	for _, src := range in.sources {
		out = append(out, in.fold(src))
	}
	sortPolicyStatuses(out)
	return out
}

// statusOf folds the status of src alone, given its reach (rc, as
// outputReaches would find it): what DescribePolicy shows, without
// following every other policy's outputs.
func (s *Server) statusOf(ctx context.Context, src policySource, rc *reach) policyStatus {
	ref := src.ref()
	var diags []meta.Diagnostic
	for _, d := range append(s.engine.Diagnostics(), s.trust.Diagnostics()...) {
		if d.Policy == ref {
			diags = append(diags, d)
		}
	}
	in := &statusInputs{
		reaches:    reaches{ref.Key(): rc},
		diags:      map[meta.PolicyRef][]meta.Diagnostic{ref: diags},
		trustReach: s.trust.Reach,
		rollouts:   s.rollouts.carried(ctx),
	}
	return in.fold(src)
}

// statusInputs is everything folding a policy's status reads.
type statusInputs struct {
	sources []policySource
	// reaches are where each policy's outputs went, by [meta.PolicyRef.Key].
	reaches reaches
	// diags are the plugins' and core's diagnostics by policy, in the order
	// they were reported.
	diags map[meta.PolicyRef][]meta.Diagnostic
	// trustReach returns the clusters a management MeshTrust selects and
	// those where its roots are in place.
	trustReach func(meta.PolicyRef) (targets, applied []string)
	// rollouts are the management policies a staged rollout in progress
	// carries (rollout.go).
	rollouts map[meta.PolicyRef]*policyv1alpha1.PolicyRollout
}

// collectStatusInputs gathers the policies, the outputs' reach and the
// diagnostics once for every policy's fold.
func (s *Server) collectStatusInputs(ctx context.Context) *statusInputs {
	return &statusInputs{
		sources:    s.policySources(),
		reaches:    s.outputReaches(ctx),
		diags:      diagnosticsByPolicy(append(s.engine.Diagnostics(), s.trust.Diagnostics()...)),
		trustReach: s.trust.Reach,
		rollouts:   s.rollouts.carried(ctx),
	}
}

// diagnosticsByPolicy groups diagnostics by the policy they concern,
// keeping their order.
func diagnosticsByPolicy(diags []meta.Diagnostic) map[meta.PolicyRef][]meta.Diagnostic {
	out := map[meta.PolicyRef][]meta.Diagnostic{}
	for _, d := range diags {
		out[d.Policy] = append(out[d.Policy], d)
	}
	return out
}

// reach is where one policy's outputs went: the clusters they target, those
// where the agent has not applied them (yet), and the agents' apply errors.
type reach struct {
	targets, failed map[string]bool
	errors          []string
}

// reaches holds each policy's reach by [meta.PolicyRef.Key].
type reaches map[string]*reach

// outputReaches follows every current output to its parent policies,
// through the output index, which it keeps to the outputs it read.
func (s *Server) outputReaches(ctx context.Context) reaches {
	acks := s.ackStates()
	rs := reaches{}
	seen := map[engine.OutputKey]bool{}
	for _, ci := range s.engine.Clusters() {
		for _, o := range s.outputsOf(ctx, ci.Name, acks) {
			key := engine.OutputKey{Cluster: ci.Name, Backend: o.backend}
			seen[key] = true
			rs.addOutput(ci.Name, s.outputIndex.of(key, o.set), o.applied, o.ack.errors)
		}
	}
	s.outputIndex.retain(func(k engine.OutputKey) bool { return seen[k] })
	return rs
}

// addOutput records that one output set reaches cluster for each policy
// that produced some of its resources. current says the agent acked this
// very set; errs are its apply errors by resource.
func (rs reaches) addOutput(cluster string, o *indexedOutput, current bool, errs map[snapshot.ID]string) {
	for policy, ids := range o.policyResources() {
		rs.of(policy).record(cluster, ids, current, errs)
	}
}

func (rs reaches) of(policy string) *reach {
	rc := rs[policy]
	if rc == nil {
		rc = &reach{targets: map[string]bool{}, failed: map[string]bool{}}
		rs[policy] = rc
	}
	return rc
}

// record notes resources of the policy in cluster: not applied unless
// current, and failed with their apply errors when they have some.
func (rc *reach) record(cluster string, ids []snapshot.ID, current bool, errs map[snapshot.ID]string) {
	rc.targets[cluster] = true
	if !current {
		rc.failed[cluster] = true
		return
	}
	if len(errs) == 0 {
		return
	}
	for _, id := range ids {
		if msg, bad := errs[id]; bad {
			rc.failed[cluster] = true
			rc.errors = append(rc.errors, fmt.Sprintf("%s: apply %s %s/%s: %s", cluster, id.Kind, id.Namespace, id.Name, msg))
		}
	}
}

// fold computes one policy's status from its source and the inputs.
func (in *statusInputs) fold(src policySource) policyStatus {
	ps := policyStatus{ref: src.ref()}
	generation := ps.validate(src.res.Body)
	if src.cluster != "" && ps.ref.Kind == policyv1alpha1.KindRolloutStrategy {
		ps.refuseStrategy()
	}
	invalid := len(ps.errors) > 0
	ps.diagnose(in.diags[ps.ref])
	if ps.ref.Kind == policyv1alpha1.KindMeshTrust && ps.ref.Cluster == "" && in.trustReach != nil {
		ps.targets, ps.applied = in.trustReach(ps.ref)
	}
	ps.addReach(in.reaches[ps.ref.Key()])
	ps.state = decideState(invalid, ps.errors, ps.targets, ps.applied)
	ps.fillStatus(generation)
	if ps.ref.Cluster == "" {
		ps.status.Rollout = in.rollouts[ps.ref]
	}
	return ps
}

// validate decodes and validates the policy, recording its errors, and
// returns its generation (zero when it does not decode).
func (ps *policyStatus) validate(body []byte) int64 {
	policies, err := policyv1alpha1.Decode(body)
	switch {
	case err != nil:
		ps.errors = append(ps.errors, err.Error())
	case len(policies) == 1:
		for _, fe := range policies[0].Validate() {
			ps.errors = append(ps.errors, fe.Error())
			ps.status.Diagnostics = append(ps.status.Diagnostics, policyv1alpha1.DiagnosticOf(meta.Diagnostic{
				Severity: meta.SeverityError, Summary: fe.ErrorBody(), Path: fe.Field}))
		}
		return policies[0].GetGeneration()
	}
	return 0
}

// diagnose records the diagnostics on the policy: each error and warning
// once as text, and every one as a row of the status.
func (ps *policyStatus) diagnose(diags []meta.Diagnostic) {
	for _, d := range diags {
		text := diagnosticText(d)
		if d.Severity.IsError() {
			ps.errors = appendNew(ps.errors, text)
		} else {
			ps.warnings = appendNew(ps.warnings, text)
		}
		ps.status.Diagnostics = append(ps.status.Diagnostics, policyv1alpha1.DiagnosticOf(d))
	}
}

// diagnosticText is how status lists a diagnostic: "path: summary (plugin)".
func diagnosticText(d meta.Diagnostic) string {
	text := d.Summary
	if d.Path != "" {
		text = d.Path + ": " + text
	}
	return text + " (" + cmp.Or(d.Plugin, "engine") + ")"
}

func appendNew(list []string, s string) []string {
	if slices.Contains(list, s) {
		return list
	}
	return append(list, s)
}

// addReach adds the clusters the policy's outputs target, those where they
// applied, and the agents' apply errors, each sorted.
func (ps *policyStatus) addReach(rc *reach) {
	if rc == nil {
		return
	}
	for c := range rc.targets {
		ps.targets = append(ps.targets, c)
		if !rc.failed[c] {
			ps.applied = append(ps.applied, c)
		}
	}
	slices.Sort(ps.targets)
	slices.Sort(ps.applied)
	errs := slices.Sorted(slices.Values(rc.errors))
	ps.errors = append(ps.errors, errs...)
}

// decideState says what a policy's state is: Invalid when it failed
// validation, Failed with any other error, Pending until its outputs applied
// in every cluster they target, else Accepted.
func decideState(invalid bool, errs, targets, applied []string) policyv1alpha1.PolicyState {
	switch {
	case invalid:
		return policyv1alpha1.StateInvalid
	case len(errs) > 0:
		return policyv1alpha1.StateFailed
	case len(targets) > 0 && len(applied) < len(targets):
		return policyv1alpha1.StatePending
	default:
		return policyv1alpha1.StateAccepted
	}
}

// fillStatus sets the status written back to the policy's source.
func (ps *policyStatus) fillStatus(generation int64) {
	ps.status.ObservedGeneration = generation
	ps.status.State = ps.state
	for _, c := range ps.targets {
		cr := policyv1alpha1.ClusterResult{Cluster: c}
		if slices.Contains(ps.applied, c) {
			cr.Applied = 1
		}
		ps.status.Clusters = append(ps.status.Clusters, cr)
	}
}

// sortPolicyStatuses orders statuses by policy: kind, namespace, name and
// source cluster.
func sortPolicyStatuses(out []policyStatus) {
	slices.SortFunc(out, func(a, b policyStatus) int { return a.ref.Compare(b.ref) })
}

// policySource is a policy as its source holds it: the management source
// (cluster empty) or a workload cluster's inputs.
type policySource struct {
	cluster string
	res     snapshot.Resource
}

// ref is the policy's reference: its ID and its source.
func (src policySource) ref() meta.PolicyRef {
	return meta.PolicyRef{Kind: src.res.ID.Kind, Namespace: src.res.ID.Namespace, Name: src.res.ID.Name, Cluster: src.cluster}
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
		for r := range in.Group(policyv1alpha1.GroupName) {
			sources = append(sources, policySource{cluster: name, res: r})
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

// writeStatus writes one policy's status, with a MeshTrust's own fields
// where the writer takes them.
func (s *Server) writeStatus(ctx context.Context, w StatusWriter, ps policyStatus) error {
	ew, ok := w.(interface {
		WriteStatusWith(context.Context, meta.PolicyRef, policyv1alpha1.PolicyStatus, map[string]any) error
	})
	if ps.ref.Kind != policyv1alpha1.KindMeshTrust || !ok {
		return w.WriteStatus(ctx, ps.ref, ps.status)
	}
	return ew.WriteStatusWith(ctx, ps.ref, ps.status, s.trust.KubeStatus(ps.ref))
}

// writePolicyStatus writes each management policy's status back to its
// source, when the source can take it.
func (s *Server) writePolicyStatus(ctx context.Context) {
	w, ok := s.deps.Policies.(StatusWriter)
	if !ok {
		return
	}
	for _, ps := range s.policyStatuses(ctx) {
		if ps.ref.Cluster != "" {
			continue
		}
		if err := s.writeStatus(ctx, w, ps); err != nil {
			s.log.Warn("write policy status", "policy", ps.ref.Key(), "error", err)
		}
	}
}
