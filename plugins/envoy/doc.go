// Package envoy is meshrelay's Envoy translator: it maps TrafficPolicies,
// AccessPolicies and VirtualDestinations to xDS resources for the Envoy
// proxies and proxyless gRPC clients of every node group (xDS node ID,
// named by the meshrelay.io/envoy-node pod template label and listed in
// the cluster's envoy Mesh) and emits them to the node group's cluster,
// where the agent serves them over ADS.
//
// A node group is one of two kinds, which the meshrelay.io/envoy-proxy pod
// template label next to meshrelay.io/envoy-node says and discovery lists
// in the Mesh's envoyProxies: "envoy", Envoy proxies, which take Listeners
// over LDS only as socket listeners (an api_listener only from their
// bootstrap); or "grpc", proxyless gRPC clients and servers, which look
// their Listeners up by name. A node group no workload labels is "grpc",
// what every node group was before the label existed; when a group's
// workloads disagree it is "envoy".
//
// Every xDS resource travels as a Kubernetes-shaped wrapper (api/xds, the
// codec the agent's xDS server shares):
//
//	apiVersion: xds.meshrelay.io/v1alpha1
//	kind: Listener | RouteConfiguration | Cluster | ClusterLoadAssignment
//	metadata: {name: <xDS resource name>, namespace: <node ID>}
//	spec: {resource: <protobuf JSON of the resource, with "@type">}
//
// xds.Encode builds one, xds.Decode reads and validates one; the agent's
// xDS server uses Decode. What the translator builds for a node group:
//
//   - outbound routes per VirtualDestination port, for "hostname:port":
//     the rules of the TrafficPolicies selecting a backing Service
//     (matches, weighted clusters, retries, timeouts, faults, mirroring,
//     header changes) then a default route to the hostname's Cluster,
//     left out when a rule without matches already takes every request;
//   - the same for the HTTP ports of Services of the node's own cluster
//     that TrafficPolicies select, for "name.namespace.svc.cluster.local";
//     their ports that are not HTTP (below) are left out, with a warning
//     on the policy;
//   - for a "grpc" node group, those routes as api_listener Listeners
//     with an inline RouteConfiguration, named "hostname:port" and
//     "hostname" for the hostname's first port, the name a gRPC client
//     dialing xds:///hostname asks for;
//   - for an "envoy" node group, one socket Listener per outbound port,
//     OutboundListenerName(port), on 0.0.0.0 at that port, whose HTTP
//     connection manager loads over RDS the RouteConfiguration
//     OutboundRouteName(port), with one virtual host per hostname at that
//     port (domains "hostname" and "hostname:port");
//   - for a route or mirror destination that is a Service with a subset,
//     the EDS Cluster SubsetClusterName ("svc|cluster|namespace|name|port|
//     key=value,..."), whose ClusterLoadAssignment has only the endpoints
//     whose pods carry every label of the subset, so weighted splits
//     between subsets (a canary) work as on Istio. A pod's labels are the
//     pod template labels of the Service's Deployment, StatefulSet or
//     DaemonSet that named it (the longest workload name that, with a
//     dash, begins the EndpointSlice targetRef's pod name); an endpoint
//     without a Pod targetRef, or whose pod no workload claims, is in no
//     subset. A subset no workload of the Service carries is an error and
//     its rule is left out, as on Istio. A subset of a VirtualDestination
//     is not supported: it is ignored with a warning and every endpoint
//     of the VirtualDestination receives the traffic;
//   - EDS Clusters (ROUND_ROBIN, outlier detection) and their
//     ClusterLoadAssignments with the ready endpoints of every backing
//     Service in every cluster, one locality per region, zone and cluster
//     (the sub-zone), weighted by endpoint count, with priorities from the
//     failover order. A Service in a cluster on another network than the
//     node group's (the network its meshes report, Istio's
//     topology.istio.io/network) is reached, as the Istio backend reaches
//     it, through that cluster's east-west gateways: each gateway IP
//     address at its cross-network port (15443 unless discovered
//     otherwise) stands for the Service's endpoints of a locality,
//     weighted by their number. Without a discovered gateway with an IP
//     address (hostnames are left out) those endpoints are left out, with
//     a warning; so are a subset's, which a gateway cannot narrow traffic
//     to. The Clusters carry no TLS, and an Istio gateway's
//     AUTO_PASSTHROUGH port routes by the SNI of Istio mTLS, so this only
//     reaches a gateway that forwards plaintext. An "envoy" node group's
//     Clusters, these and the inbound ones, speak upstream the HTTP
//     version requests came in with (HTTPProtocolOptions,
//     use_downstream_protocol_config), so gRPC stays HTTP/2;
//   - per ready endpoint of a Service whose workloads belong to the node
//     group, an inbound Listener named InboundListenerPrefix+"ip:port",
//     on that address, enforcing the AccessPolicies selecting the Service
//     (default deny once one does). On an HTTP port its HTTP connection
//     manager carries the RBAC HTTP filter; in a "grpc" node group it loads
//     over RDS a RouteConfiguration whose one route is a non-forwarding
//     action, what an xDS-enabled gRPC server serves by, and in an "envoy"
//     node group its inline route sends every request to the STATIC
//     Cluster InboundClusterName(port), the workload at 127.0.0.1 at the
//     workload port. On a port of another protocol it has the RBAC
//     network filter (envoy.filters.network.rbac) and a TCP proxy
//     (envoy.filters.network.tcp_proxy) to that same Cluster; a policy
//     naming methods or paths admits nothing there, with a warning. A
//     policy's ports are Service ports and the filter sees the port a
//     connection arrives on, so its permission names the ports they
//     forward to (sdk.Cluster.TargetPorts): a numeric targetPort as is, a
//     named one as the number each of the Service's workloads gives that
//     container port. A port that does not resolve is left out with a
//     warning naming the Service and the port, and a policy none of whose
//     ports resolves admits nothing there.
//
// A port's protocol is selected as Istio selects it: its appProtocol when
// set, else its name, "<protocol>" or "<protocol>-<suffix>". tcp, tls,
// https, mongo, mysql, redis and kubernetes.io/wss are not HTTP; http,
// http2, grpc, grpc-web, kubernetes.io/h2c and kubernetes.io/ws are, and
// so is a port whose protocol is unknown or not said, which Istio would
// sniff and this backend serves as HTTP.
//
// Not supported: VirtualDestination TCP and TLS ports (skipped with a
// warning) and outbound routing of Service ports that are not HTTP; subsets
// of a VirtualDestination, and subsets of a Service on another network
// (both with a warning); east-west gateways known only by hostname; TLS on
// any Listener or Cluster (so an Istio east-west gateway's mTLS port is
// reached in plaintext): inbound Listeners carry no TLS transport socket,
// so a gRPC server must bring its own TLS credentials for the RBAC
// principals to see a client certificate, and an "envoy" node group sees
// none, so there an AccessPolicy admits no client. For "envoy" node groups
// also traffic interception: clients reach the outbound Listeners at
// 0.0.0.0:port themselves, the inbound Listeners bind the Pod's address, so
// the workload must listen on 127.0.0.1 only, and an outbound port equal to
// a workload port of the same proxy cannot be bound twice.
//
// # Targets and what they read
//
// The translator is an sdk.Translator: it computes one target
// cluster's outputs at a time, and after a change the SDK computes again
// only the targets whose reads the change concerns. A target reads:
//
//   - its own presence and meshes, and the VirtualDestination warnings
//     (below) — all a target without the envoy mesh, or without node
//     groups in its envoy Mesh, reads;
//   - its own Mesh resources (node groups and their kinds), Nodes (its
//     region, for Locality failover), Services, Deployments, StatefulSets and
//     DaemonSets (which node group a Service's workloads belong to), and
//     the endpoints of its Services that TrafficPolicies select or whose
//     workloads belong to a node group;
//   - the TrafficPolicies, AccessPolicies and VirtualDestinations;
//   - the shared value (sdk.NewShared) of every VirtualDestination's backing
//     Services — cluster, namespace, name, labels and ports — and of the
//     warnings on the Services they list that do not exist. A change to a
//     Service elsewhere computes the value again, and the targets only when
//     the value changes;
//   - of other clusters, only what its Clusters and ClusterLoadAssignments
//     serve: each backing Service's cluster (presence) and endpoints (with
//     its cluster's Nodes, for localities), and the Services and endpoints
//     TrafficPolicy routes name, with, for a route to a subset, that
//     Service's cluster's Deployments, StatefulSets and DaemonSets, and
//     the meshes (network) and east-west gateways of those clusters.
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
