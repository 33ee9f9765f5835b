package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// VirtualDestination is a global hostname (e.g. reviews.global) served by
// Services in several clusters, with failover between them and outlier
// detection to eject unhealthy endpoints.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=vd,categories=meshrelay
// +kubebuilder:printcolumn:name="Hostname",type=string,JSONPath=`.spec.hostname`
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type VirtualDestination struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec VirtualDestinationSpec `json:"spec"`
	// +optional
	Status PolicyStatus `json:"status,omitempty"`
}

// VirtualDestinationSpec is the desired behaviour of a VirtualDestination.
// Its backends are the union of Services and the Services selected by
// DestinationSelectors; at least one of the two must be set.
type VirtualDestinationSpec struct {
	// Hostname clients use in every cluster, a DNS name such as reviews.global.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Hostname string `json:"hostname"`
	// Ports the hostname serves.
	// +kubebuilder:validation:MinItems=1
	Ports []VirtualPort `json:"ports"`
	// Services are the backing Services, each in one cluster.
	// +optional
	Services []BackingService `json:"services,omitempty"`
	// DestinationSelectors select further backing Services.
	// +optional
	DestinationSelectors []DestinationSelector `json:"destinationSelectors,omitempty"`
	// Failover orders the clusters traffic goes to.
	// +optional
	Failover *Failover `json:"failover,omitempty"`
	// OutlierDetection ejects failing endpoints; required with Failover.
	// +optional
	OutlierDetection *OutlierDetection `json:"outlierDetection,omitempty"`
}

// Protocol is the application protocol of a port.
// +kubebuilder:validation:Enum=HTTP;HTTP2;GRPC;TCP;TLS
type Protocol string

// Protocols.
const (
	ProtocolHTTP  Protocol = "HTTP"
	ProtocolHTTP2 Protocol = "HTTP2"
	ProtocolGRPC  Protocol = "GRPC"
	ProtocolTCP   Protocol = "TCP"
	ProtocolTLS   Protocol = "TLS"
)

// VirtualPort is a port of the global hostname.
type VirtualPort struct {
	// Number clients connect to.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Number int32 `json:"number"`
	// Protocol spoken on the port.
	Protocol Protocol `json:"protocol"`
	// TargetPort is the port of the backing Services; 0 means Number.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=65535
	// +optional
	TargetPort int32 `json:"targetPort,omitempty"`
}

// BackingService names a Service in one cluster that serves the hostname.
type BackingService struct {
	// Cluster the Service is in.
	Cluster string `json:"cluster"`
	// Namespace of the Service.
	Namespace string `json:"namespace"`
	// Name of the Service.
	Name string `json:"name"`
}

// FailoverMode is how backends are ordered.
// +kubebuilder:validation:Enum=Priority;Locality
type FailoverMode string

// Failover modes.
const (
	// FailoverPriority sends traffic to the first cluster of Priority that
	// has healthy endpoints; clusters not listed come last, together.
	FailoverPriority FailoverMode = "Priority"
	// FailoverLocality prefers endpoints in the client's zone, then region,
	// then anywhere.
	FailoverLocality FailoverMode = "Locality"
)

// Failover orders the clusters serving a VirtualDestination.
type Failover struct {
	// Mode is Priority or Locality.
	Mode FailoverMode `json:"mode"`
	// Priority lists clusters, most preferred first; required for Priority,
	// forbidden for Locality.
	// +optional
	Priority []string `json:"priority,omitempty"`
}

// OutlierDetection ejects endpoints that keep failing.
type OutlierDetection struct {
	// ConsecutiveErrors before an endpoint is ejected; at least 1.
	// +kubebuilder:validation:Minimum=1
	ConsecutiveErrors int32 `json:"consecutiveErrors"`
	// Interval between ejection sweeps; must be positive.
	Interval metav1.Duration `json:"interval"`
	// BaseEjectionTime an endpoint stays ejected, multiplied by the number
	// of times it was ejected; must be positive.
	BaseEjectionTime metav1.Duration `json:"baseEjectionTime"`
	// MaxEjectionPercent of the endpoints that may be ejected at once, 0 to 100.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	MaxEjectionPercent int32 `json:"maxEjectionPercent"`
}

// VirtualDestinationList is a list of VirtualDestination.
//
// +kubebuilder:object:root=true
type VirtualDestinationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VirtualDestination `json:"items"`
}
