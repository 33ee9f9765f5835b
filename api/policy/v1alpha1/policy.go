package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Policy is what TrafficPolicy, AccessPolicy and VirtualDestination have in
// common, so that an engine can treat them uniformly. It is satisfied by
// pointers to the three types and is compatible with controller-runtime's
// client.Object.
//
// +kubebuilder:object:generate=false
type Policy interface {
	metav1.Object
	runtime.Object
	// GetObjectMeta returns the object's metadata.
	GetObjectMeta() metav1.Object
	// Validate checks the policy on its own, without looking at the fleet,
	// and returns every problem found, each naming the field at fault
	// (e.g. spec.http[0].route[1].weight). An empty list means valid.
	Validate() field.ErrorList
	// GetStatus returns the policy's status for reading or updating in place.
	GetStatus() *PolicyStatus
	// SetStatus replaces the policy's status.
	SetStatus(PolicyStatus)
}

var (
	_ Policy = (*TrafficPolicy)(nil)
	_ Policy = (*AccessPolicy)(nil)
	_ Policy = (*VirtualDestination)(nil)
	_ Policy = (*MeshTrust)(nil)
	_ Policy = (*RolloutStrategy)(nil)
)

// GetStatus returns the status of the TrafficPolicy.
func (p *TrafficPolicy) GetStatus() *PolicyStatus { return &p.Status }

// SetStatus replaces the status of the TrafficPolicy.
func (p *TrafficPolicy) SetStatus(s PolicyStatus) { p.Status = s }

// GetStatus returns the status of the AccessPolicy.
func (p *AccessPolicy) GetStatus() *PolicyStatus { return &p.Status }

// SetStatus replaces the status of the AccessPolicy.
func (p *AccessPolicy) SetStatus(s PolicyStatus) { p.Status = s }

// GetStatus returns the status of the VirtualDestination.
func (p *VirtualDestination) GetStatus() *PolicyStatus { return &p.Status }

// SetStatus replaces the status of the VirtualDestination.
func (p *VirtualDestination) SetStatus(s PolicyStatus) { p.Status = s }
