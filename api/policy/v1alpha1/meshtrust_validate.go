package v1alpha1

import (
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Defaults and limits of a MeshTrust.
const (
	// DefaultMeshNamespace is where Istio's control plane runs.
	DefaultMeshNamespace = "istio-system"
	// DefaultIntermediateTTL is an intermediate CA's lifetime.
	DefaultIntermediateTTL = 30 * 24 * time.Hour
	// MinIntermediateTTL is the shortest intermediate lifetime accepted.
	MinIntermediateTTL = time.Hour
	// DefaultRootTTL is a generated root's lifetime.
	DefaultRootTTL = 10 * 365 * 24 * time.Hour
	// DefaultBouncePerMinute is how many workloads are restarted per minute.
	DefaultBouncePerMinute = 5
	// MaxBouncePerMinute bounds Bounce.PerMinute.
	MaxBouncePerMinute = 600
	// DefaultTrustDomain is Istio's trust domain unless configured.
	DefaultTrustDomain = "cluster.local"
	// MaxTrustDomains bounds TrustDomains.
	MaxTrustDomains = 16
)

// Validate checks the MeshTrust; see Policy.Validate.
func (p *MeshTrust) Validate() field.ErrorList {
	errs := validateMeta(&p.ObjectMeta, field.NewPath("metadata"))
	spec := field.NewPath("spec")
	s := &p.Spec
	if len(s.Clusters) == 0 && s.ClusterSelector == nil {
		errs = append(errs, field.Required(spec.Child("clusters"), "name the clusters whose meshes share the root, or select them by their registry labels with clusterSelector: a MeshTrust selects no cluster by default"))
	}
	errs = append(errs, dns1123Labels(s.Clusters, spec.Child("clusters"))...)
	errs = append(errs, validateClusterSelector(s.ClusterSelector, spec.Child("clusterSelector"))...)
	errs = append(errs, validateTrustDomains(s.TrustDomains, spec.Child("trustDomains"))...)
	if s.MeshNamespace != "" {
		errs = append(errs, dns1123Label(s.MeshNamespace, spec.Child("meshNamespace"))...)
	}
	root := spec.Child("root")
	switch {
	case s.Root.Files != nil && s.Root.Secret != nil:
		errs = append(errs, field.Invalid(root, "files and secret", "set at most one of files and secret"))
	case s.Root.Files != nil:
		if s.Root.Files.CertFile == "" {
			errs = append(errs, field.Required(root.Child("files", "certFile"), ""))
		}
		if s.Root.Files.KeyFile == "" {
			errs = append(errs, field.Required(root.Child("files", "keyFile"), ""))
		}
	case s.Root.Secret != nil:
		errs = append(errs, requiredDNS1123Label(s.Root.Secret.Namespace, root.Child("secret", "namespace"))...)
		if s.Root.Secret.Name == "" {
			errs = append(errs, field.Required(root.Child("secret", "name"), ""))
		}
	}
	if s.Root.TTL != nil {
		errs = append(errs, positiveDuration(*s.Root.TTL, root.Child("ttl"))...)
	}
	inter := spec.Child("intermediate")
	if s.Intermediate.TTL != nil && s.Intermediate.TTL.Duration < MinIntermediateTTL {
		errs = append(errs, field.Invalid(inter.Child("ttl"), s.Intermediate.TTL.Duration.String(), "must be at least 1h"))
	}
	if rb := s.Intermediate.RenewBefore; rb != nil {
		errs = append(errs, positiveDuration(*rb, inter.Child("renewBefore"))...)
		if rb.Duration >= s.IntermediateTTL() {
			errs = append(errs, field.Invalid(inter.Child("renewBefore"), rb.Duration.String(), "must be shorter than the intermediate's ttl"))
		}
	}
	if rb := s.Rotation.RenewBefore; rb != nil {
		errs = append(errs, positiveDuration(*rb, spec.Child("rotation", "renewBefore"))...)
	}
	for i, c := range s.Rotation.ExcludedClusters {
		if s.ClusterSelector == nil && !slices.Contains(s.Clusters, c) {
			errs = append(errs, field.Invalid(spec.Child("rotation", "excludedClusters").Index(i), c, "must name a cluster of spec.clusters"))
		}
	}
	if s.Bounce != nil && s.Bounce.PerMinute != 0 {
		errs = append(errs, inRange(int64(s.Bounce.PerMinute), 1, MaxBouncePerMinute, spec.Child("bounce", "perMinute"))...)
	}
	return errs
}

// validateTrustDomains accepts lowercase DNS names, as many as
// MaxTrustDomains: a trust domain is the host of a SPIFFE ID, and an
// intermediate's URI name constraint is matched against that host.
func validateTrustDomains(domains []string, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(domains) > MaxTrustDomains {
		errs = append(errs, field.TooMany(path, len(domains), MaxTrustDomains))
	}
	for i, d := range domains {
		for _, msg := range validation.IsDNS1123Subdomain(d) {
			errs = append(errs, field.Invalid(path.Index(i), d, "a trust domain is a lowercase DNS name: "+msg))
		}
	}
	return errs
}

// Domains returns the trust domains, defaulted.
func (s *MeshTrustSpec) Domains() []string {
	if len(s.TrustDomains) == 0 {
		return []string{DefaultTrustDomain}
	}
	return s.TrustDomains
}

// Excluded reports whether a rotation goes on without cluster.
func (s *MeshTrustSpec) Excluded(cluster string) bool {
	return slices.Contains(s.Rotation.ExcludedClusters, cluster)
}

// Namespace returns the mesh namespace, defaulted.
func (s *MeshTrustSpec) Namespace() string {
	if s.MeshNamespace == "" {
		return DefaultMeshNamespace
	}
	return s.MeshNamespace
}

// IntermediateTTL returns the intermediate's lifetime, defaulted.
func (s *MeshTrustSpec) IntermediateTTL() time.Duration {
	if s.Intermediate.TTL == nil || s.Intermediate.TTL.Duration <= 0 {
		return DefaultIntermediateTTL
	}
	return s.Intermediate.TTL.Duration
}

// IntermediateRenewBefore returns how long before expiry an intermediate is
// replaced, defaulted to a third of its lifetime.
func (s *MeshTrustSpec) IntermediateRenewBefore() time.Duration {
	if s.Intermediate.RenewBefore == nil || s.Intermediate.RenewBefore.Duration <= 0 {
		return s.IntermediateTTL() / 3
	}
	return s.Intermediate.RenewBefore.Duration
}

// RootTTL returns a generated root's lifetime, defaulted.
func (s *MeshTrustSpec) RootTTL() time.Duration {
	if s.Root.TTL == nil || s.Root.TTL.Duration <= 0 {
		return DefaultRootTTL
	}
	return s.Root.TTL.Duration
}

// RootRenewBefore returns how long before its expiry a generated root is
// rotated, defaulted to a tenth of its lifetime.
func (s *MeshTrustSpec) RootRenewBefore() time.Duration {
	if s.Rotation.RenewBefore == nil || s.Rotation.RenewBefore.Duration <= 0 {
		return s.RootTTL() / 10
	}
	return s.Rotation.RenewBefore.Duration
}

// BouncePerMinute returns how many workloads may restart per minute, or 0
// when bouncing is off.
func (s *MeshTrustSpec) BouncePerMinute() int {
	switch {
	case s.Bounce == nil || !s.Bounce.Enabled:
		return 0
	case s.Bounce.PerMinute <= 0:
		return DefaultBouncePerMinute
	}
	return int(s.Bounce.PerMinute)
}
