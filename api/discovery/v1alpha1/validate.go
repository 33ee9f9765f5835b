package v1alpha1

import (
	"fmt"
	"net/netip"
	"slices"

	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Bounds on what one cluster's Gateways add to other clusters' outputs.
const (
	// MaxGatewayAddresses is the most addresses one Gateway may have.
	MaxGatewayAddresses = 16
	// MaxGateways is the most Gateways one cluster's input may have.
	MaxGateways = 16
)

// Validate checks a Gateway an agent computed: every address is an IP or
// a DNS-1123 subdomain ([ValidateAddress]), there are at most
// MaxGatewayAddresses of them, the mesh is a known type or empty, the port
// is a port number or 0 (the mesh's default), the network a label value and
// the selector valid labels. The errors name the field at fault.
func (g *Gateway) Validate() field.ErrorList {
	spec := field.NewPath("spec")
	var errs field.ErrorList
	if g.Spec.Mesh != "" && !slices.Contains([]string{MeshIstio, MeshCilium, MeshEnvoy}, g.Spec.Mesh) {
		errs = append(errs, field.NotSupported(spec.Child("mesh"), g.Spec.Mesh, []string{MeshIstio, MeshCilium, MeshEnvoy}))
	}
	addrs := spec.Child("addresses")
	if len(g.Spec.Addresses) > MaxGatewayAddresses {
		errs = append(errs, field.TooMany(addrs, len(g.Spec.Addresses), MaxGatewayAddresses))
	} else {
		for i, a := range g.Spec.Addresses {
			errs = append(errs, ValidateAddress(addrs.Index(i), a)...)
		}
	}
	if g.Spec.Port != 0 {
		for _, msg := range validation.IsValidPortNum(int(g.Spec.Port)) {
			errs = append(errs, field.Invalid(spec.Child("port"), g.Spec.Port, msg))
		}
	}
	if g.Spec.Network != "" {
		for _, msg := range validation.IsValidLabelValue(g.Spec.Network) {
			errs = append(errs, field.Invalid(spec.Child("network"), g.Spec.Network, msg))
		}
	}
	errs = append(errs, metav1validation.ValidateLabels(g.Spec.Selector, spec.Child("selector"))...)
	return errs
}

// ValidateAddress checks an address other clusters reach: an IP address
// without a zone, or a DNS-1123 subdomain (a hostname such as a cloud load
// balancer's).
func ValidateAddress(path *field.Path, a string) field.ErrorList {
	if ip, err := netip.ParseAddr(a); err == nil && ip.Zone() == "" {
		return nil
	}
	if msgs := validation.IsDNS1123Subdomain(a); len(msgs) > 0 {
		return field.ErrorList{field.Invalid(path, bounded(a), fmt.Sprintf("must be an IP address or a DNS-1123 subdomain: %v", msgs))}
	}
	return nil
}

// bounded shortens a value for an error message.
func bounded(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	return s[:max] + "…"
}
