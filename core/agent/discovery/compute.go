package discovery

import (
	"encoding/json"
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	discoveryv1alpha1 "github.com/meshrelay/meshrelay/api/discovery/v1alpha1"
	"github.com/meshrelay/meshrelay/api/snapshot"
)

// A detector finds one mesh in a cluster's objects. Each mesh's detector
// is in a file of its own (istio.go, cilium.go, envoy.go, linkerd.go) and
// has a row in detectors.
type detector struct {
	// mesh is the name and type of the Mesh the detector finds
	// (discoveryv1alpha1.MeshIstio, …).
	mesh string
	// configMaps names the ConfigMaps the detector reads: they are read
	// only for what it derives from them, never inputs (see derivedOnly).
	configMaps []string
	// detect returns the spec of the Mesh when the cluster runs it, else
	// nil, and the mesh's Gateways. Compute fills in the Mesh's type and
	// the Gateways' kind and mesh, and keeps only valid Gateways.
	detect func(c *inventory) (*discoveryv1alpha1.MeshSpec, []discoveryv1alpha1.Gateway)
}

// detectors are the meshes Compute finds, one row a mesh.
var detectors = []detector{
	istioDetector,
	ciliumDetector,
	envoyDetector,
	linkerdDetector,
}

// Compute derives the internal discovery.meshrelay.io resources from a
// cluster's objects: a Mesh per mesh the cluster runs and the meshes' east-west
// Gateways, as each mesh's detector says (istio.go, cilium.go, envoy.go,
// linkerd.go):
//
//   - Mesh "istio" when an istiod Deployment exists, and a Gateway per
//     east-west gateway Service ([detectIstio]);
//   - Mesh "cilium" when a cilium DaemonSet or cilium-operator Deployment
//     exists ([detectCilium]);
//   - Mesh "envoy" when workloads carry meshrelay.io/envoy-node
//     ([detectEnvoy]);
//   - Mesh "linkerd" when a linkerd-destination Deployment exists
//     ([detectLinkerd]).
//
// Objects that cannot be decoded are ignored, and so are Gateways the server
// would refuse (invalid, or more than discoveryv1alpha1.MaxGateways). The
// result is sorted by ID. Detectors decode only the objects that can matter
// to them, so Compute costs little on large clusters.
func Compute(objects []snapshot.Resource) []snapshot.Resource {
	c := newInventory(objects)
	var meshes, gateways []snapshot.Resource
	for _, d := range detectors {
		spec, gws := d.detect(c)
		if spec != nil {
			spec.Type = d.mesh
			meshes = appendObject(meshes, discoveryv1alpha1.Mesh{
				TypeMeta:   metav1.TypeMeta{APIVersion: discoveryv1alpha1.APIVersion, Kind: "Mesh"},
				ObjectMeta: metav1.ObjectMeta{Name: d.mesh},
				Spec:       *spec,
			})
		}
		// The server refuses an input with more Gateways or an invalid one
		// (an address that is not an IP or a DNS name, say): a Service in a
		// directory of YAML can hold anything.
		for _, g := range gws {
			g.TypeMeta = metav1.TypeMeta{APIVersion: discoveryv1alpha1.APIVersion, Kind: "Gateway"}
			g.Spec.Mesh = d.mesh
			if len(gateways) == discoveryv1alpha1.MaxGateways || len(g.Validate()) > 0 {
				continue
			}
			gateways = appendObject(gateways, g)
		}
	}
	out := append(meshes, gateways...)
	slices.SortFunc(out, func(a, b snapshot.Resource) int { return a.ID.Compare(b.ID) })
	return out
}

// appendObject appends obj to rs as a resource, unless it cannot be one.
func appendObject(rs []snapshot.Resource, obj any) []snapshot.Resource {
	body, err := json.Marshal(obj)
	if err != nil {
		return rs
	}
	r, err := snapshot.FromJSON(body)
	if err != nil {
		return rs
	}
	return append(rs, r)
}

// derivedOnly reports whether an object is read only for what Compute
// derives from it and is never an input itself: a ConfigMap a detector
// reads, such as Cilium's cilium-config.
func derivedOnly(id snapshot.ID) bool {
	if id.Group != "" || id.Kind != "ConfigMap" {
		return false
	}
	for _, d := range detectors {
		if slices.Contains(d.configMaps, id.Name) {
			return true
		}
	}
	return false
}

// assemble builds a snapshot from discovered objects: the kept ones plus
// what Compute derives from all of them.
func assemble(version uint64, kept, all []snapshot.Resource) (*snapshot.Snapshot, error) {
	rs := append(slices.Clip(kept), Compute(all)...)
	s, err := snapshot.New(version, rs)
	if err != nil {
		return nil, fmt.Errorf("build snapshot: %w", err)
	}
	return s, nil
}
