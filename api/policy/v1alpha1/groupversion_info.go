package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group of every meshrelay policy.
const GroupName = "policy.meshrelay.io"

// SchemeGroupVersion is the group and version of the types in this package.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1alpha1"}

// Kinds of the policies in this package.
const (
	KindTrafficPolicy      = "TrafficPolicy"
	KindAccessPolicy       = "AccessPolicy"
	KindVirtualDestination = "VirtualDestination"
)

var (
	// SchemeBuilder collects the functions that add this package's types to a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds this package's types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// Resource returns the group-qualified resource for an unqualified resource name.
func Resource(resource string) schema.GroupResource {
	return SchemeGroupVersion.WithResource(resource).GroupResource()
}

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion,
		&TrafficPolicy{}, &TrafficPolicyList{},
		&AccessPolicy{}, &AccessPolicyList{},
		&VirtualDestination{}, &VirtualDestinationList{},
		&MeshTrust{}, &MeshTrustList{},
		&RolloutStrategy{}, &RolloutStrategyList{},
	)
	metav1.AddToGroupVersion(scheme, SchemeGroupVersion)
	return nil
}
