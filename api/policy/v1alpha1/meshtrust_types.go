package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// KindMeshTrust is the kind of the fleet trust policy.
const KindMeshTrust = "MeshTrust"

// MeshTrust gives the Istio meshes of a set of clusters one root of trust:
// the management server holds the mesh root CA, each cluster's agent makes
// its own intermediate CA (the key never leaves the cluster) and writes it as
// Istio's plug-in CA Secret, and the agents renew intermediates, rotate the
// root in phases and restart workloads whose proxies carry the old chain.
// It comes from the management source only.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=mt,categories=meshrelay
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type MeshTrust struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec MeshTrustSpec `json:"spec"`
	// +optional
	Status MeshTrustStatus `json:"status,omitempty"`
}

// MeshTrustSpec is the desired trust of a set of meshes.
type MeshTrustSpec struct {
	// Clusters names the workload clusters whose Istio meshes share the
	// root; at least one. Membership is by name and never follows what a
	// cluster's agent reports (its meshes, its namespaces). A cluster
	// belongs to at most one MeshTrust. At least one of Clusters and
	// ClusterSelector is required.
	// +optional
	Clusters []string `json:"clusters,omitempty"`
	// ClusterSelector selects workload clusters by their labels in the
	// server's registry (meshrelay cluster label), beside those Clusters
	// names: a cluster is a member when it is named or its labels match
	// (the union). Labels are set by administrators, never by agents.
	// +optional
	ClusterSelector *metav1.LabelSelector `json:"clusterSelector,omitempty"`
	// TrustDomains are the SPIFFE trust domains of the meshes' workloads.
	// Every intermediate CA carries them as URI name constraints: it signs
	// workload identities (spiffe://TRUST-DOMAIN/...) in them only. By
	// default Istio's own, cluster.local.
	// +optional
	TrustDomains []string `json:"trustDomains,omitempty"`
	// MeshNamespace is where Istio's control plane runs and reads its
	// plug-in CA Secret (cacerts).
	// +kubebuilder:default=istio-system
	// +optional
	MeshNamespace string `json:"meshNamespace,omitempty"`
	// Root is where the mesh root CA comes from; by default the server
	// generates one and keeps it in its store.
	// +optional
	Root MeshRoot `json:"root,omitempty"`
	// Intermediate sets the lifetime of each cluster's intermediate CA.
	// +optional
	Intermediate IntermediateCA `json:"intermediate,omitempty"`
	// Rotation sets when the root is rotated.
	// +optional
	Rotation RootRotation `json:"rotation,omitempty"`
	// Bounce restarts workloads whose proxies still carry certificates
	// from an old chain once istiod has the new one.
	// +optional
	Bounce *Bounce `json:"bounce,omitempty"`
}

// MeshRoot is the source of the mesh root CA: at most one of Files and
// Secret; neither means generated.
type MeshRoot struct {
	// Files are PEM files on every server replica.
	// +optional
	Files *RootFiles `json:"files,omitempty"`
	// Secret is a Secret in the management cluster (with --config-source kube).
	// +optional
	Secret *RootSecret `json:"secret,omitempty"`
	// TTL is the lifetime of a generated root.
	// +optional
	TTL *metav1.Duration `json:"ttl,omitempty"`
}

// RootFiles names the PEM files of a root CA the user brings.
type RootFiles struct {
	// CertFile holds the CA certificate, optionally followed by its chain.
	CertFile string `json:"certFile"`
	// KeyFile holds its private key.
	KeyFile string `json:"keyFile"`
	// ChainFile holds the certificates above CertFile, issuer first, when
	// the CA is an intermediate of the user's PKI.
	// +optional
	ChainFile string `json:"chainFile,omitempty"`
}

// RootSecret names a Secret holding a root CA: tls.crt (or ca.crt) and
// tls.key (or ca.key), and optionally ca-chain.crt.
type RootSecret struct {
	// Namespace of the Secret.
	Namespace string `json:"namespace"`
	// Name of the Secret.
	Name string `json:"name"`
}

// IntermediateCA sets the lifetime of the clusters' intermediate CAs.
type IntermediateCA struct {
	// TTL is an intermediate's lifetime.
	// +kubebuilder:default="720h"
	// +optional
	TTL *metav1.Duration `json:"ttl,omitempty"`
	// RenewBefore is how long before its expiry an intermediate is
	// replaced; by default a third of TTL.
	// +optional
	RenewBefore *metav1.Duration `json:"renewBefore,omitempty"`
}

// RootRotation sets when the root is rotated. A rotation runs in phases:
// both roots trusted, then new intermediates, then the old root removed;
// each phase waits for every cluster.
type RootRotation struct {
	// Generation starts a rotation to a new generated root each time it
	// changes. Roots from files or a Secret rotate when their content
	// changes.
	// +optional
	Generation int64 `json:"generation,omitempty"`
	// RenewBefore rotates a generated root this long before it expires.
	// +optional
	RenewBefore *metav1.Duration `json:"renewBefore,omitempty"`
	// ExcludedClusters are clusters of spec.clusters that a rotation's
	// phases do not wait for: a cluster whose agent never reports would
	// otherwise hold the rotation for every other. An excluded cluster
	// still gets its plan and its intermediate when it reports, and is
	// flagged in the status: until it catches up, the other clusters may
	// no longer trust its workloads.
	// +optional
	ExcludedClusters []string `json:"excludedClusters,omitempty"`
}

// Bounce configures restarting workloads after a chain change.
type Bounce struct {
	// Enabled turns bouncing on.
	Enabled bool `json:"enabled"`
	// PerMinute bounds how many workloads are restarted per minute in each cluster.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:default=5
	// +optional
	PerMinute int32 `json:"perMinute,omitempty"`
}

// Trust phases, of a MeshTrust and of each of its clusters.
const (
	// TrustPhaseActive: one root; every intermediate is signed by it.
	TrustPhaseActive = "Active"
	// TrustPhaseAddingRoot: both roots are trusted; the old one still signs.
	TrustPhaseAddingRoot = "AddingRoot"
	// TrustPhaseReissuing: both roots are trusted; intermediates are signed by the new one.
	TrustPhaseReissuing = "Reissuing"
	// TrustPhaseRemovingRoot: only the new root is trusted.
	TrustPhaseRemovingRoot = "RemovingRoot"
)

// MeshTrustStatus is the shared policy status with the rotation phase and
// each cluster's trust.
type MeshTrustStatus struct {
	PolicyStatus `json:",inline"`
	// Phase of the root rotation.
	// +optional
	Phase string `json:"phase,omitempty"`
	// Roots are the SHA-256 fingerprints of the roots trusted now, the
	// signing root first.
	// +optional
	Roots []string `json:"roots,omitempty"`
	// Meshes holds each cluster's trust as its agent reported it.
	// +optional
	Meshes []MeshTrustMesh `json:"meshes,omitempty"`
}

// MeshTrustMesh is one cluster's trust.
type MeshTrustMesh struct {
	// Cluster is the workload cluster.
	Cluster string `json:"cluster"`
	// Phase is the last phase the cluster completed.
	// +optional
	Phase string `json:"phase,omitempty"`
	// IssuerRoot is the fingerprint of the root that signed its intermediate.
	// +optional
	IssuerRoot string `json:"issuerRoot,omitempty"`
	// IntermediateExpiry is when its intermediate expires.
	// +optional
	IntermediateExpiry *metav1.Time `json:"intermediateExpiry,omitempty"`
	// Bounced and Pending count the workloads restarted and still to restart.
	// +optional
	Bounced int32 `json:"bounced,omitempty"`
	// +optional
	Pending int32 `json:"pending,omitempty"`
	// Error is the agent's last problem with the mesh's trust.
	// +optional
	Error string `json:"error,omitempty"`
}

// MeshTrustList is a list of MeshTrust.
//
// +kubebuilder:object:root=true
type MeshTrustList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MeshTrust `json:"items"`
}

// GetStatus returns the shared part of the MeshTrust's status.
func (p *MeshTrust) GetStatus() *PolicyStatus { return &p.Status.PolicyStatus }

// SetStatus replaces the shared part of the MeshTrust's status.
func (p *MeshTrust) SetStatus(s PolicyStatus) { p.Status.PolicyStatus = s }
