package discovery

import (
	"cmp"

	discoveryv1alpha1 "github.com/meshrelay/meshrelay/api/discovery/v1alpha1"
)

// Names Cilium's detector recognizes.
const (
	// CiliumConfigMap is Cilium's configuration, in the namespace of its
	// agents; CiliumEnvoyConfigKey in it turns CiliumEnvoyConfig on.
	CiliumConfigMap      = "cilium-config"
	CiliumEnvoyConfigKey = "enable-envoy-config"
)

// ciliumDetector finds Cilium.
var ciliumDetector = detector{
	mesh:       discoveryv1alpha1.MeshCilium,
	configMaps: []string{CiliumConfigMap},
	detect:     detectCilium,
}

// detectCilium finds Cilium when a cilium DaemonSet or, without one, a
// cilium-operator Deployment exists (the first of each): its namespace and
// version (the cilium-agent image's tag), with envoyConfig when the
// cilium-config ConfigMap in its namespace sets enable-envoy-config to
// "true".
func detectCilium(c *inventory) (*discoveryv1alpha1.MeshSpec, []discoveryv1alpha1.Gateway) {
	var agents, operator *workload
	for _, w := range c.workloadsWith("cilium") {
		switch {
		case w.Kind == "DaemonSet" && (w.Metadata.Name == "cilium" || w.Metadata.Labels["k8s-app"] == "cilium"):
			agents = cmp.Or(agents, w)
		case w.Kind == "Deployment" && (w.Metadata.Name == "cilium-operator" || w.Metadata.Labels["io.cilium/app"] == "operator"):
			operator = cmp.Or(operator, w)
		}
	}
	w := cmp.Or(agents, operator)
	if w == nil {
		return nil, nil
	}
	ns := w.Metadata.Namespace
	return &discoveryv1alpha1.MeshSpec{
		Namespace: ns, Version: imageVersion(w.container("cilium-agent").Image),
		EnvoyConfig: c.configMapData(ns, CiliumConfigMap)[CiliumEnvoyConfigKey] == "true",
	}, nil
}
