// Package v1alpha1 holds the discovery.meshrelay.io/v1alpha1 kinds: internal
// resources describing what runs in the fleet's clusters.
//
// An agent computes two of them about its cluster and sends them in its
// input snapshot beside the Kubernetes objects it discovered:
//
//   - Mesh: a mesh control plane or data plane found in the cluster (Istio,
//     Cilium, or standalone Envoy proxies).
//   - Gateway: an east-west gateway through which other clusters reach this
//     one, with its reachable addresses.
//
// A Gateway's addresses reach other clusters' outputs, so [Gateway.Validate]
// bounds them: IPs or DNS-1123 names ([ValidateAddress]), at most
// MaxGatewayAddresses per gateway and MaxGateways per cluster. Agents send
// only valid Gateways; the server refuses an input with an invalid one.
//
// The server derives two more from every cluster's inputs (core/catalog),
// for people to read; they are never an input to translation:
//
//   - Workload: a controller's pods with their service account, labels,
//     localities and meshes.
//   - Destination: a Service in one cluster with its ports, backing
//     workloads and endpoints.
//
// The admin API serves Meshes, Workloads and Destinations; with
// --discovery-crds the server also writes them into the management cluster
// as custom resources, whose CRDs in deploy/crds are generated from these
// types by controller-gen. zz_generated.deepcopy.go is generated too.
//
// +kubebuilder:object:generate=true
// +groupName=discovery.meshrelay.io
package v1alpha1
