package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// KindRolloutStrategy is the kind of the fleet's staged rollout strategy.
const KindRolloutStrategy = "RolloutStrategy"

// RolloutStrategy stages the management source's policy changes: while one
// exists, a change of the management source's policies becomes a revision
// that reaches the fleet stage by stage, each stage's clusters moving to it
// as earlier stages stay healthy, instead of reaching every cluster at
// once. It comes from the management source only; a workload cluster's is
// refused with a diagnostic, and a workload cluster's own policies are
// never staged. The fleet has one: with several, the first valid one by
// namespace and name counts.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=rs,categories=meshrelay
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type RolloutStrategy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec RolloutStrategySpec `json:"spec"`
	// +optional
	Status PolicyStatus `json:"status,omitempty"`
}

// RolloutStrategySpec is how a revision reaches the fleet.
type RolloutStrategySpec struct {
	// Stages are released in order. A cluster belongs to the first stage
	// that selects it; the clusters no stage selects form a last stage of
	// their own, with the strategy's defaults.
	// +kubebuilder:validation:MinItems=1
	Stages []RolloutStage `json:"stages"`
	// MinHealthy is how long every cluster of a stage must have been
	// healthy before the next stage starts, for stages that do not say;
	// default 30s.
	// +optional
	MinHealthy *metav1.Duration `json:"minHealthy,omitempty"`
	// MaxFailures is how many clusters of a stage may fail (a count, or a
	// percentage of the stage's clusters) before the rollout pauses, for
	// stages that do not say; default 0.
	// +optional
	MaxFailures *intstr.IntOrString `json:"maxFailures,omitempty"`
	// ProgressDeadline is how long a stage may take, from its start to
	// its last cluster healthy for MinHealthy, before the rollout pauses,
	// for stages that do not say; default 10m.
	// +optional
	ProgressDeadline *metav1.Duration `json:"progressDeadline,omitempty"`
}

// RolloutStage is one stage of a rollout: the clusters it selects and how
// they are released.
type RolloutStage struct {
	// Name names the stage in status and in `meshrelay rollout approve`;
	// by default "stage-N", N counted from 1.
	// +optional
	Name string `json:"name,omitempty"`
	// Clusters names workload clusters of the stage.
	// +optional
	Clusters []string `json:"clusters,omitempty"`
	// ClusterSelector selects the stage's clusters by their labels in the
	// server's registry, beside those Clusters names (the union). At least
	// one of Clusters and ClusterSelector is required.
	// +optional
	ClusterSelector *metav1.LabelSelector `json:"clusterSelector,omitempty"`
	// MaxConcurrent is how many of the stage's clusters may be released
	// and not yet healthy for MinHealthy at a time: a count, or a
	// percentage of the stage's clusters (rounded up); by default all.
	// +optional
	MaxConcurrent *intstr.IntOrString `json:"maxConcurrent,omitempty"`
	// MinHealthy overrides the strategy's for this stage.
	// +optional
	MinHealthy *metav1.Duration `json:"minHealthy,omitempty"`
	// MaxFailures overrides the strategy's for this stage.
	// +optional
	MaxFailures *intstr.IntOrString `json:"maxFailures,omitempty"`
	// ProgressDeadline overrides the strategy's for this stage.
	// +optional
	ProgressDeadline *metav1.Duration `json:"progressDeadline,omitempty"`
	// Approval holds the stage until an administrator approves it
	// (`meshrelay rollout approve`).
	// +optional
	Approval bool `json:"approval,omitempty"`
}

// RolloutStrategyList is a list of RolloutStrategy.
//
// +kubebuilder:object:root=true
type RolloutStrategyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RolloutStrategy `json:"items"`
}

// GetStatus returns the status of the RolloutStrategy.
func (p *RolloutStrategy) GetStatus() *PolicyStatus { return &p.Status }

// SetStatus replaces the status of the RolloutStrategy.
func (p *RolloutStrategy) SetStatus(s PolicyStatus) { p.Status = s }

// SelectsCluster reports whether the stage selects c: c is one of
// Clusters or its labels match ClusterSelector.
func (s *RolloutStage) SelectsCluster(c ClusterMeta) bool {
	return namedOrLabeled(s.Clusters, s.ClusterSelector, c)
}
