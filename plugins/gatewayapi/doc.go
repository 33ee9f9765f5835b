// Package gatewayapi is meshrelay's Gateway API translator: it maps
// TrafficPolicies to the routes of the Gateway API's mesh profile (GAMMA:
// an HTTPRoute or GRPCRoute whose parentRef is a Service) and, where
// Linkerd runs, AccessPolicies to Linkerd's authorization resources.
// cmd/meshrelay-plugin-gatewayapi serves it as a plugin. It imports only
// the public SDK and the policy and discovery APIs, as any plugin outside
// this repository would.
//
// # Which clusters
//
// The backend gatewayapi is no mesh, so the translator declares no Meshes
// and chooses its targets from what discovery found (implementationOf):
// a cluster running Linkerd, which no other backend serves; or a cluster
// running Istio or Cilium whose control plane's Namespace carries the
// label meshrelay.io/routes=gatewayapi. Those meshes have their own
// backends' routing (VirtualService, CiliumEnvoyConfig), and two backends
// routing one Service conflict, so they opt in. A cluster with none gets
// nothing.
//
// # What each implementation supports
//
// Implementations is a table keyed by mesh, taken from the Gateway API
// v1.3.0 conformance reports' supportedFeatures (Linkerd 2.18, Istio
// 1.26.1, Cilium main): method and query parameter matching, response
// header changes, request mirroring and its percentage, request
// timeouts, a route for one port of a Service (HTTPRouteParentRefPort;
// Cilium lacks it) and the MESH-GRPC profile (Istio's report lacks it,
// so gRPC ports get HTTPRoutes there), plus whether the mesh detects HTTP
// on any TCP port (Linkerd) and takes retries from annotations (Linkerd's
// retry.linkerd.io/*). A field whose feature the target's mesh lacks is
// not emitted: a warning names the field, the feature and the report.
//
// # TrafficPolicy → HTTPRoute, GRPCRoute
//
// Each Service of the target that TrafficPolicies select gets one route in
// its namespace, named after it, whose parentRef is the Service, with the
// policies' rules in order; a Service with several ports gets one route
// per port that carries HTTP, named "<service>-<port>", whose parentRef
// names the port. A port carries HTTP when its appProtocol or name
// declares HTTP, HTTP2 or gRPC (Istio's rules), or, where the mesh
// detects the protocol, when it is TCP and declares nothing else. A gRPC
// port gets a GRPCRoute where the mesh passes MESH-GRPC. A rule becomes:
//
//   - matches: Exact paths as Exact; a Prefix other than "/" as the
//     RegularExpression `<quoted prefix>.*`, since TrafficPolicy prefixes
//     are string prefixes and PathPrefix matches whole segments;
//     RegularExpression as is; methods; headers Exact, Prefix and Present
//     as Exact or RegularExpression; query parameters. An inverted header
//     match cannot be expressed: that match is left out with a warning,
//     and a rule none of whose matches is left is left out. For a
//     GRPCRoute, paths "/service/method" (Exact) and "/service/" (Prefix)
//     become method matches, and other paths and query parameters cannot
//     be expressed;
//   - backendRefs: the route's destinations, weights scaled by 1000 (an
//     equal split when none is set), or the Service itself at the port
//     the route is for. A Service of the target is itself; a Service of
//     another cluster is Linkerd multicluster's mirror "<service>-<cluster>"
//     where the target has a Link to that cluster (discovery's
//     MeshSpec.LinkedClusters) and the mirror was discovered, else the
//     rule is left out with a warning. A VirtualDestination is its backing
//     Services reachable so, sharing the destination's weight equally:
//     routes split by weight and cannot fail over (a warning says so when
//     the VirtualDestination orders failover). Subsets, and Services of
//     another namespace (which would need a ReferenceGrant), leave the rule
//     out with a warning. Mirrored Services are Linkerd's own; the Gateway
//     API's portable answer, ServiceImport backends (GEP-1748), is still
//     experimental and not used;
//   - filters: RequestHeaderModifier and ResponseHeaderModifier (a header
//     set or added twice keeps its first value), RequestMirror with its
//     percent;
//   - timeouts.request from the timeout, in GEP-2257's format (whole
//     milliseconds, rounded up); GRPCRoutes have no timeouts;
//   - retries: only Linkerd takes them, per route, from annotations
//     (limit, per-try timeout, conditions 5xx, gateway-error, 409 for
//     retriable-4xx, and the gRPC codes); the route takes the first rule's
//     retries, and rules that differ get a warning. Elsewhere retries need
//     the experimental channel's HTTPRouteRetry: a warning;
//   - fault injection cannot be expressed: a warning.
//
// The Gateway API does not keep a route's rules in order: among the
// matches a request matches it takes the most specific — Exact and
// RegularExpression paths (which match the whole path) above prefixes,
// longer prefixes first, then a method, more headers, more query
// parameters — and the earlier rule only among equals, while a
// TrafficPolicy takes the first rule that matches. A match that may take
// requests an earlier rule of the route also matches, and outranks that
// rule's match, gets a warning naming both (precedenceWarnings); order
// the rules from the most specific to the least to avoid it.
// plugins/conformance's route-semantics test evaluates the emitted
// HTTPRoute and the Istio backend's VirtualService of one fleet and
// checks that every request reaches the same Services in the same shares,
// or that such a warning explains why not.
//
// # AccessPolicy → Linkerd authorization (Linkerd clusters only)
//
// Every TCP port of a Service that an AccessPolicy selects gets a Server
// (policy.linkerd.io/v1beta3) "<service>-<port>" in its namespace:
// podSelector the Service's selector, port its targetPort (a name as is:
// Linkerd resolves it per pod), proxyProtocol from the port's declared
// protocol (HTTP/1, HTTP/2, gRPC, TLS, opaque; else unknown, detected),
// accessPolicy deny. That is the AccessPolicy's default-deny: a DenyAll
// policy adds nothing else. Pods that no selected Service selects are not
// covered (Linkerd's namespace default, config.linkerd.io/default-inbound-policy,
// is left to the cluster), nor are Services without a selector (a warning).
//
// An Allow policy's clients become a MeshTLSAuthentication
// "meshrelay-<hash>" in each namespace where it admits something, whose
// identities are Linkerd's:
// "<sa>.<ns>.serviceaccount.identity.linkerd.<trust-domain>",
// "*.<ns>.serviceaccount.identity.linkerd.<trust-domain>" for a namespace,
// "*.serviceaccount.identity.linkerd.<trust-domain>" for any — in the trust
// domain of each Linkerd cluster the selector admits (every Linkerd cluster
// when it names none; discovery's trust domain, cluster.local by default).
// An identity names a trust domain, not a cluster: where a named cluster
// shares its trust domain with a Linkerd cluster the selector does not
// name, both clusters' clients are admitted, with a warning; give clusters
// trust domains of their own to tell them apart. A cluster without Linkerd
// has no Linkerd identities: its clients are not admitted, with a warning.
// Clients reaching a Service through Linkerd multicluster's gateway arrive
// with the gateway's identity, not theirs; pod-to-pod multicluster keeps
// the client's. The policy then gets an AuthorizationPolicy per Server of
// its ports (every port without ports), "<server>-<hash>", requiring that
// authentication. With methods or paths, it gets instead a
// policy.linkerd.io HTTPRoute "<server>-<hash>" whose parent is the Server
// and whose matches are every method with every path ("/x*" as the regular
// expression `/x.*`), and its AuthorizationPolicy targets that route. Once
// routes attach to a Server, Linkerd admits only requests matching one,
// each by its route's authorizations; so such a Server also gets a
// catch-all route "<server>-all", and the policies admitting the whole port
// are authorized on every route of the Server. A port that is not HTTP
// admits nothing by methods and paths (a warning), nor does a port the
// Service lacks.
//
// # What a target reads
//
// Its own meshes, Mesh resources and (for the opt-in) Namespaces; the
// trust domain of every Linkerd cluster, a value computed once per state
// of the fleet and shared ("gatewayapi/linkerd-trust-domains"); its
// Services (Cluster.Select, Cluster.Service for destinations and mirrors);
// every TrafficPolicy, AccessPolicy and VirtualDestination, and the
// Services of the fleet a VirtualDestination's selectors select.
// incremental_test.go checks that incremental translation equals full
// translation after changes to each.
//
// # Output
//
// Output is sorted and deterministic; routes carry no status, which is
// the implementation's.
package gatewayapi
