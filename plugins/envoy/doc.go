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
//     faults, mirroring, header changes) then a default route;
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
//     RouteConfiguration over RDS.
//
// Client identities are SPIFFE IDs spiffe://CLUSTER/ns/NAMESPACE/sa/ACCOUNT
// carried in the URI SAN of client certificates.
package envoy
