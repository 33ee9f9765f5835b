// Package catalog derives the fleet's discovery objects — Meshes,
// Workloads and Destinations (api/discovery/v1alpha1) — from the clusters'
// input snapshots, for people to read through the admin API and, when the
// server is asked to, as custom resources in the management cluster.
//
// It is derived state: nothing here is an input to translation, and a
// cluster's objects go when its input does.
//
//	c := catalog.Derive("west", input) // one cluster, from its snapshot
//	fleet := catalog.Join(clusters)   // the fleet, and which Services it has where
//
// A Cache keeps each cluster's derivation while its input's hash stays the
// same, and the joined fleet while no input changed, so that serving a
// list costs a comparison of hashes, not a decode of the fleet
// (go test -bench . ./core/catalog/). One derivation runs at a time;
// Cache.Current answers with the fleet last derived instead of waiting for
// one of many clusters (a thousand clusters' inputs take seconds). When a
// few clusters changed, the new fleet is the last one with those clusters
// replaced, which costs what changed, not a pass over every cluster's
// objects: while its catalog is read, the server keeps it warm after
// every one-cluster change (go test -bench FleetOneChanged
// ./core/catalog/).
//
// A Cluster holds the specs of its Workloads and Destinations
// (discoveryapi.WorkloadSpec, DestinationSpec), not the objects: a
// reader wanting the object form, as the server's discovery writer
// (core/server/discoverycrds.go) does, builds it from the spec.
//
// Clusters share what they have in common, since the same application
// runs in many of them: each string of a spec is the canonical copy of
// package unique, and each label map, Service port list and list of
// strings the one canonical value equal to it (intern.go). So nothing a
// Cluster or Fleet exposes may be modified by any reader: no spec, label
// map or slice. The shared values are held weakly by the process and
// strongly by the Clusters using them, so they go with the last cluster
// that has them, and names an agent chooses cannot grow them beyond what
// its clusters hold. go test -run '^$' -bench Retained ./core/catalog/
// reports the heap a Cache keeps per cluster of 50 services. Derive
// decodes only the members of its inputs the rules below read
// (inputs.go), under the JSON names of k8s.io/api's types, with
// encoding/json's rules on the v2 engine
// (github.com/go-json-experiment/json/v1), which decodes the same at
// about half the cost (go test -bench Derive ./core/catalog/).
//
// The rules, the same for every source of inputs:
//
//   - A Workload is a Deployment, StatefulSet or DaemonSet: its pod
//     template's labels and service account ("default" when unset), its
//     desired replicas, the Services of its namespace whose selector
//     matches its pods, and the endpoints of those Services that are its
//     pods — an EndpointSlice endpoint whose Pod targetRef's name begins
//     with the workload's name and a dash (the longest such name wins, as
//     Kubernetes names pods), with the region and zone of their nodes.
//   - Its meshes: istio when the cluster runs Istio and its namespace has
//     istio-injection=enabled or an istio.io/rev label, or its pod template
//     says sidecar.istio.io/inject "true" (label or annotation), and the
//     template does not say "false"; linkerd when the cluster runs Linkerd
//     and the linkerd.io/inject annotation of its pod template, else of its
//     namespace, is "enabled" or "ingress"; cilium when the cluster runs Cilium;
//     envoy when the template carries meshrelay.io/envoy-node.
//   - A Destination is a Service: its labels, type, ports, the workloads
//     its selector matches, its endpoints and the meshes of its workloads.
//     A Fleet counts the clusters with a Service of the same namespace and
//     name; each Destination does not list them, so that a cluster joining
//     changes no other cluster's objects.
//   - Meshes are the agent's Mesh resources, with the cluster set and the
//     number of workloads in each.
package catalog
