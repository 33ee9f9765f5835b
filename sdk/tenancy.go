package sdk

import (
	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
)

// scopeToCluster confines a policy defined in a workload cluster to that
// cluster's own destinations, as [policyv1alpha1.ScopeToCluster] decides,
// and returns its diagnostics on p. p is the policy's own decoded copy and
// is changed in place.
func scopeToCluster(p policyv1alpha1.Policy, cluster string) []Diagnostic {
	diags := policyv1alpha1.ScopeToCluster(p, cluster)
	ref := RefOf(p)
	for i := range diags {
		diags[i].Policy = ref
	}
	return diags
}
