package discovery

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	discoveryv1alpha1 "github.com/meshrelay/meshrelay/api/discovery/v1alpha1"
	"github.com/meshrelay/meshrelay/api/snapshot"
)

// Names of Linkerd's objects that discovery recognizes.
const (
	// LinkerdDestination is the Deployment of Linkerd's destination
	// controller; its container "destination" takes the identity trust
	// domain as -identity-trust-domain.
	LinkerdDestination = "linkerd-destination"
	// LinkerdConfigMap holds Linkerd's install values (key "values"),
	// among them identityTrustDomain.
	LinkerdConfigMap = "linkerd-config"
	// LinkerdTrustRootsConfigMap holds Linkerd's trust anchors, PEM, in
	// the key ca-bundle.crt.
	LinkerdTrustRootsConfigMap = "linkerd-identity-trust-roots"
	// LinkerdGateway is the Deployment of Linkerd multicluster's gateway.
	LinkerdGateway = "linkerd-gateway"
	// LinkerdMirrorClusterLabel on a service mirror Deployment names the
	// cluster its Link targets.
	LinkerdMirrorClusterLabel = "mirror.linkerd.io/cluster-name"
	// LinkerdMulticlusterGroup is the group of Linkerd multicluster's Link.
	LinkerdMulticlusterGroup = "multicluster.linkerd.io"
)

// linkerdDetector finds Linkerd.
var linkerdDetector = detector{
	mesh:       discoveryv1alpha1.MeshLinkerd,
	configMaps: []string{LinkerdConfigMap, LinkerdTrustRootsConfigMap},
	detect: func(c *inventory) (*discoveryv1alpha1.MeshSpec, []discoveryv1alpha1.Gateway) {
		if m, ok := detectLinkerd(c.objects); ok {
			return &m.Spec, nil
		}
		return nil, nil
	},
}

// linkerdDeployment is the part of a Deployment detectLinkerd reads.
type linkerdDeployment struct {
	Metadata metav1.ObjectMeta `json:"metadata"`
	Spec     struct {
		Template struct {
			Spec struct {
				Containers []struct {
					Name  string   `json:"name"`
					Image string   `json:"image"`
					Args  []string `json:"args"`
				} `json:"containers"`
			} `json:"spec"`
		} `json:"template"`
	} `json:"spec"`
}

// detectLinkerd returns Mesh "linkerd" when the objects hold a
// linkerd-destination Deployment (by name, or the label
// linkerd.io/control-plane-component=destination):
//
//   - namespace and version (the destination container's image tag);
//   - trustDomain: identityTrustDomain of the linkerd-config ConfigMap's
//     values when present, else the destination container's
//     -identity-trust-domain, else cluster.local;
//   - trustAnchors: the SHA-256 fingerprints of the certificates in the
//     linkerd-identity-trust-roots ConfigMap, sorted, when present;
//   - multicluster, when a Link (multicluster.linkerd.io) or a
//     linkerd-gateway Deployment exists, and linkedClusters: the Links'
//     spec.targetClusterName and the service mirror Deployments' label
//     mirror.linkerd.io/cluster-name, sorted and unique.
//
// Objects that cannot be decoded are ignored.
func detectLinkerd(objects []snapshot.Resource) (discoveryv1alpha1.Mesh, bool) {
	var sc linkerdScan
	for _, r := range objects {
		id := r.ID
		switch {
		case id.Group == "apps" && id.Kind == "Deployment":
			sc.deployment(r)
		case id.Group == LinkerdMulticlusterGroup && id.Kind == "Link":
			sc.link(r)
		case id.Group == "" && id.Kind == "ConfigMap" && (id.Name == LinkerdConfigMap || id.Name == LinkerdTrustRootsConfigMap):
			sc.configMap(r)
		}
	}
	if sc.dest == nil {
		return discoveryv1alpha1.Mesh{}, false
	}
	image, argDomain := destinationImageAndDomain(sc.dest)
	slices.Sort(sc.linked)
	return discoveryv1alpha1.Mesh{
		TypeMeta:   metav1.TypeMeta{APIVersion: discoveryv1alpha1.APIVersion, Kind: "Mesh"},
		ObjectMeta: metav1.ObjectMeta{Name: discoveryv1alpha1.MeshLinkerd},
		Spec: discoveryv1alpha1.MeshSpec{
			Type: discoveryv1alpha1.MeshLinkerd, Namespace: sc.dest.Metadata.Namespace, Version: imageVersion(image),
			TrustDomain:    cmp.Or(sc.configDomain, argDomain, DefaultTrustDomain),
			TrustAnchors:   sc.anchors,
			Multicluster:   sc.multicluster,
			LinkedClusters: slices.Compact(sc.linked),
		},
	}, true
}

// linkerdScan is what detectLinkerd found so far.
type linkerdScan struct {
	dest         *linkerdDeployment
	configDomain string
	anchors      []string
	multicluster bool
	linked       []string
}

// deployment reads a Deployment: the destination controller (the first by
// namespace), the multicluster gateway, a service mirror's linked cluster.
func (sc *linkerdScan) deployment(r snapshot.Resource) {
	if !bytes.Contains(r.Body, []byte("linkerd")) {
		return
	}
	var d linkerdDeployment
	if err := json.Unmarshal(r.Body, &d); err != nil {
		return
	}
	switch {
	case d.Metadata.Name == LinkerdDestination || d.Metadata.Labels["linkerd.io/control-plane-component"] == "destination":
		if sc.dest == nil || cmp.Compare(d.Metadata.Namespace, sc.dest.Metadata.Namespace) < 0 {
			sc.dest = &d
		}
	case d.Metadata.Name == LinkerdGateway:
		sc.multicluster = true
	}
	if c := d.Metadata.Labels[LinkerdMirrorClusterLabel]; c != "" {
		sc.linked = append(sc.linked, c)
	}
}

// link reads a multicluster Link: its target cluster.
func (sc *linkerdScan) link(r snapshot.Resource) {
	var l struct {
		Spec struct {
			TargetClusterName string `json:"targetClusterName"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(r.Body, &l); err != nil {
		return
	}
	sc.multicluster = true
	if l.Spec.TargetClusterName != "" {
		sc.linked = append(sc.linked, l.Spec.TargetClusterName)
	}
}

// configMap reads linkerd-config (the trust domain) or the trust roots.
func (sc *linkerdScan) configMap(r snapshot.Resource) {
	var cm struct {
		Data map[string]string `json:"data"`
	}
	if err := json.Unmarshal(r.Body, &cm); err != nil {
		return
	}
	if r.ID.Name == LinkerdTrustRootsConfigMap {
		sc.anchors = certificateFingerprints(cm.Data["ca-bundle.crt"])
		return
	}
	var values struct {
		IdentityTrustDomain string `json:"identityTrustDomain"`
	}
	if yaml.Unmarshal([]byte(cm.Data["values"]), &values) == nil {
		sc.configDomain = values.IdentityTrustDomain
	}
}

// destinationImageAndDomain returns the destination container's image and
// its -identity-trust-domain argument.
func destinationImageAndDomain(dest *linkerdDeployment) (image, domain string) {
	cs := dest.Spec.Template.Spec.Containers
	if len(cs) == 0 {
		return "", ""
	}
	c := cs[0]
	for _, cc := range cs {
		if cc.Name == "destination" {
			c = cc
			break
		}
	}
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "-identity-trust-domain="); ok {
			domain = v
		}
	}
	return c.Image, domain
}

// certificateFingerprints returns the SHA-256 fingerprints, hex, of the
// certificates in a PEM bundle, sorted and unique.
func certificateFingerprints(bundle string) []string {
	var out []string
	rest := []byte(bundle)
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		sum := sha256.Sum256(b.Bytes)
		out = append(out, hex.EncodeToString(sum[:]))
	}
	slices.Sort(out)
	return slices.Compact(out)
}
