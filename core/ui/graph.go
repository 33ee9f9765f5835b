package ui

import (
	"cmp"
	"context"
	"slices"

	"github.com/meshrelay/meshrelay/api/meta"
	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
)

// graph is what the fleet graph draws besides the clusters of the status.
// Destinations are in natural order of cluster, namespace and name.
type graph struct {
	Destinations []graphDestination `json:"destinations"`
	Edges        []graphEdge        `json:"edges"`
	// Stale says a newer graph is being computed: ask again.
	Stale bool `json:"stale,omitempty"`
}

type graphDestination struct {
	Cluster   string `json:"cluster"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// graphEdge is a cross-cluster relation a policy creates: clients in From
// reach Destination ("namespace/name") in To. Policy names the policy with
// its source (meta.PolicyRef.String: "Kind/namespace/name", with
// "@cluster" for a workload cluster's), the name DescribePolicy takes.
type graphEdge struct {
	From        string `json:"from"`
	To          string `json:"to"`
	Destination string `json:"destination"`
	Kind        string `json:"kind"`
	Policy      string `json:"policy"`
}

// size is about how many bytes g holds: its strings, their headers and
// the slices' elements.
func (g *graph) size() int {
	n := 0
	for _, d := range g.Destinations {
		n += 3*16 + len(d.Cluster) + len(d.Namespace) + len(d.Name)
	}
	for _, e := range g.Edges {
		n += 5*16 + len(e.From) + len(e.To) + len(e.Destination) + len(e.Kind) + len(e.Policy)
	}
	return n
}

// graphKey is the graph's key in the UI's shared cache.
const graphKey = "graph"

// cachedGraph returns the fleet graph for a caller whose token ctx
// carries, from the shared cache (sharedCache): a large fleet's graph takes
// a while to compute. A graph computed again meanwhile is marked Stale.
func (s *Server) cachedGraph(ctx context.Context) (*graph, error) {
	if err := s.authorize(ctx); err != nil {
		return nil, err
	}
	v, stale, err := s.shared.get(ctx, graphKey, func(ctx context.Context) (any, int, error) {
		g, err := s.fleetGraph(ctx)
		if err != nil {
			return nil, 0, err
		}
		return g, g.size(), nil
	})
	if err != nil {
		return nil, err
	}
	g := *v.(*graph)
	g.Stale = stale
	return &g, nil
}

// fleetGraph lists the destinations and the cross-cluster edges of the
// management source's VirtualDestinations (from the clusters where their
// outputs go to each backing Service elsewhere) and of AccessPolicies
// (from the clusters their clients name to each selected Service
// elsewhere). A workload cluster's AccessPolicy selects Services of its own
// cluster only, and may admit clients of others; its VirtualDestinations
// are refused. A workload cluster's policy of the same name as a
// management policy is another policy: each keeps its edges.
func (s *Server) fleetGraph(ctx context.Context) (*graph, error) {
	list, err := s.admin.List(ctx, &relayv1.ListRequest{Kind: "destinations"})
	if err != nil {
		return nil, err
	}
	// The event streams' status, when one is fresh: the graph reads its
	// clusters' labels and its policies.
	st, err := s.status.status(ctx, s.admin, s.opts.Poll/2)
	if err != nil {
		return nil, err
	}
	g := &graph{Destinations: []graphDestination{}, Edges: []graphEdge{}}
	labels := map[string]map[string]string{}
	for _, c := range st.GetClusters() {
		labels[c.GetName()] = c.GetLabels()
	}
	for _, d := range list.GetDestinations() {
		g.Destinations = append(g.Destinations, graphDestination{Cluster: d.GetCluster(), Namespace: d.GetNamespace(), Name: d.GetName()})
	}
	// In the order the graph draws them, so the browser need not sort
	// a large fleet's.
	slices.SortFunc(g.Destinations, func(a, b graphDestination) int {
		return cmp.Or(natural(a.Cluster, b.Cluster), natural(a.Namespace, b.Namespace), natural(a.Name, b.Name))
	})
	for _, p := range st.GetPolicies() {
		if p.GetKind() != "AccessPolicy" && (p.GetKind() != "VirtualDestination" || p.GetSourceCluster() != "") {
			continue
		}
		ref := meta.PolicyRef{Kind: p.GetKind(), Namespace: p.GetNamespace(), Name: p.GetName(), Cluster: p.GetSourceCluster()}
		// The graph draws no outputs: a fleet-wide policy has a hundred
		// thousand of them at a thousand clusters.
		desc, err := s.admin.DescribePolicy(ctx, &relayv1.DescribeRequest{Kind: p.GetKind(), Namespace: p.GetNamespace(), Name: p.GetName(), Cluster: p.GetSourceCluster(), Outline: true})
		if err != nil {
			s.log.Debug("describe policy for the graph", "policy", ref.String(), "error", err)
			continue
		}
		g.Edges = append(g.Edges, policyEdges(ref, desc, list.GetDestinations(), labels)...)
	}
	return g, nil
}

// policyEdges returns the cross-cluster edges of the policy ref names.
// clusterLabels holds each registered cluster's labels, which
// clusterSelectors match.
func policyEdges(ref meta.PolicyRef, desc *relayv1.PolicyDescription, dests []*relayv1.Destination, clusterLabels map[string]map[string]string) []graphEdge {
	policies, err := policyv1alpha1.Decode([]byte(desc.GetBody()))
	if err != nil || len(policies) != 1 {
		return nil
	}
	if ref.Cluster != "" && slices.ContainsFunc(policyv1alpha1.ScopeToCluster(policies[0], ref.Cluster), func(d meta.Diagnostic) bool { return d.Severity.IsError() }) {
		return nil
	}
	var from []string
	var to []graphDestination
	switch p := policies[0].(type) {
	case *policyv1alpha1.VirtualDestination:
		for _, c := range desc.GetClusters() {
			from = append(from, c.GetCluster())
		}
		for _, b := range p.Spec.Services {
			to = append(to, graphDestination{Cluster: b.Cluster, Namespace: b.Namespace, Name: b.Name})
		}
		to = append(to, selected(p.Spec.DestinationSelectors, dests, clusterLabels)...)
	case *policyv1alpha1.AccessPolicy:
		for _, c := range p.Spec.From {
			from = append(from, c.Clusters...)
			if c.ClusterSelector != nil {
				for name, labels := range clusterLabels {
					if c.AdmitsCluster(policyv1alpha1.ClusterMeta{Name: name, Labels: labels}) {
						from = append(from, name)
					}
				}
			}
			for _, sa := range c.ServiceAccounts {
				if sa.Cluster != "" {
					from = append(from, sa.Cluster)
				}
			}
		}
		to = selected(p.Spec.DestinationSelectors, dests, clusterLabels)
	default:
		return nil
	}
	slices.Sort(from)
	from = slices.Compact(from)
	var edges []graphEdge
	for _, d := range to {
		for _, c := range from {
			if c != d.Cluster {
				edges = append(edges, graphEdge{From: c, To: d.Cluster, Destination: d.Namespace + "/" + d.Name, Kind: ref.Kind, Policy: ref.String()})
			}
		}
	}
	return edges
}

// selected returns the destinations a policy's selectors select.
func selected(sels []policyv1alpha1.DestinationSelector, dests []*relayv1.Destination, clusterLabels map[string]map[string]string) []graphDestination {
	var out []graphDestination
	for _, d := range dests {
		c := policyv1alpha1.ClusterMeta{Name: d.GetCluster(), Labels: clusterLabels[d.GetCluster()]}
		if policyv1alpha1.MatchesAny(sels, c, d.GetNamespace(), d.GetName(), d.GetLabels()) {
			out = append(out, graphDestination{Cluster: d.GetCluster(), Namespace: d.GetNamespace(), Name: d.GetName()})
		}
	}
	return out
}
