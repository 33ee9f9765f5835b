package discovery

import (
	"cmp"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	discoveryv1alpha1 "github.com/meshrelay/meshrelay/api/discovery/v1alpha1"
)

// Labels and names Istio's detector recognizes.
const (
	// NetworkLabel is Istio's network label, on a Namespace or a gateway
	// Service.
	NetworkLabel = "topology.istio.io/network"
	// GatewayPort is Istio's cross-network mTLS passthrough port.
	GatewayPort = 15443
	// DefaultTrustDomain is Istio's trust domain unless configured.
	DefaultTrustDomain = "cluster.local"
)

// istioDetector finds Istio.
var istioDetector = detector{mesh: discoveryv1alpha1.MeshIstio, detect: detectIstio}

// detectIstio finds Istio when an istiod Deployment exists (the
// unrevisioned one first, else the first by namespace and name): its
// namespace, version (image tag), trust domain (TRUST_DOMAIN or
// cluster.local) and network (label topology.istio.io/network on istiod's
// Namespace). It finds a Gateway per east-west gateway Service (label
// istio=eastwestgateway, or a LoadBalancer Service labelled
// topology.istio.io/network) whether or not istiod runs: its load-balancer
// addresses (else its external IPs), its cross-network port, its network
// (the Service's label, else its Namespace's, else istiod's) and its
// selector (the gateway pods' labels).
func detectIstio(c *inventory) (*discoveryv1alpha1.MeshSpec, []discoveryv1alpha1.Gateway) {
	var istiod *workload
	for _, w := range c.workloadsWith("istiod") {
		if w.Kind == "Deployment" && isIstiod(w) && (istiod == nil || preferIstiod(w, istiod)) {
			istiod = w
		}
	}
	var mesh *discoveryv1alpha1.MeshSpec
	meshNetwork := ""
	if istiod != nil {
		ns := istiod.Metadata.Namespace
		discovery := istiod.container("discovery")
		meshNetwork = c.namespaceLabels(ns, NetworkLabel)[NetworkLabel]
		mesh = &discoveryv1alpha1.MeshSpec{
			Namespace: ns, Version: imageVersion(discovery.Image),
			TrustDomain: cmp.Or(discovery.env("TRUST_DOMAIN"), DefaultTrustDomain),
			Network:     meshNetwork,
		}
	}
	var gateways []discoveryv1alpha1.Gateway
	for _, s := range c.servicesWith("eastwestgateway", NetworkLabel) {
		if s.Metadata.Labels["istio"] != "eastwestgateway" &&
			(s.Spec.Type != "LoadBalancer" || s.Metadata.Labels[NetworkLabel] == "") {
			continue
		}
		network := cmp.Or(s.Metadata.Labels[NetworkLabel],
			c.namespaceLabels(s.Metadata.Namespace, NetworkLabel)[NetworkLabel], meshNetwork)
		gateways = append(gateways, discoveryv1alpha1.Gateway{
			ObjectMeta: metav1.ObjectMeta{Name: s.Metadata.Name, Namespace: s.Metadata.Namespace},
			Spec: discoveryv1alpha1.GatewaySpec{
				Addresses: gatewayAddresses(s),
				Port:      gatewayPort(s),
				Network:   network,
				Selector:  s.Spec.Selector,
			},
		})
	}
	return mesh, gateways
}

// isIstiod reports whether a Deployment runs istiod (also revisioned, as
// istiod-1-24).
func isIstiod(w *workload) bool {
	return w.Metadata.Name == "istiod" || strings.HasPrefix(w.Metadata.Name, "istiod-") ||
		w.Metadata.Labels["app"] == "istiod"
}

// preferIstiod orders istiod candidates: the unrevisioned "istiod" first,
// then by namespace and name.
func preferIstiod(a, b *workload) bool {
	if (a.Metadata.Name == "istiod") != (b.Metadata.Name == "istiod") {
		return a.Metadata.Name == "istiod"
	}
	return cmp.Or(cmp.Compare(a.Metadata.Namespace, b.Metadata.Namespace), cmp.Compare(a.Metadata.Name, b.Metadata.Name)) < 0
}

// gatewayAddresses returns a gateway Service's load-balancer addresses, or
// its external IPs when it has none, unique and in order: those that are
// IPs or DNS names, at most discoveryv1alpha1.MaxGatewayAddresses.
func gatewayAddresses(s *service) []string {
	addrs := []string{}
	add := func(a string) {
		if a != "" && !slices.Contains(addrs, a) && len(addrs) < discoveryv1alpha1.MaxGatewayAddresses &&
			len(discoveryv1alpha1.ValidateAddress(field.NewPath("address"), a)) == 0 {
			addrs = append(addrs, a)
		}
	}
	for _, in := range s.Status.LoadBalancer.Ingress {
		add(cmp.Or(in.IP, in.Hostname))
	}
	if len(addrs) == 0 {
		for _, a := range s.Spec.ExternalIPs {
			add(a)
		}
	}
	return addrs
}

// gatewayPort returns a gateway Service's cross-network port: 15443 when it
// exposes it, else the port named tls-istio-mtls or tls, else 15443.
func gatewayPort(s *service) int32 {
	byName := map[string]int32{}
	for _, p := range s.Spec.Ports {
		if p.Port == GatewayPort {
			return GatewayPort
		}
		byName[p.Name] = p.Port
	}
	if p, ok := byName["tls-istio-mtls"]; ok {
		return p
	}
	if p, ok := byName["tls"]; ok {
		return p
	}
	return GatewayPort
}
