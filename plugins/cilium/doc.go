// Package cilium is meshrelay's Cilium translator: it maps the fleet's
// policies to Cilium resources for every cluster where discovery found
// Cilium. cmd/meshrelay-plugin-cilium serves it as a plugin.
//
// The translator is an [sdk.Translator]: it computes one target
// cluster's outputs at a time, and after a change the SDK computes again
// only the targets whose reads the change concerns (see "What a target
// reads" below).
//
// # AccessPolicy → CiliumNetworkPolicy
//
// An AccessPolicy becomes, in each Cilium cluster where it selects
// destinations, one CiliumNetworkPolicy in the destinations' namespace —
// or one CiliumClusterwideNetworkPolicy whose rules name the namespace
// when the destinations span namespaces — with one rule per destination:
//
//   - endpointSelector: the destination Service's selector;
//   - fromEndpoints: the clients by their Cilium identity labels —
//     k8s:io.cilium.k8s.policy.serviceaccount, k8s:io.kubernetes.pod.namespace
//     and k8s:io.cilium.k8s.policy.cluster. Every selector states the
//     namespace and the cluster (In, or Exists for "any"), so that Cilium
//     neither narrows it to the policy's namespace nor, under
//     policy-default-local-cluster, to the local cluster: clients in other
//     clusters of the ClusterMesh are admitted as the policy says. Cilium's
//     cluster names are taken to be the fleet's cluster names;
//   - toPorts: the ports the policy's ports — Service ports — forward to
//     (sdk.Cluster.TargetPorts): a numeric targetPort as is, a named one
//     as the container port name, which Cilium resolves per endpoint; TCP
//     only when there are HTTP rules. A port that does not resolve — not a
//     port of the Service, or a name no container port of the Service's
//     workloads has — is left out with a warning naming the Service and the
//     port;
//   - rules.http: one rule per method and path, paths as Cilium's
//     regular expressions: "/x" → "^/x$", "/x*" → "^/x.*". Where Istio
//     runs too, its sidecars encrypt the traffic that Cilium's proxy would
//     read, so the rules there stop at L4 and the Istio translator's
//     AuthorizationPolicy enforces methods and paths.
//
// Cilium admits what any rule selecting an endpoint admits, and a rule with
// ingress rules turns on default-deny: that is the AccessPolicy semantics.
// A DenyAll policy therefore becomes rules with `ingress: [{}]` — an
// ingress rule with neither peers nor ports, which matches no traffic but
// turns on default-deny (enableDefaultDeny.ingress is set to say so). It is
// not `ingressDeny`, which would override the Allow policies, nor an empty
// ingress list, which leaves ingress unenforced and which Cilium's
// sanitizer refuses. A DenyAll selector naming whole namespaces selects
// every endpoint of each namespace (endpointSelector: {}). An Allow policy
// whose ports or client selectors leave nothing to admit for a destination
// gets such a rule too, so the destination is still default-deny, and a
// warning.
//
// # VirtualDestination → ClusterMesh global services
//
// Each backing Service in a Cilium cluster gets a patch that carries only
// metadata — name, namespace, the ownership labels and the annotations
// service.cilium.io/global: "true" and service.cilium.io/affinity — and
// meshrelay.io/patch: "true" ([PatchAnnotation]). Applied with server-side
// apply, meshrelay's field manager owns those fields and nothing else: the
// Service's spec stays with whoever created it. A patch is emitted only
// for Services discovered in the cluster; the annotation tells a sink not
// to refuse the Service for lacking meshrelay's ownership label and, once
// the patch is no longer desired, to release its fields rather than delete
// the Service. Affinity comes from the failover:
// Locality → local; Priority → local in the most preferred cluster among
// the backends' and remote in the others; no failover → none.
//
// The Cilium policies of the AccessPolicies that select a backing Service
// list the VirtualDestination among their parents: they are what admits the
// VirtualDestination's clients from other clusters once traffic fails over
// (their client selectors name clusters explicitly, see above). Warnings on
// the VirtualDestination say what global services cannot express: the
// hostname, outlier detection, an order among more than two clusters,
// backing Services of different names, clusters whose clients the global
// service does not reach because their own Service is not a backend, and
// backends selected by AccessPolicies in some clusters but not in others.
//
// # TrafficPolicy
//
// Cilium's network policies and global services carry no HTTP routing;
// Cilium's Envoy does, where it takes CiliumEnvoyConfig (discovery's Mesh
// says envoyConfig, from enable-envoy-config in Cilium's cilium-config
// ConfigMap). In a target running Cilium and not Istio (where Istio runs,
// its translator serves the policy):
//
//   - with envoyConfig, each Service that TrafficPolicies select gets a
//     CiliumEnvoyConfig "traffic-<service>-<hash>" in its namespace. Each
//     of its TCP ports that carries HTTP (envoyroute.TCPPort: Istio's
//     rules) is redirected to a listener "http-<port>" whose HTTP
//     connection manager holds the routes inline: the policies' rules in
//     order (envoyroute.Routes, the envoy backend's translation), then the
//     Service at that port. Route, mirror and default destinations are EDS
//     clusters "namespace:name:port" whose endpoints Cilium syncs, listed
//     in backendServices; Cilium qualifies these names with the config's
//     namespace and name in the clusters and routes alike. A rule whose
//     destination is a subset, a VirtualDestination or a Service of
//     another cluster is left out with a warning from the target; fault
//     injection is dropped with a warning, since Cilium's Envoy is built
//     without the fault filter. A Service none of whose rules is left, or
//     without an HTTP port, gets no config.
//   - without it, each routing, retry, timeout, fault, mirror and header
//     field of each rule gets a warning with its path, naming the
//     clusters where it is not applied, and nothing is emitted.
//
// # What a target reads
//
// A target without Cilium reads only its own meshes and gets nothing. A
// target with Cilium reads:
//
//   - its own cluster: its meshes and Mesh resources (Istio turns the
//     HTTP rules off; envoyConfig turns CiliumEnvoyConfig on), its
//     Services (Cluster.Select for the destinations and backing Services
//     that live there, Cluster.Service for the ones a VirtualDestination
//     lists or a TrafficPolicy routes to), its Namespaces when a DenyAll policy names whole
//     namespaces, and its workloads (Deployments, StatefulSets,
//     DaemonSets; the Service's endpoints when none backs it) when a port
//     it admits forwards to a named targetPort;
//   - every AccessPolicy, VirtualDestination and TrafficPolicy;
//   - values computed once per state of the fleet and shared by every
//     target that asks (sdk.NewSharedMap), so that a target depends on the value
//     and not on every cluster it was derived from:
//     "cilium/runs-cilium/<cluster>", whether a cluster that an
//     AccessPolicy names among its clients runs Cilium (for the warning
//     about clients Cilium cannot identify);
//     "cilium/virtual-destination/<policy>", for each VirtualDestination
//     with a backing Service in the target, the clusters of its backends
//     (Priority failover's affinity) and its warnings as a whole;
//     "cilium/traffic-policy/<policy>", for each TrafficPolicy selecting a
//     Service of the target when it runs Cilium without Istio, its
//     warnings, which name every cluster where it is not applied (derived
//     from the meshes and Mesh resources of the clusters it selects in).
//
// No target reads another cluster's objects directly: the client
// selectors name clusters as the policies do. So a change to a Service or
// Namespace of one cluster computes that target only, unless it changes a
// shared value — which Services back a VirtualDestination and which of
// those AccessPolicies select, or which Services a TrafficPolicy selects —
// and then also the targets using that value: those with backends of the
// VirtualDestination (their affinity or warnings change), or with Services
// the TrafficPolicy selects. A policy change computes every target with
// Cilium. Workloads are read only to resolve named target ports: a change
// to a Deployment computes its cluster's target when that target admits a
// port forwarding to a named targetPort, and nothing otherwise. Each target reports the warnings that concern it; the warnings
// about a policy as a whole are reported by every target they concern,
// and the SDK removes the duplicates. incremental_test.go checks these
// claims.
//
// # Output
//
// Output is sorted and deterministic. Object names are a readable prefix
// with a hash of the policy's reference, at most 63 characters. The SDK
// stamps the ownership labels and the meshrelay.io/policies annotation on
// every object; each rule's description names its policy and destination.
package cilium
