package sdk

import (
	"fmt"
	"slices"

	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
)

// scopeToCluster confines a policy defined in a workload cluster to that
// cluster's own destinations: the tenancy boundary between clusters. The
// management source's policies are fleet-wide; a workload cluster's may
// change routing and authorization in that cluster only.
//
//   - Destination selectors are narrowed to the cluster: a selector with no
//     clusters selects in the source cluster only; other clusters named in
//     a selector are dropped with a warning, and a policy left with no
//     selector is not applied.
//   - A TrafficPolicy may route and mirror only to Services of its own
//     cluster; a VirtualDestination, which changes every cluster's routing,
//     must come from the management source.
//
// It returns the diagnostics, errors when the policy must not be applied.
// p is the policy's own decoded copy and is changed in place.
func scopeToCluster(p policyv1alpha1.Policy, cluster string) []Diagnostic {
	var diags []Diagnostic
	narrow := func(sels []policyv1alpha1.DestinationSelector) []policyv1alpha1.DestinationSelector {
		var kept []policyv1alpha1.DestinationSelector
		for i, sel := range sels {
			path := fmt.Sprintf("spec.destinationSelectors[%d].clusters", i)
			outside := slices.DeleteFunc(slices.Clone(sel.Clusters), func(c string) bool { return c == cluster })
			if len(outside) > 0 {
				diags = append(diags, Warningf(p, path, "clusters %v are outside the tenancy of cluster %q, where this policy was defined; it applies to %q only (define it in the management source to select other clusters)", outside, cluster, cluster))
			}
			if len(sel.Clusters) > 0 && len(outside) == len(sel.Clusters) {
				continue
			}
			sel.Clusters = []string{cluster}
			kept = append(kept, sel)
		}
		if len(sels) > 0 && len(kept) == 0 {
			diags = append(diags, Errorf(p, "spec.destinationSelectors", "selects no destination in cluster %q, where it was defined, so it is not applied", cluster))
		}
		return kept
	}
	switch p := p.(type) {
	case *policyv1alpha1.AccessPolicy:
		p.Spec.DestinationSelectors = narrow(p.Spec.DestinationSelectors)
	case *policyv1alpha1.TrafficPolicy:
		p.Spec.DestinationSelectors = narrow(p.Spec.DestinationSelectors)
		diags = append(diags, foreignDestinations(p, cluster)...)
	case *policyv1alpha1.VirtualDestination:
		diags = append(diags, Errorf(p, "", "a VirtualDestination changes the routing of every cluster, so it must be defined in the management source, not in cluster %q", cluster))
	case *policyv1alpha1.MeshTrust:
		diags = append(diags, Errorf(p, "", "a MeshTrust sets the root of trust of every cluster it selects, so it must be defined in the management source, not in cluster %q", cluster))
	}
	return diags
}

// foreignDestinations reports the route and mirror destinations of a
// TrafficPolicy that lie outside cluster.
func foreignDestinations(tp *policyv1alpha1.TrafficPolicy, cluster string) []Diagnostic {
	var diags []Diagnostic
	check := func(d policyv1alpha1.Destination, path string) {
		switch {
		case d.Service != nil && d.Service.Cluster != cluster:
			diags = append(diags, Errorf(tp, path+".service.cluster", "routes to cluster %q, outside the tenancy of cluster %q, where this policy was defined", d.Service.Cluster, cluster))
		case d.VirtualDestination != nil:
			diags = append(diags, Errorf(tp, path+".virtualDestination", "routes to a VirtualDestination, which spans clusters; define this policy in the management source"))
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
