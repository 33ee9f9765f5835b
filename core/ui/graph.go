package ui

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

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

// Bounds of the graph's computation: how long a graph is served as
// current, and how long one computation may take.
const (
	graphMaxAge  = 5 * time.Second
	graphTimeout = 2 * time.Minute
)

// graphCache shares the fleet graph among viewers. A large fleet's graph
// takes seconds to compute (each policy's description reads the fleet's
// outputs), so the graph is computed at most once at a time, a graph
// younger than graphMaxAge is served as it is, and an older one is served
// marked Stale while a new one is computed in the background. Only the
// first graph is waited for.
type graphCache struct {
	mu  sync.Mutex
	g   *graph
	err error
	at  time.Time
	// running is closed when the computation under way ends; nil when
	// none is.
	running chan struct{}
}

// get returns the fleet graph for a caller whose token ctx carries: the
// token is checked whatever the cache holds.
func (c *graphCache) get(ctx context.Context, s *Server) (*graph, error) {
	if _, err := s.admin.ListClusters(ctx, &relayv1.ListClustersRequest{}); err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.g != nil && time.Since(c.at) < graphMaxAge {
		defer c.mu.Unlock()
		return c.g, nil
	}
	if c.running == nil {
		c.running = make(chan struct{})
		// The computation outlives the request that started it, bounded
		// by graphTimeout; it keeps the request's token.
		go c.compute(context.WithoutCancel(ctx), s, c.running)
	}
	running := c.running
	if c.g != nil {
		stale := *c.g
		stale.Stale = true
		c.mu.Unlock()
		return &stale, nil
	}
	c.mu.Unlock()
	select {
	case <-running:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.g == nil {
		return nil, c.err
	}
	return c.g, nil
}

func (c *graphCache) compute(ctx context.Context, s *Server, done chan struct{}) {
	ctx, cancel := context.WithTimeout(ctx, graphTimeout)
	defer cancel()
	g, err := s.fleetGraph(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		c.g, c.at = g, time.Now()
	} else {
		s.log.Debug("compute the fleet graph", "error", err)
	}
	c.err = err
	c.running = nil
	close(done)
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
	st, err := s.admin.GetStatus(ctx, &relayv1.GetStatusRequest{})
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
		desc, err := s.admin.DescribePolicy(ctx, &relayv1.DescribeRequest{Kind: p.GetKind(), Namespace: p.GetNamespace(), Name: p.GetName(), Cluster: p.GetSourceCluster()})
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
