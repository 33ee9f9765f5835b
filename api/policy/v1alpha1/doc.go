// Package v1alpha1 holds the policy.meshrelay.io/v1alpha1 API: the
// TrafficPolicy, AccessPolicy and VirtualDestination custom resources that
// users write, their shared selectors and status, their validation, and a
// decoder for multi-document YAML.
//
// The same types are used whether a policy comes from the management
// cluster, a workload cluster or a directory. An engine treats the three
// kinds uniformly through the Policy interface:
//
//	policies, err := v1alpha1.Decode(data)
//	for _, p := range policies {
//		if errs := p.Validate(); len(errs) > 0 { ... }
//	}
//
// The CRDs in deploy/crds and zz_generated.deepcopy.go are generated from
// these types by controller-gen; see generate.go.
//
// +kubebuilder:object:generate=true
// +groupName=policy.meshrelay.io
package v1alpha1
