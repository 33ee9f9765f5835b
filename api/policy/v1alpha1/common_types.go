package v1alpha1

import (
	"github.com/meshrelay/meshrelay/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DestinationSelector selects destinations: Kubernetes Services discovered in
// workload clusters. Each field is a set of alternatives (a destination
// matches a field when it matches any entry); the fields are ANDed; an empty
// field matches everything. An empty selector therefore selects every
// destination in the fleet. A list of selectors is ORed.
//
// Clusters and ClusterSelector together are one field: a destination's
// cluster matches when it is one of Clusters or its labels (meshrelay
// cluster label) match ClusterSelector — the union of the two.
type DestinationSelector struct {
	// Clusters are names of workload clusters.
	// +optional
	Clusters []string `json:"clusters,omitempty"`
	// ClusterSelector selects workload clusters by their labels in the
	// server's registry, beside those Clusters names: a cluster matches
	// when it is named or its labels match (the union). An empty
	// selector ({}) matches every cluster.
	// +optional
	ClusterSelector *metav1.LabelSelector `json:"clusterSelector,omitempty"`
	// Namespaces are namespaces of the Services.
	// +optional
	Namespaces []string `json:"namespaces,omitempty"`
	// Names are Service names.
	// +optional
	Names []string `json:"names,omitempty"`
	// Labels must all be present, with these values, on the Service.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
}

// ClientSelector selects the clients (workload identities) that a policy
// applies to. The fields are ANDed and each is a set of alternatives; at
// least one field must be set. A client matches ServiceAccounts when its
// identity is one of them.
//
// Clusters and ClusterSelector together are one field, as in
// [DestinationSelector]: a client's cluster matches when it is one of
// Clusters or its labels match ClusterSelector. When neither is set,
// clients of every cluster match; when either is set, only the clusters
// they name or select do, so a ClusterSelector that matches no cluster
// (and no Clusters beside it) admits no client.
type ClientSelector struct {
	// ServiceAccounts are exact workload identities.
	// +optional
	ServiceAccounts []ServiceAccountRef `json:"serviceAccounts,omitempty"`
	// Namespaces are the namespaces the client runs in.
	// +optional
	Namespaces []string `json:"namespaces,omitempty"`
	// Clusters are the clusters the client runs in.
	// +optional
	Clusters []string `json:"clusters,omitempty"`
	// ClusterSelector selects the clusters the client runs in by their
	// labels in the server's registry, beside those Clusters names: a
	// cluster matches when it is named or its labels match (the union).
	// An empty selector ({}) matches every registered cluster; one that
	// matches no cluster admits no client.
	// +optional
	ClusterSelector *metav1.LabelSelector `json:"clusterSelector,omitempty"`
}

// ServiceAccountRef names a Kubernetes service account, the identity of a workload.
type ServiceAccountRef struct {
	// Cluster is the workload cluster of the service account; empty means
	// the same namespace and name in any cluster.
	// +optional
	Cluster string `json:"cluster,omitempty"`
	// Namespace of the service account.
	Namespace string `json:"namespace"`
	// Name of the service account.
	Name string `json:"name"`
}

// ServiceRef names one Kubernetes Service in one workload cluster.
type ServiceRef struct {
	// Cluster is the workload cluster the Service is in.
	Cluster string `json:"cluster"`
	// Namespace of the Service.
	Namespace string `json:"namespace"`
	// Name of the Service.
	Name string `json:"name"`
	// Port is the Service port; 0 means the port the request arrived on
	// (or the Service's only port).
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=65535
	// +optional
	Port int32 `json:"port,omitempty"`
}

// VirtualDestinationRef names a VirtualDestination.
type VirtualDestinationRef struct {
	// Namespace of the VirtualDestination; empty means the namespace of the
	// referring policy.
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// Name of the VirtualDestination.
	Name string `json:"name"`
	// Port is one of the VirtualDestination's port numbers; 0 means the port
	// the request arrived on (or its only port).
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=65535
	// +optional
	Port int32 `json:"port,omitempty"`
}

// PolicyState summarises how far a policy got.
// +kubebuilder:validation:Enum=Pending;Accepted;Invalid;Failed
type PolicyState string

// Policy states.
const (
	// StatePending means the policy has not been processed yet.
	StatePending PolicyState = "Pending"
	// StateAccepted means the policy is valid and was translated for every selected cluster.
	StateAccepted PolicyState = "Accepted"
	// StateInvalid means the policy failed validation; nothing was applied.
	StateInvalid PolicyState = "Invalid"
	// StateFailed means the policy is valid but translating or applying it failed in at least one cluster.
	StateFailed PolicyState = "Failed"
)

// Diagnostic is a problem with a policy that its author can act on.
type Diagnostic struct {
	// Severity of the problem.
	Severity meta.Severity `json:"severity"`
	// Summary is a one-line description.
	Summary string `json:"summary"`
	// Detail explains the problem and how to fix it.
	// +optional
	Detail string `json:"detail,omitempty"`
	// Path is the field at fault, e.g. spec.http[0].route[1].weight.
	// +optional
	Path string `json:"path,omitempty"`
	// Cluster the problem concerns, if any.
	// +optional
	Cluster string `json:"cluster,omitempty"`
	// Plugin (translator) that reported the problem, if any.
	// +optional
	Plugin string `json:"plugin,omitempty"`
}

// DiagnosticOf returns d as a row of its policy's status. The policy is the
// object whose status holds the row, so d.Policy is not kept.
func DiagnosticOf(d meta.Diagnostic) Diagnostic {
	return Diagnostic{Severity: d.Severity, Summary: d.Summary, Detail: d.Detail, Path: d.Path, Cluster: d.Cluster, Plugin: d.Plugin}
}

// ClusterResult is the outcome of a policy in one cluster for one backend.
type ClusterResult struct {
	// Cluster is the workload cluster.
	Cluster string `json:"cluster"`
	// Backend is the translator plugin that produced the output, e.g. istio.
	// +optional
	Backend string `json:"backend,omitempty"`
	// Applied is the number of output resources applied in the cluster.
	// +kubebuilder:validation:Minimum=0
	// +optional
	Applied int32 `json:"applied,omitempty"`
	// Errors are the failures translating or applying the policy there.
	// +optional
	Errors []string `json:"errors,omitempty"`
}

// PolicyStatus is the status shared by every policy kind.
type PolicyStatus struct {
	// ObservedGeneration is the metadata.generation this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// State summarises the outcome.
	// +optional
	State PolicyState `json:"state,omitempty"`
	// Clusters holds one result per cluster and backend the policy selected.
	// +optional
	Clusters []ClusterResult `json:"clusters,omitempty"`
	// Diagnostics are the problems found with the policy.
	// +optional
	Diagnostics []Diagnostic `json:"diagnostics,omitempty"`
	// Conditions are the standard Kubernetes conditions.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Rollout is the staged rollout that carries the policy's latest
	// change, while it runs; clusters not yet released hold the previous
	// revision of the policy.
	// +optional
	Rollout *PolicyRollout `json:"rollout,omitempty"`
}

// PolicyRollout is where the staged rollout carrying a policy's change is.
type PolicyRollout struct {
	// ID numbers the rollout.
	ID uint64 `json:"id"`
	// Phase is Progressing or Paused.
	Phase string `json:"phase"`
	// Stage is the current stage's name.
	// +optional
	Stage string `json:"stage,omitempty"`
	// Total, Released, Healthy, Failed and Pending count the rollout's
	// clusters.
	Total    int32 `json:"total"`
	Released int32 `json:"released"`
	Healthy  int32 `json:"healthy"`
	Failed   int32 `json:"failed"`
	Pending  int32 `json:"pending"`
	// Reason says why the rollout is paused, or what it waits for.
	// +optional
	Reason string `json:"reason,omitempty"`
}
