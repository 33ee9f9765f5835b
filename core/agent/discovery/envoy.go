package discovery

import (
	"slices"

	discoveryv1alpha1 "github.com/meshrelay/meshrelay/api/discovery/v1alpha1"
)

// envoyDetector finds standalone Envoy (and proxyless gRPC) node groups.
var envoyDetector = detector{mesh: discoveryv1alpha1.MeshEnvoy, detect: detectEnvoy}

// detectEnvoy finds the "envoy" mesh when workloads carry
// meshrelay.io/envoy-node (on the pod template, else on the workload): the
// label's values sorted and unique in envoyNodes and, for the node groups
// whose workloads label meshrelay.io/envoy-proxy "envoy" or "grpc" in the
// same place, that value in envoyProxies — "envoy" when the group's
// workloads disagree.
func detectEnvoy(c *inventory) (*discoveryv1alpha1.MeshSpec, []discoveryv1alpha1.Gateway) {
	var (
		nodes   []string
		proxies map[string]string
	)
	for _, w := range c.workloadsWith(discoveryv1alpha1.EnvoyNodeLabel) {
		labels := w.Spec.Template.Metadata.Labels
		if labels[discoveryv1alpha1.EnvoyNodeLabel] == "" {
			labels = w.Metadata.Labels
		}
		node := labels[discoveryv1alpha1.EnvoyNodeLabel]
		if node == "" {
			continue
		}
		nodes = append(nodes, node)
		switch p := labels[discoveryv1alpha1.EnvoyProxyLabel]; p {
		case discoveryv1alpha1.EnvoyProxyEnvoy, discoveryv1alpha1.EnvoyProxyGRPC:
			if proxies == nil {
				proxies = map[string]string{}
			}
			if proxies[node] != discoveryv1alpha1.EnvoyProxyEnvoy {
				proxies[node] = p
			}
		}
	}
	if len(nodes) == 0 {
		return nil, nil
	}
	slices.Sort(nodes)
	return &discoveryv1alpha1.MeshSpec{EnvoyNodes: slices.Compact(nodes), EnvoyProxies: proxies}, nil
}
