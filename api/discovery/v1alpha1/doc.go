// Package v1alpha1 holds the discovery.meshrelay.io/v1alpha1 kinds: internal
// resources an agent computes about its cluster and sends in its input
// snapshot beside the Kubernetes objects it discovered. They are not CRDs;
// they exist only in snapshots.
//
//   - Mesh: a mesh control plane or data plane found in the cluster (Istio,
//     Cilium, or standalone Envoy proxies).
//   - Gateway: an east-west gateway through which other clusters reach this
//     one, with its reachable addresses.
package v1alpha1
