package server

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	discoveryapi "github.com/meshrelay/meshrelay/api/discovery/v1alpha1"
	"github.com/meshrelay/meshrelay/api/meta"
	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/catalog"
	"github.com/meshrelay/meshrelay/core/engine"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/labels"
)

// Kinds the admin API lists.
const (
	KindClusters     = "clusters"
	KindMeshes       = "meshes"
	KindWorkloads    = "workloads"
	KindDestinations = "destinations"
	KindPolicies     = "policies"
	KindOutputs      = "outputs"
)

// ListKinds are the kinds List accepts, in the order people read them.
var ListKinds = []string{KindClusters, KindMeshes, KindWorkloads, KindDestinations, KindPolicies, KindOutputs}

// maxRequestField bounds each string of an inspection request.
const maxRequestField = 1024

// NormalizeKind returns the list kind a user's word names (plural,
// singular or short form), or "" when it names none.
func NormalizeKind(kind string) string {
	k := strings.ToLower(kind)
	for _, want := range ListKinds {
		if k == want || k+"s" == want || k+"es" == want || (k == "policy" && want == KindPolicies) {
			return want
		}
	}
	return ""
}

// Catalog returns the fleet's discovery objects, derived from every
// cluster's current input.
func (s *Server) Catalog() *catalog.Fleet {
	return s.catalog.Fleet(s.inputs(context.Background()))
}

// catalogInline is how many clusters' changed inputs a List or Describe
// derives itself; more are left to warmCatalog.
const catalogInline = 32

// catalogWarmFor is how long after a read the catalog is kept warm. A
// catalog nobody reads costs nothing: deriving the changed cluster again
// was about a quarter of the server's CPU per input change, and the first
// derivation of a 10,000-cluster fleet 9 CPU-s after start.
const catalogWarmFor = 15 * time.Minute

// currentCatalog returns the fleet's discovery objects for List and
// Describe. While the catalog is warm (read within catalogWarmFor) it
// does not wait for a derivation of many clusters (warmCatalog runs
// those): it answers with the current objects when at most catalogInline
// clusters' inputs changed since the last derivation and none is under
// way, else with those last derived, while warmCatalog derives the rest.
// Cold, its objects may be any age: it derives what changed and waits
// for that, until ctx ends; the catalog is warm once that derivation
// ended, so that a read arriving meanwhile waits for it too instead of
// answering with the old objects.
func (s *Server) currentCatalog(ctx context.Context) (*catalog.Fleet, error) {
	if !s.catalogWarm() {
		fleet, err := s.deriveCatalog(ctx)
		if err == nil {
			s.catalogReadAt.Store(time.Now().UnixNano())
		}
		return fleet, err
	}
	s.catalogReadAt.Store(time.Now().UnixNano())
	fleet, current := s.catalog.Current(s.inputs(ctx), catalogInline)
	if !current {
		s.kickCatalog()
	}
	if fleet == nil {
		return s.deriveCatalog(ctx)
	}
	return fleet, nil
}

// deriveCatalog derives the discovery objects of every input that changed
// and returns the fleet's, or an error when ctx ends first; the
// derivation goes on then, for the next read.
func (s *Server) deriveCatalog(ctx context.Context) (*catalog.Fleet, error) {
	inputs := s.inputs(ctx)
	done := make(chan *catalog.Fleet, 1)
	go func() { done <- s.catalog.Fleet(inputs) }()
	select {
	case fleet := <-done:
		return fleet, nil
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// catalogWarm reports whether the catalog was read within catalogWarmFor.
func (s *Server) catalogWarm() bool {
	warmFor := s.opts.catalogWarmFor
	if warmFor == 0 {
		warmFor = catalogWarmFor
	}
	read := s.catalogReadAt.Load()
	return read != 0 && time.Since(time.Unix(0, read)) < warmFor
}

// kickCatalog asks warmCatalog to derive the discovery objects of the
// inputs that changed, when the catalog is warm.
func (s *Server) kickCatalog() {
	if !s.catalogWarm() {
		return
	}
	select {
	case s.catalogKick <- struct{}{}:
	default:
	}
}

// catalogWarmEvery is the least time between two rounds of warmCatalog.
// A round costs a pass over the fleet's inputs (milliseconds at 10,000
// clusters) besides deriving the clusters that changed, and engine cycles
// come many a second under churn; a List or Describe meanwhile derives up
// to catalogInline changed clusters itself, so it does not wait for the
// next round.
const catalogWarmEvery = time.Second

// warmCatalog derives the discovery objects of every input that changed
// after engine cycles while the catalog is warm, so that List and
// Describe find them derived: a thousand clusters' inputs take seconds
// to derive, one cluster's milliseconds. Kicks during a round or within
// catalogWarmEvery of it are taken together by the next round.
func (s *Server) warmCatalog(ctx context.Context) error {
	every := s.opts.catalogWarmEvery
	if every == 0 {
		every = catalogWarmEvery
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.catalogKick:
			s.Catalog()
			s.catalogRounds.Add(1)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(every):
		}
	}
}

// listFilter is a List request's filter.
type listFilter struct {
	cluster, namespace, backend string
	selector                    labels.Selector
}

func (f listFilter) match(cluster, namespace string, objLabels map[string]string) bool {
	return (f.cluster == "" || f.cluster == cluster) && (f.namespace == "" || f.namespace == namespace) &&
		f.selector.Matches(labels.Set(objLabels))
}

func checkFields(fields ...string) error {
	for _, f := range fields {
		if len(f) > maxRequestField {
			return status.Errorf(codes.InvalidArgument, "a request field is longer than %d bytes", maxRequestField)
		}
	}
	return nil
}

// List serves the admin API's List.
func (s *Server) List(ctx context.Context, req *relayv1.ListRequest) (*relayv1.ListResponse, error) {
	kind, f, err := parseList(req)
	if err != nil {
		return nil, err
	}
	resp := &relayv1.ListResponse{}
	switch kind {
	case KindClusters:
		if resp.Clusters, err = s.listClusters(ctx, f); err != nil {
			return nil, err
		}
	case KindMeshes, KindWorkloads, KindDestinations:
		if err := s.listDiscovery(ctx, kind, f, resp); err != nil {
			return nil, err
		}
	case KindPolicies:
		resp.Policies = s.listPolicies(ctx, f)
	case KindOutputs:
		resp.Outputs = s.outputResources(ctx, outputScope{cluster: f.cluster, backend: f.backend}, func(o *relayv1.OutputResource, _ []byte) bool {
			return f.match(o.Cluster, o.Namespace, o.Labels)
		}, req.GetBodies())
	}
	return resp, nil
}

// parseList checks a List request and returns its kind and filter.
func parseList(req *relayv1.ListRequest) (string, listFilter, error) {
	if err := checkFields(req.GetKind(), req.GetCluster(), req.GetNamespace(), req.GetLabelSelector(), req.GetBackend()); err != nil {
		return "", listFilter{}, err
	}
	kind := NormalizeKind(req.GetKind())
	if kind == "" {
		return "", listFilter{}, status.Errorf(codes.InvalidArgument, "unknown kind %q: want one of %s", req.GetKind(), strings.Join(ListKinds, ", "))
	}
	sel, err := labels.Parse(req.GetLabelSelector())
	if err != nil {
		return "", listFilter{}, status.Errorf(codes.InvalidArgument, "label selector %q: %v", req.GetLabelSelector(), err)
	}
	return kind, listFilter{cluster: req.GetCluster(), namespace: req.GetNamespace(), backend: req.GetBackend(), selector: sel}, nil
}

// listClusters returns the registered clusters matching f. Clusters are
// not namespaced: -n does not apply, as kubectl ignores it for
// cluster-scoped kinds.
func (s *Server) listClusters(ctx context.Context, f listFilter) ([]*relayv1.ClusterStatus, error) {
	cs, err := s.clusterStatuses(ctx)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "list clusters: %v", err)
	}
	return slices.DeleteFunc(cs, func(c *relayv1.ClusterStatus) bool { return !f.match(c.GetName(), f.namespace, c.GetLabels()) }), nil
}

// listDiscovery fills resp with the meshes, workloads or destinations
// matching f.
func (s *Server) listDiscovery(ctx context.Context, kind string, f listFilter, resp *relayv1.ListResponse) error {
	fleet, err := s.currentCatalog(ctx)
	if err != nil {
		return err
	}
	for _, c := range fleet.Clusters {
		switch kind {
		case KindMeshes:
			for _, m := range c.Meshes {
				if f.match(c.Name, m.Spec.Namespace, nil) {
					resp.Meshes = append(resp.Meshes, meshProto(m, c.MeshWorkloads(m.Spec.Type)))
				}
			}
		case KindWorkloads:
			for _, w := range c.Workloads {
				if f.match(c.Name, w.Namespace, w.Labels) {
					resp.Workloads = append(resp.Workloads, workloadProto(w))
				}
			}
		case KindDestinations:
			for _, d := range c.Destinations {
				if f.match(c.Name, d.Namespace, d.Labels) {
					resp.Destinations = append(resp.Destinations, destinationProto(d, fleet))
				}
			}
		}
	}
	// A cluster's workloads come by kind; people read them by name.
	slices.SortStableFunc(resp.Workloads, func(a, b *relayv1.Workload) int {
		return cmp.Or(cmp.Compare(a.Cluster, b.Cluster), cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name), cmp.Compare(a.Kind, b.Kind))
	})
	return nil
}

// listPolicies returns the policies matching f: by namespace, labels, and
// cluster (those that reach it or were defined in it).
func (s *Server) listPolicies(ctx context.Context, f listFilter) []*relayv1.PolicyStatus {
	policyLabels := map[string]map[string]string{}
	for _, src := range s.policySources() {
		policyLabels[src.cluster+"/"+src.res.ID.Kind+"/"+src.res.ID.Namespace+"/"+src.res.ID.Name] = objectLabels(src.res.Body)
	}
	var out []*relayv1.PolicyStatus
	for _, ps := range s.policyStatuses(ctx) {
		inCluster := f.cluster == "" || ps.ref.Cluster == f.cluster || slices.Contains(ps.targets, f.cluster)
		l := policyLabels[ps.ref.Cluster+"/"+ps.ref.Key()]
		if inCluster && (f.namespace == "" || f.namespace == ps.ref.Namespace) && f.selector.Matches(labels.Set(l)) {
			out = append(out, ps.proto())
		}
	}
	return out
}

// objectMeta is the part of an object's metadata inspection reads.
type objectMeta struct {
	Metadata struct {
		Labels      map[string]string `json:"labels"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
}

func objectLabels(body []byte) map[string]string {
	var m objectMeta
	_ = json.Unmarshal(body, &m)
	return m.Metadata.Labels
}

// outputScope narrows outputResources to a cluster, a backend and the
// resources of a policy (by meta.PolicyRef.Key), before any object is
// read; empty fields match everything.
type outputScope struct {
	cluster, backend, policy string
	// clusters, when set, are the only clusters in scope, in the order
	// the outputs are returned.
	clusters []string
	// limit, when above zero, bounds the outputs returned.
	limit int
}

// names returns the names of the clusters in scope, in the order their
// outputs are returned: scope.clusters (each once, those the engine holds)
// when set, else the engine's.
func (scope outputScope) names(held []engine.ClusterInfo) []string {
	var names []string
	if len(scope.clusters) == 0 {
		for _, ci := range held {
			names = append(names, ci.Name)
		}
		return names
	}
	known := make(map[string]bool, len(held))
	for _, ci := range held {
		known[ci.Name] = true
	}
	for _, c := range scope.clusters {
		if known[c] {
			names = append(names, c)
			known[c] = false
		}
	}
	return names
}

// outputResources returns the output objects in scope that keep accepts
// (given the object and its body; nil keeps all), sorted by cluster,
// backend and object, with bodies when asked. What it reads of each object
// comes from the output index (outputindex.go).
func (s *Server) outputResources(ctx context.Context, scope outputScope, keep func(*relayv1.OutputResource, []byte) bool, bodies bool) []*relayv1.OutputResource {
	acks := s.ackStates()
	var out []*relayv1.OutputResource
	for _, name := range scope.names(s.engine.Clusters()) {
		if scope.cluster != "" && name != scope.cluster {
			continue
		}
		for _, o := range s.outputsOf(ctx, name, acks) {
			if scope.backend != "" && o.backend != scope.backend {
				continue
			}
			indexed := s.outputIndex.of(engine.OutputKey{Cluster: name, Backend: o.backend}, o.set)
			if scope.policy != "" && !indexed.has(scope.policy) {
				continue
			}
			for _, r := range indexed.resources {
				if scope.limit > 0 && len(out) >= scope.limit {
					return out
				}
				if scope.policy != "" && !slices.Contains(r.policies, scope.policy) {
					continue
				}
				or := outputResource(name, o.backend, r)
				or.Error = o.ack.errors[r.ID]
				or.Applied = o.applied && or.Error == ""
				if keep != nil && !keep(or, r.Body) {
					continue
				}
				if bodies {
					or.Body = string(r.Body)
				}
				out = append(out, or)
			}
		}
	}
	return out
}

func outputResource(cluster, backend string, r indexedResource) *relayv1.OutputResource {
	return &relayv1.OutputResource{
		Cluster: cluster, Backend: backend, ApiVersion: r.ID.APIVersion(), Kind: r.ID.Kind,
		Namespace: r.ID.Namespace, Name: r.ID.Name, Policies: r.policies, Labels: r.labels,
	}
}

func meshProto(m discoveryapi.Mesh, workloads int) *relayv1.Mesh {
	return &relayv1.Mesh{
		Cluster: m.Spec.Cluster, Name: m.Name, Type: m.Spec.Type, Namespace: m.Spec.Namespace, Version: m.Spec.Version,
		TrustDomain: m.Spec.TrustDomain, Network: m.Spec.Network, EnvoyNodes: m.Spec.EnvoyNodes, Workloads: int32(workloads),
	}
}

// workloadProto returns the admin API's form of a catalog workload. Its
// Labels is the catalog's shared map: neither may be modified.
func workloadProto(sp discoveryapi.WorkloadSpec) *relayv1.Workload {
	return &relayv1.Workload{
		Cluster: sp.Cluster, Namespace: sp.Namespace, Name: sp.Name, Kind: sp.Kind, Labels: sp.Labels,
		ServiceAccount: sp.ServiceAccount, Replicas: sp.Replicas, Localities: sp.Localities, Meshes: sp.Meshes,
		Destinations: sp.Destinations, Endpoints: sp.Endpoints, ReadyEndpoints: sp.ReadyEndpoints,
	}
}

// destinationProto returns the admin API's form of a catalog destination.
// Its Labels is the catalog's shared map: neither may be modified.
func destinationProto(sp discoveryapi.DestinationSpec, fleet *catalog.Fleet) *relayv1.Destination {
	out := &relayv1.Destination{
		Cluster: sp.Cluster, Namespace: sp.Namespace, Name: sp.Name, Labels: sp.Labels, Type: sp.Type,
		Workloads: sp.Workloads, Endpoints: sp.Endpoints, ReadyEndpoints: sp.ReadyEndpoints,
		Meshes: sp.Meshes, ClusterCount: int32(fleet.ServiceClusters(sp.Namespace, sp.Name)),
	}
	for _, p := range sp.Ports {
		out.Ports = append(out.Ports, &relayv1.DestinationPort{Name: p.Name, Port: p.Port, Protocol: p.Protocol, TargetPort: p.TargetPort, AppProtocol: p.AppProtocol})
	}
	return out
}

// notFound is the error of a Describe that found nothing.
func notFound(what, name string) error {
	return status.Errorf(codes.NotFound, "%s %q not found", what, name)
}

// ambiguous is the error of a Describe whose name matched several objects.
func ambiguous(what, name string, candidates []string) error {
	return status.Errorf(codes.InvalidArgument, "%s %q is ambiguous: it matches %s; name one as %s",
		what, name, strings.Join(candidates, ", "), map[bool]string{true: "Kind/namespace/name (the management source's) or Kind/namespace/name@cluster", false: "namespace/name"}[what == "policy"])
}

// splitName splits "a/b/c" into at most want parts, right-aligned: the
// last part is the name.
func splitName(name string, want int) ([]string, bool) {
	parts := strings.Split(name, "/")
	if len(parts) > want || slices.Contains(parts, "") {
		return nil, false
	}
	return append(make([]string, want-len(parts)), parts...), true
}

// DescribeDestination serves the admin API's DescribeDestination.
func (s *Server) DescribeDestination(ctx context.Context, req *relayv1.DescribeRequest) (*relayv1.DestinationDescription, error) {
	if err := checkFields(req.GetName(), req.GetNamespace(), req.GetCluster(), req.GetKind()); err != nil {
		return nil, err
	}
	parts, ok := splitName(req.GetName(), 2)
	if !ok {
		return nil, status.Errorf(codes.InvalidArgument, "destination name %q: want NAME or NAMESPACE/NAME", req.GetName())
	}
	ns, name := cmp.Or(parts[0], req.GetNamespace()), parts[1]
	desc := &relayv1.DestinationDescription{Name: name}
	var namespaces []string
	fleet, err := s.currentCatalog(ctx)
	if err != nil {
		return nil, err
	}
	for _, c := range fleet.Clusters {
		for _, d := range c.Destinations {
			if d.Name == name && (ns == "" || d.Namespace == ns) && (req.GetCluster() == "" || c.Name == req.GetCluster()) {
				desc.Destinations = append(desc.Destinations, destinationProto(d, fleet))
				namespaces = append(namespaces, d.Namespace)
			}
		}
	}
	slices.Sort(namespaces)
	namespaces = slices.Compact(namespaces)
	switch {
	case len(namespaces) == 0:
		return nil, notFound("destination", req.GetName())
	case len(namespaces) > 1:
		var cands []string
		for _, n := range namespaces {
			cands = append(cands, n+"/"+name)
		}
		return nil, ambiguous("destination", req.GetName(), cands)
	}
	desc.Namespace = namespaces[0]
	s.describeBackends(ctx, desc, fleet)
	return desc, nil
}

// describeBackends fills a destination's workloads, selecting policies,
// outputs and diagnostics.
func (s *Server) describeBackends(ctx context.Context, desc *relayv1.DestinationDescription, fleet *catalog.Fleet) {
	clusters := map[string]*relayv1.Destination{}
	for _, d := range desc.Destinations {
		clusters[d.Cluster] = d
	}
	for _, c := range fleet.Clusters {
		d := clusters[c.Name]
		if d == nil {
			continue
		}
		for _, w := range c.Workloads {
			if w.Namespace == d.Namespace && slices.Contains(d.Workloads, w.Kind+"/"+w.Name) {
				desc.Workloads = append(desc.Workloads, workloadProto(w))
			}
		}
	}
	selecting := map[string]bool{}
	for _, src := range s.policySources() {
		if selectsDestination(src, desc.Namespace, desc.Name, clusters, s.clusterLabels) {
			selecting[src.cluster+"/"+policyKey(src.res.ID)] = true
		}
	}
	parents, refs := map[string]bool{}, map[meta.PolicyRef]bool{}
	for _, ps := range s.policyStatuses(ctx) {
		if selecting[ps.ref.Cluster+"/"+ps.ref.Key()] {
			desc.Policies = append(desc.Policies, ps.proto())
			parents[ps.ref.Key()] = true
			refs[ps.ref] = true
		}
	}
	// What was emitted for it: the outputs of the policies selecting it,
	// and the outputs that name its host, such as the ServiceEntries of a
	// remote cluster's Service.
	host := []byte(desc.Name + "." + desc.Namespace + ".svc")
	desc.Outputs = s.outputResources(ctx, outputScope{}, func(o *relayv1.OutputResource, body []byte) bool {
		return slices.ContainsFunc(o.Policies, func(p string) bool { return parents[p] }) || bytes.Contains(body, host)
	}, true)
	desc.Diagnostics = s.diagnostics(func(d meta.Diagnostic) bool {
		return refs[d.Policy] && (d.Cluster == "" || clusters[d.Cluster] != nil)
	})
}

func policyKey(id snapshot.ID) string { return id.Kind + "/" + id.Namespace + "/" + id.Name }

// selectsDestination reports whether a policy selects the Service in one
// of the clusters. A workload cluster's policy is narrowed to its own
// cluster first, as the SDK narrows it.
func selectsDestination(src policySource, namespace, name string, clusters map[string]*relayv1.Destination, labelsOf func(string) map[string]string) bool {
	policies, err := policyv1alpha1.Decode(src.res.Body)
	if err != nil || len(policies) != 1 {
		return false
	}
	p := policies[0]
	if src.cluster != "" && slices.ContainsFunc(policyv1alpha1.ScopeToCluster(p, src.cluster), func(d meta.Diagnostic) bool { return d.Severity.IsError() }) {
		return false
	}
	if vd, ok := p.(*policyv1alpha1.VirtualDestination); ok {
		for _, b := range vd.Spec.Services {
			if b.Namespace == namespace && b.Name == name && clusters[b.Cluster] != nil {
				return true
			}
		}
	}
	for cluster, d := range clusters {
		c := policyv1alpha1.ClusterMeta{Name: cluster, Labels: labelsOf(cluster)}
		if policyv1alpha1.MatchesAny(policyv1alpha1.DestinationSelectorsOf(p), c, namespace, name, d.Labels) {
			return true
		}
	}
	return false
}

// diagnostics returns the engine's diagnostics that keep accepts, as the
// admin API shows them: each names its policy with its source
// (meta.PolicyRef.String), so that a workload cluster's policy and a
// management policy of the same name stay apart.
func (s *Server) diagnostics(keep func(meta.Diagnostic) bool) []*relayv1.Diagnostic {
	var out []*relayv1.Diagnostic
	for _, d := range s.engine.Diagnostics() {
		if !keep(d) {
			continue
		}
		out = append(out, &relayv1.Diagnostic{
			Severity: string(d.Severity), Summary: d.Summary, Detail: d.Detail, Path: d.Path, Cluster: d.Cluster, Plugin: d.Plugin,
			Policy: d.Policy.String(),
		})
	}
	return out
}

// DescribePolicy serves the admin API's DescribePolicy. A policy's full
// name says where it was defined, as meta.PolicyRef.String prints it:
// "Kind/namespace/name" for the management source's and
// "Kind/namespace/name@cluster" for a workload cluster's. A shorter name
// matches the policies of every source; a full name without "@cluster"
// names the management source's policy when there is one, so a workload
// cluster cannot shadow it.
//
// A fleet-wide policy's outputs are in every cluster, a hundred thousand
// objects at a thousand clusters: the request's outline asks for none of
// them, and output_clusters and output_limit for a page. Either way the
// state per cluster is read from the output index (policyOutputClusters)
// without making the outputs.
func (s *Server) DescribePolicy(ctx context.Context, req *relayv1.DescribeRequest) (*relayv1.PolicyDescription, error) {
	q, err := parsePolicyName(req)
	if err != nil {
		return nil, err
	}
	if err := checkFields(req.GetOutputClusters()...); err != nil {
		return nil, err
	}
	if req.GetOutputLimit() < 0 {
		return nil, status.Errorf(codes.InvalidArgument, "output limit %d is negative", req.GetOutputLimit())
	}
	// Only the policy described is folded, its reach and its state per
	// cluster read in one walk of the fleet's outputs.
	sources := s.policySources()
	refs := make([]policyStatus, len(sources))
	for i, src := range sources {
		refs[i] = policyStatus{ref: src.ref()}
	}
	sortPolicyStatuses(refs)
	found, err := q.find(refs)
	if err != nil {
		return nil, err
	}
	src := sources[slices.IndexFunc(sources, func(src policySource) bool { return src.ref() == found.ref })]
	// A workload cluster's policy acts in its own cluster only, so its
	// outputs are there; outputs name their policies without the source.
	scope := outputScope{cluster: found.ref.Cluster, policy: found.ref.Key(), clusters: req.GetOutputClusters(), limit: int(req.GetOutputLimit())}
	rc, clusters := s.policyOutputClusters(ctx, scope)
	ps := s.statusOf(ctx, src, rc)
	desc := &relayv1.PolicyDescription{Status: ps.proto(), Body: string(src.res.Body)}
	switch {
	case req.GetOutline():
		desc.Clusters = clusters
	case len(scope.clusters) == 0 && scope.limit == 0:
		desc.Outputs = s.outputResources(ctx, scope, nil, true)
		desc.Clusters = policyClusters(desc.Outputs)
	default:
		desc.Clusters = clusters
		desc.Outputs = s.outputResources(ctx, scope, nil, true)
	}
	desc.Diagnostics = s.diagnostics(func(d meta.Diagnostic) bool { return d.Policy == ps.ref })
	return desc, nil
}

// policyQuery is the policy a DescribePolicy request names: its name, and
// its kind, namespace and source cluster where given.
type policyQuery struct {
	req                     string
	kind, ns, name, cluster string
}

// parsePolicyName checks a DescribePolicy request and returns the policy it
// names.
func parsePolicyName(req *relayv1.DescribeRequest) (policyQuery, error) {
	if err := checkFields(req.GetName(), req.GetNamespace(), req.GetCluster(), req.GetKind()); err != nil {
		return policyQuery{}, err
	}
	full, source, qualified := strings.Cut(req.GetName(), "@")
	cluster := req.GetCluster()
	switch {
	case qualified && source == "":
		return policyQuery{}, status.Errorf(codes.InvalidArgument, "policy name %q: no cluster after @", req.GetName())
	case qualified && cluster != "" && cluster != source:
		return policyQuery{}, status.Errorf(codes.InvalidArgument, "policy name %q is defined in cluster %s, not in --cluster %s", req.GetName(), source, cluster)
	case qualified:
		cluster = source
	}
	parts, ok := splitName(full, 3)
	if !ok {
		return policyQuery{}, status.Errorf(codes.InvalidArgument, "policy name %q: want NAME, NAMESPACE/NAME or KIND/NAMESPACE/NAME, with @CLUSTER for a workload cluster's", req.GetName())
	}
	return policyQuery{
		req: req.GetName(), kind: cmp.Or(parts[0], req.GetKind()), ns: cmp.Or(parts[1], req.GetNamespace()), name: parts[2], cluster: cluster,
	}, nil
}

// find returns the one policy of statuses q names: a full name without a
// cluster names the management source's policy when there is one.
func (q policyQuery) find(statuses []policyStatus) (policyStatus, error) {
	var found []policyStatus
	for _, ps := range statuses {
		if q.matches(ps.ref) {
			found = append(found, ps)
		}
	}
	if len(found) > 1 && q.kind != "" && q.ns != "" && q.cluster == "" {
		if i := slices.IndexFunc(found, func(ps policyStatus) bool { return ps.ref.Cluster == "" }); i >= 0 {
			found = found[i : i+1]
		}
	}
	switch {
	case len(found) == 0:
		return policyStatus{}, notFound("policy", q.req)
	case len(found) > 1:
		var cands []string
		for _, ps := range found {
			cands = append(cands, ps.ref.String())
		}
		return policyStatus{}, ambiguous("policy", q.req, cands)
	}
	return found[0], nil
}

// matches reports whether ref is a policy q names.
func (q policyQuery) matches(ref meta.PolicyRef) bool {
	return ref.Name == q.name && (q.kind == "" || strings.EqualFold(ref.Kind, q.kind)) && (q.ns == "" || ref.Namespace == q.ns) &&
		(q.cluster == "" || ref.Cluster == q.cluster)
}

// policyClusters folds a policy's outputs into its state per cluster.
func policyClusters(outputs []*relayv1.OutputResource) []*relayv1.PolicyCluster {
	byCluster := map[string]*relayv1.PolicyCluster{}
	var out []*relayv1.PolicyCluster
	for _, o := range outputs {
		pc := byCluster[o.Cluster]
		if pc == nil {
			pc = &relayv1.PolicyCluster{Cluster: o.Cluster, Applied: true}
			byCluster[o.Cluster] = pc
			out = append(out, pc)
		}
		pc.Resources++
		switch {
		case o.Error != "":
			pc.Applied = false
			pc.Errors = append(pc.Errors, fmt.Sprintf("%s %s: %s", o.Kind, strings.TrimPrefix(o.Namespace+"/"+o.Name, "/"), o.Error))
		case !o.Applied:
			pc.Applied, pc.Pending = false, true
		}
	}
	return out
}

// policyOutputClusters walks every cluster's outputs once for the policy
// of scope: it returns the policy's reach, as GetStatus folds it, and
// policyClusters of its outputs in scope (of scope.clusters only, in their
// order, when set), read from the output index without making them.
func (s *Server) policyOutputClusters(ctx context.Context, scope outputScope) (*reach, []*relayv1.PolicyCluster) {
	acks := s.ackStates()
	held := s.engine.Clusters()
	rc := &reach{targets: map[string]bool{}, failed: map[string]bool{}}
	byName := map[string]*relayv1.PolicyCluster{}
	listed := map[string]bool{}
	for _, c := range scope.clusters {
		listed[c] = true
	}
	for _, ci := range held {
		name := ci.Name
		var pc *relayv1.PolicyCluster
		inScope := (scope.cluster == "" || name == scope.cluster) && (len(listed) == 0 || listed[name])
		for _, o := range s.outputsOf(ctx, name, acks) {
			ids := s.outputIndex.of(engine.OutputKey{Cluster: name, Backend: o.backend}, o.set).policyResources()[scope.policy]
			if len(ids) == 0 {
				continue
			}
			rc.record(name, ids, o.applied, o.ack.errors)
			if !inScope {
				continue
			}
			if pc == nil {
				pc = &relayv1.PolicyCluster{Cluster: name, Applied: true}
				byName[name] = pc
			}
			pc.Resources += int32(len(ids))
			for _, id := range ids {
				switch msg := o.ack.errors[id]; {
				case msg != "":
					pc.Applied = false
					pc.Errors = append(pc.Errors, fmt.Sprintf("%s %s: %s", id.Kind, strings.TrimPrefix(id.Namespace+"/"+id.Name, "/"), msg))
				case !o.applied:
					pc.Applied, pc.Pending = false, true
				}
			}
		}
	}
	var out []*relayv1.PolicyCluster
	for _, name := range scope.names(held) {
		if pc := byName[name]; pc != nil {
			out = append(out, pc)
		}
	}
	return rc, out
}

// DescribeCluster serves the admin API's DescribeCluster.
func (s *Server) DescribeCluster(ctx context.Context, req *relayv1.DescribeRequest) (*relayv1.ClusterDescription, error) {
	if err := checkFields(req.GetName()); err != nil {
		return nil, err
	}
	cs, err := s.clusterStatuses(ctx)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "list clusters: %v", err)
	}
	desc := &relayv1.ClusterDescription{}
	for _, c := range cs {
		if c.GetName() == req.GetName() {
			desc.Status = c
		}
	}
	if desc.Status == nil {
		return nil, notFound("cluster", req.GetName())
	}
	fleet, err := s.currentCatalog(ctx)
	if err != nil {
		return nil, err
	}
	for _, c := range fleet.Clusters {
		if c.Name != req.GetName() {
			continue
		}
		for _, m := range c.Meshes {
			desc.Meshes = append(desc.Meshes, meshProto(m, c.MeshWorkloads(m.Spec.Type)))
		}
		desc.Workloads, desc.Destinations = int32(len(c.Workloads)), int32(len(c.Destinations))
	}
	desc.Policies = s.listPolicies(ctx, listFilter{cluster: req.GetName(), selector: labels.Everything()})
	desc.Diagnostics = s.diagnostics(func(d meta.Diagnostic) bool { return d.Cluster == req.GetName() })
	if c, err := s.deps.Store.GetCluster(ctx, req.GetName()); err == nil {
		if d := sharedTokenDiagnostic(c); d != nil {
			desc.Diagnostics = append(desc.Diagnostics, d)
		}
	}
	return desc, nil
}
