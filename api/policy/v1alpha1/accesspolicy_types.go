package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AccessPolicy controls which clients may call the destinations it selects.
//
// Semantics, for every selected destination: once any AccessPolicy (Allow
// or DenyAll) selects it, a request is admitted only if some Allow policy
// selecting it matches the request; otherwise it is denied. Destinations
// selected by no AccessPolicy are unrestricted. A DenyAll policy therefore
// turns on default-deny without admitting anything itself, e.g. for a whole
// namespace with destinationSelectors: [{namespaces: [bookinfo]}].
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=ap,categories=meshrelay
// +kubebuilder:printcolumn:name="Action",type=string,JSONPath=`.spec.action`
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type AccessPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec AccessPolicySpec `json:"spec"`
	// +optional
	Status PolicyStatus `json:"status,omitempty"`
}

// AccessAction is what an AccessPolicy does.
// +kubebuilder:validation:Enum=Allow;DenyAll
type AccessAction string

// Access actions.
const (
	// ActionAllow admits requests matching From, Ports, Methods and Paths.
	ActionAllow AccessAction = "Allow"
	// ActionDenyAll turns on default-deny for the selected destinations
	// and admits nothing itself; From, Ports, Methods and Paths must be empty.
	ActionDenyAll AccessAction = "DenyAll"
)

// AccessPolicySpec is the desired behaviour of an AccessPolicy.
//
// A request matches an Allow policy when its client matches any entry of
// From, and its port any of Ports, its method any of Methods and its path
// any of Paths; an empty list matches anything.
type AccessPolicySpec struct {
	// DestinationSelectors select the destinations this policy protects.
	// +kubebuilder:validation:MinItems=1
	DestinationSelectors []DestinationSelector `json:"destinationSelectors"`
	// Action is Allow (default) or DenyAll.
	// +kubebuilder:default=Allow
	// +optional
	Action AccessAction `json:"action,omitempty"`
	// From are the allowed clients; any entry may match. Required for Allow.
	// +optional
	From []ClientSelector `json:"from,omitempty"`
	// Ports are the allowed ports of the destination Services, as the
	// Services expose them; backends admit the ports these forward to.
	// +optional
	Ports []int32 `json:"ports,omitempty"`
	// Methods are the allowed HTTP methods.
	// +optional
	Methods []HTTPMethod `json:"methods,omitempty"`
	// Paths are the allowed request paths: exact, or a prefix when ending in
	// "*" (e.g. /reviews*). Each starts with "/".
	// +optional
	Paths []string `json:"paths,omitempty"`
}

// AccessPolicyList is a list of AccessPolicy.
//
// +kubebuilder:object:root=true
type AccessPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AccessPolicy `json:"items"`
}
