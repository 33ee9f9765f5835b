package v1alpha1

import (
	"fmt"
	"slices"

	"github.com/meshrelay/meshrelay/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// ClusterMeta is what a cluster selector looks at: a registered cluster's
// name and its labels in the server's registry.
type ClusterMeta struct {
	Name   string
	Labels map[string]string
}

// namedOrLabeled reports whether c is one of names or its labels match sel
// (the union of the two); an invalid selector matches nothing.
func namedOrLabeled(names []string, sel *metav1.LabelSelector, c ClusterMeta) bool {
	if slices.Contains(names, c.Name) {
		return true
	}
	if sel == nil {
		return false
	}
	ls, err := metav1.LabelSelectorAsSelector(sel)
	return err == nil && ls.Matches(labels.Set(c.Labels))
}

// AdmitsCluster reports whether the selector's cluster fields admit c,
// whatever its other fields: c is one of Clusters or its labels match
// ClusterSelector, or neither is set.
func (s *DestinationSelector) AdmitsCluster(c ClusterMeta) bool {
	return (len(s.Clusters) == 0 && s.ClusterSelector == nil) || namedOrLabeled(s.Clusters, s.ClusterSelector, c)
}

// Matches reports whether the Service namespace/name with labels, in
// cluster c, matches the selector: each non-empty field must match.
func (s *DestinationSelector) Matches(c ClusterMeta, namespace, name string, labels map[string]string) bool {
	if len(s.Namespaces) > 0 && !slices.Contains(s.Namespaces, namespace) {
		return false
	}
	if len(s.Names) > 0 && !slices.Contains(s.Names, name) {
		return false
	}
	for k, v := range s.Labels {
		if labels[k] != v {
			return false
		}
	}
	return s.AdmitsCluster(c)
}

// MatchesAny reports whether the Service matches one of the selectors, as
// [DestinationSelector.Matches] decides. An empty list matches nothing.
func MatchesAny(sels []DestinationSelector, c ClusterMeta, namespace, name string, labels map[string]string) bool {
	return slices.ContainsFunc(sels, func(s DestinationSelector) bool { return s.Matches(c, namespace, name, labels) })
}

// RestrictsClusters reports whether the selector's cluster fields narrow
// its clients to some clusters: it sets Clusters or ClusterSelector.
func (s *ClientSelector) RestrictsClusters() bool {
	return len(s.Clusters) > 0 || s.ClusterSelector != nil
}

// AdmitsCluster reports whether the selector's cluster fields admit the
// clients of cluster c, whatever its other fields: c is one of Clusters
// or its labels match ClusterSelector, or neither is set. A selector
// whose fields match no cluster admits no client: unlike an unset field,
// it is never read as "any cluster".
func (s *ClientSelector) AdmitsCluster(c ClusterMeta) bool {
	return !s.RestrictsClusters() || namedOrLabeled(s.Clusters, s.ClusterSelector, c)
}

// SelectsCluster reports whether cluster c is a member: one of Clusters,
// or its labels match ClusterSelector. Membership is explicit: a spec that
// sets neither selects nothing.
func (s *MeshTrustSpec) SelectsCluster(c ClusterMeta) bool {
	return namedOrLabeled(s.Clusters, s.ClusterSelector, c)
}

// DestinationSelectorsOf returns the destination selectors of p: those of
// a TrafficPolicy, an AccessPolicy or a VirtualDestination, none for
// another kind. A VirtualDestination's explicit Services are not selectors.
func DestinationSelectorsOf(p Policy) []DestinationSelector {
	switch p := p.(type) {
	case *TrafficPolicy:
		return p.Spec.DestinationSelectors
	case *AccessPolicy:
		return p.Spec.DestinationSelectors
	case *VirtualDestination:
		return p.Spec.DestinationSelectors
	}
	return nil
}

// ScopeToCluster confines a policy defined in a workload cluster to that
// cluster's own destinations: the tenancy boundary between clusters. The
// management source's policies are fleet-wide; a workload cluster's may
// change routing and authorization in that cluster only.
//
//   - Destination selectors are narrowed to the cluster: a selector with no
//     clusters selects in the source cluster only; other clusters named in
//     a selector are dropped with a warning, and so is a clusterSelector
//     (a selector that named its clusters by label only selects nothing),
//     and a policy left with no selector is not applied.
//   - A TrafficPolicy may route and mirror only to Services of its own
//     cluster; a VirtualDestination, which changes every cluster's routing,
//     and a MeshTrust, which sets every selected cluster's root of trust,
//     must come from the management source.
//
// It returns the diagnostics, errors when the policy must not be applied;
// their Policy is left for the caller to fill in. p is changed in place,
// so it must be the caller's own copy.
func ScopeToCluster(p Policy, cluster string) []meta.Diagnostic {
	var diags []meta.Diagnostic
	narrow := func(sels []DestinationSelector) []DestinationSelector {
		var kept []DestinationSelector
		for i, sel := range sels {
			path := fmt.Sprintf("spec.destinationSelectors[%d].clusters", i)
			outside := slices.DeleteFunc(slices.Clone(sel.Clusters), func(c string) bool { return c == cluster })
			if len(outside) > 0 {
				diags = append(diags, scopeDiag(meta.SeverityWarning, path, "clusters %v are outside the tenancy of cluster %q, where this policy was defined; it applies to %q only (define it in the management source to select other clusters)", outside, cluster, cluster))
			}
			if sel.ClusterSelector != nil {
				diags = append(diags, scopeDiag(meta.SeverityWarning, fmt.Sprintf("spec.destinationSelectors[%d].clusterSelector", i), "a clusterSelector selects clusters outside the tenancy of cluster %q, where this policy was defined; it is ignored (define the policy in the management source to select clusters by label)", cluster))
			}
			if (len(sel.Clusters) > 0 || sel.ClusterSelector != nil) && len(outside) == len(sel.Clusters) {
				continue
			}
			sel.Clusters, sel.ClusterSelector = []string{cluster}, nil
			kept = append(kept, sel)
		}
		if len(sels) > 0 && len(kept) == 0 {
			diags = append(diags, scopeDiag(meta.SeverityError, "spec.destinationSelectors", "selects no destination in cluster %q, where it was defined, so it is not applied", cluster))
		}
		return kept
	}
	switch p := p.(type) {
	case *AccessPolicy:
		p.Spec.DestinationSelectors = narrow(p.Spec.DestinationSelectors)
	case *TrafficPolicy:
		p.Spec.DestinationSelectors = narrow(p.Spec.DestinationSelectors)
		diags = append(diags, foreignDestinations(p, cluster)...)
	case *VirtualDestination:
		diags = append(diags, scopeDiag(meta.SeverityError, "", "a VirtualDestination changes the routing of every cluster, so it must be defined in the management source, not in cluster %q", cluster))
	case *MeshTrust:
		diags = append(diags, scopeDiag(meta.SeverityError, "", "a MeshTrust sets the root of trust of every cluster it selects, so it must be defined in the management source, not in cluster %q", cluster))
	}
	return diags
}

func scopeDiag(sev meta.Severity, path, format string, args ...any) meta.Diagnostic {
	return meta.Diagnostic{Severity: sev, Path: path, Summary: fmt.Sprintf(format, args...)}
}

// foreignDestinations reports the route and mirror destinations of a
// TrafficPolicy that lie outside cluster.
func foreignDestinations(tp *TrafficPolicy, cluster string) []meta.Diagnostic {
	var diags []meta.Diagnostic
	check := func(d Destination, path string) {
		switch {
		case d.Service != nil && d.Service.Cluster != cluster:
			diags = append(diags, scopeDiag(meta.SeverityError, path+".service.cluster", "routes to cluster %q, outside the tenancy of cluster %q, where this policy was defined", d.Service.Cluster, cluster))
		case d.VirtualDestination != nil:
			diags = append(diags, scopeDiag(meta.SeverityError, path+".virtualDestination", "routes to a VirtualDestination, which spans clusters; define this policy in the management source"))
		}
	}
	for i, rule := range tp.Spec.HTTP {
		for j, wd := range rule.Route {
			check(wd.Destination, fmt.Sprintf("spec.http[%d].route[%d]", i, j))
		}
		if rule.Mirror != nil {
			check(rule.Mirror.Destination, fmt.Sprintf("spec.http[%d].mirror.destination", i))
		}
	}
	return diags
}
