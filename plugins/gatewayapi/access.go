package gatewayapi

import policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"

// accessPolicies emits Linkerd's authorization for the policies.
func (tr *translation) accessPolicies(aps []*policyv1alpha1.AccessPolicy) {}
