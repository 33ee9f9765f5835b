// Package envoy is meshrelay's Envoy translator: it maps TrafficPolicies,
// AccessPolicies and VirtualDestinations to xDS resources for the Envoy
// proxies and proxyless gRPC clients of every node group (xDS node ID,
// named by the meshrelay.io/envoy-node pod template label and listed in
// the cluster's envoy Mesh) and emits them to the node group's cluster,
// where the agent serves them over ADS.
//
// Every xDS resource travels as a Kubernetes-shaped wrapper [Object]:
//
//	apiVersion: xds.meshrelay.io/v1alpha1
//	kind: Listener | RouteConfiguration | Cluster | ClusterLoadAssignment
//	metadata: {name: <xDS resource name>, namespace: <node ID>}
//	spec: {resource: <protobuf JSON of the resource, with "@type">}
//
// [Encode] builds one, [Decode] reads and validates one; the agent's xDS
// server uses Decode. What the translator builds for a node group:
//
//   - per VirtualDestination port, an api_listener Listener named
//     "hostname:port" (and "hostname" for its first port, the name a gRPC
//     client dialing xds:///hostname asks for) with an inline
//     RouteConfiguration: the rules of the TrafficPolicies selecting a
//     backing Service (matches, weighted clusters, retries, timeouts,
//     faults, mirroring, header changes) then a default route, left out
//     when a rule without matches already takes every request;
//   - the same for Services of the node's own cluster that TrafficPolicies
//     select, named after "name.namespace.svc.cluster.local";
//   - EDS Clusters (ROUND_ROBIN, outlier detection) and their
//     ClusterLoadAssignments with the ready endpoints of every backing
//     Service in every cluster, one locality per region, zone and cluster
//     (the sub-zone), weighted by endpoint count, with priorities from the
//     failover order;
//   - per ready endpoint of a Service whose workloads belong to the node
//     group, an inbound Listener named InboundListenerPrefix+"ip:port" whose
//     HTTP connection manager carries the RBAC filter of the AccessPolicies
//     selecting the Service (default deny once one does) and loads a
//     RouteConfiguration over RDS. A policy's ports are Service ports and
//     the filter sees the port a connection arrives on, so its permission
//     names the ports they forward to (sdk.Cluster.TargetPorts): a numeric
//     targetPort as is, a named one as the number each of the Service's
//     workloads gives that container port. A port that does not resolve is
//     left out with a warning naming the Service and the port, and a policy
//     none of whose ports resolves admits nothing there.
//
// # Targets and what they read
//
// The translator is an sdk.TargetTranslator: it computes one target
// cluster's outputs at a time, and after a change the SDK computes again
// only the targets whose reads the change concerns. A target reads:
//
//   - its own presence and meshes, and the VirtualDestination warnings
//     (below) — all a target without the envoy mesh, or without node
//     groups in its envoy Mesh, reads;
//   - its own Mesh resources (node groups), Nodes (its region, for
//     Locality failover), Services, Deployments, StatefulSets and
//     DaemonSets (which node group a Service's workloads belong to), and
//     the endpoints of its Services that TrafficPolicies select or whose
//     workloads belong to a node group;
//   - the TrafficPolicies, AccessPolicies and VirtualDestinations;
//   - the shared value (sdk.Shared) of every VirtualDestination's backing
//     Services — cluster, namespace, name, labels and ports — and of the
//     warnings on the Services they list that do not exist. A change to a
//     Service elsewhere computes the value again, and the targets only when
//     the value changes;
//   - of other clusters, only what its Clusters and ClusterLoadAssignments
//     serve: each backing Service's cluster (presence) and endpoints (with
//     its cluster's Nodes, for localities), and the Services and endpoints
//     TrafficPolicy routes name.
//
// So a change to a Service, workload or EndpointSlice that no
// VirtualDestination or TrafficPolicy route exports computes its own
// cluster's target alone; a change to the endpoints (or Nodes) behind a
// VirtualDestination's backing Service computes every target with envoy
// node groups, since each imports every VirtualDestination, and behind a
// Service a TrafficPolicy route names, the targets whose routes name it; a
// policy change computes every target with envoy node groups.
//
// Client identities are SPIFFE IDs spiffe://CLUSTER/ns/NAMESPACE/sa/ACCOUNT
// carried in the URI SAN of client certificates.
package envoy
