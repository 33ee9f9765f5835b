// Package istio is meshrelay's Istio translator: a pure function from the
// fleet view to Istio resources, served as the plugin meshrelay-plugin-istio
// (backend "istio"). It reads the fleet only through the SDK and emits typed
// istio.io/client-go objects, so their JSON is Istio's own schema.
//
// Every cluster where discovery found Istio (Cluster.HasMesh("istio")) is a
// client cluster: the translator assumes any workload there may call any
// destination, so routing and VirtualDestination resources go into every
// Istio cluster of the fleet, and authorization goes into the cluster that
// runs the protected workloads.
//
// # One target at a time
//
// The translator is an sdk.Translator: it computes each Istio
// cluster's outputs on their own (a cluster without Istio gets nothing and
// reads nothing more), and after a change the SDK computes again only the
// targets that read what changed. A target reads:
//
//   - the policies of each kind;
//   - its own Services, through Cluster.Select and Cluster.Services: the
//     destinations its AccessPolicies protect, and those that clients of
//     other clusters reach, which it exports;
//   - its own Istio Mesh (root namespace and network), its own east-west
//     gateways (for the Gateway that lets other clusters in) and, as
//     backing Service of a VirtualDestination, its own endpoints;
//   - its own workloads (Deployments, StatefulSets, DaemonSets) when an
//     AccessPolicy's port is a Service port whose targetPort is a name,
//     and then, for a Service no workload backs, that Service's endpoints;
//   - of each Service of another cluster its clients reach (imports): the
//     Service itself and the east-west gateways of its cluster;
//   - values shared by the targets, each computed once per state of the
//     fleet, on which a target depends without depending on what they read:
//     the traffic plan (key "istio/traffic-plan": for each TrafficPolicy
//     whether it is valid and accepted, its destinations and whether
//     clients of other clusters reach them; for each VirtualDestination its
//     backing Services and whether it is accepted; whether several clusters
//     run Istio; and the diagnostics about the policies as a whole), the
//     access facts (key "istio/access": whether each AccessPolicy selects
//     any Service, and the Istio identities of the clients each Allow policy
//     admits, from the trust domains of every Istio cluster), and per Service
//     its locality ("istio/locality/<cluster>/<namespace>/<name>") and the
//     label sets of its workloads ("istio/workloads/...").
//
// So a change to a Service or workload of cluster B computes B's target
// again, and the targets that import that Service; a change to endpoints
// only B's, and the others' only when their locality changes; a policy
// edit every Istio target; a new Istio cluster its own target, and the
// others only when a shared value changes (say, a new trust domain).
//
// Two policies never emit objects of one name in one cluster: the younger
// one is refused with an error diagnostic. A TrafficPolicy or
// VirtualDestination is refused in every cluster (the plan decides, so that
// a refused policy's routes never half apply); an AccessPolicy is refused
// only in the cluster of the conflict.
//
// # Reaching another cluster
//
// A Service k of cluster B has, in every other Istio cluster A, the
// hostname <name>.<namespace>.svc.<B>.global. When a policy makes clients
// in A use it, A gets a ServiceEntry for that host (MESH_INTERNAL, its
// endpoints B's east-west gateway addresses on their mTLS passthrough port,
// 15443 by default, with the locality of k's endpoints and, when subsets are
// routed to, one endpoint per distinct subset label set of k's workloads),
// and B gets a ServiceEntry for the same host that selects k's workloads, so
// that B's gateway can route the SNI outbound_.<port>_.<subset>_.<host>.
// Both are named <service>-<B> in the Service's namespace and are owned by
// every policy that uses them; when k disappears from B they disappear too.
// Gateway endpoints carry no network on purpose: A's istiod knows no gateway
// for B's network and would drop them.
//
// # Addresses of .global hosts
//
// Every ServiceEntry of a host under .global — the remote host of a
// Service, in A and B alike, and a VirtualDestination's hostname when it
// ends in .global — has one virtual IP in spec.addresses, from
// 240.241.0.0/16: Class E (240.0.0.0/4, reserved, never routed), beside
// the 240.240.0.0/16 Istio's own auto-allocation uses, so that a sidecar
// never gets one address for two hosts from the two. A host's address is
// its slot, the first four bytes of the SHA-256 of the hostname modulo the
// 65534 addresses of the range (its first and last excluded). The traffic
// plan allocates them for the whole fleet from the hosts its accepted
// policies may use (the remote host of every destination of a
// TrafficPolicy clients of other clusters reach, of every Service its
// rules route or mirror to, and every accepted VirtualDestination hostname
// under .global): hosts claim their slots in the order policies claim names
// (the oldest policy first, ties by hostname), and a host whose slot is
// taken takes the next free one. So the address depends on the policies
// and Services alone: it is the same in every cluster, after a restart
// and after an incremental update, and changes only when an older policy's
// host comes to want its slot or the host it gave way to goes. Targets
// read the addresses from the plan they already depend on.
//
// The address gives the host's TCP ports an outbound listener of their own
// in every sidecar; it does not make the name resolve. Clients need DNS for
// it: Istio's DNS proxying (ISTIO_META_DNS_CAPTURE, which answers from the
// ServiceEntry and so with this address), or their own DNS entry pointing
// at the address.
//
// B's east-west gateway must also route those hosts: Istio builds its
// AUTO_PASSTHROUGH routes only for the hosts of a Gateway resource that
// selects it, and the usual one (Istio's
// samples/multicluster/expose-services.yaml) has the hosts "*.local". So
// every Istio cluster that has an east-west gateway and Services that
// clients of other clusters reach this way — Services other clusters'
// TrafficPolicies route to, and backing Services of a VirtualDestination
// when several clusters run Istio — gets, per east-west gateway discovery
// found, a networking.istio.io/v1 Gateway <gateway>-global in the gateway's
// namespace: its selector is the gateway's pod labels as discovery reported
// them (the gateway Service's selector; istio: eastwestgateway, Istio's
// default, when discovery reported none), and one server on the gateway's
// cross-network port (15443 by default) named "tls", protocol TLS, TLS mode
// AUTO_PASSTHROUGH, with the hosts "*.global" and the hostnames of the
// VirtualDestinations it backs that are not under .global. It is owned by
// the policies that make other clusters reach the cluster, like any other
// output, so it is pruned when none does any more, when the cluster loses
// its east-west gateway or when no other cluster runs Istio. A cluster
// without an east-west gateway gets no Gateway, and its Services are not
// reached from other clusters: a TrafficPolicy route to one of them is an
// error, and the TrafficPolicies and VirtualDestinations that select or
// list one get a warning per client cluster that cannot reach it.
//
// # TrafficPolicy
//
// For each selected destination (a Service in an Istio cluster) and each
// Istio cluster A, a networking.istio.io/v1 VirtualService named
// <policy>-<service> (or <policy>-<service>-<B> for a destination in another
// cluster B) in the Service's namespace, for the host clients in A use. Each
// rule becomes an HTTP route: matches (path, method, headers — inverted ones
// as withoutHeaders —, query parameters), weighted destinations (omitted
// weights split equally; a rule without route goes to the host itself),
// timeout, retries (retryOn defaults to 5xx,connect-failure,refused-stream,
// reset; zero attempts is Istio's empty retry policy, which disables
// retries), fault delay and abort, mirror with mirrorPercentage, and request
// and response header changes. Subsets are named after their label values
// ({version: v1} is "v1") and defined by a DestinationRule per policy and
// host, with Istio mTLS for remote hosts; for a remote host the Service's own
// cluster gets the same subsets for its gateway.
//
// Several TrafficPolicies may shape one destination: its VirtualService
// holds the rules of each, the oldest policy's first (then by namespace and
// name), is named after the oldest and owned by all; a rule whose name an
// older policy already used is prefixed with its policy's name. A policy
// whose rules an older one would shadow (an older rule matching every
// request, or the same match) is refused. So are a route or mirror to an
// unknown cluster, Service, port or VirtualDestination, to a cluster without
// Istio, a subset no workload carries, a subset of a VirtualDestination, and
// a remote destination whose cluster has no east-west gateway or whose
// Service has no selector: each is an error diagnostic with the field's
// path, and the policy emits nothing. Policies with errors never hide
// others: the remaining ones translate.
//
// # AccessPolicy
//
// An Allow policy becomes, per protected Service, a security.istio.io/v1
// AuthorizationPolicy <policy>-<service> (action ALLOW) selecting the
// Service's workloads, with one rule per client selector: service accounts
// as principals <trust domain>/ns/<namespace>/sa/<name> using the trust
// domain of each client cluster's mesh, clusters as
// <trust domain>/ns/<namespace>/sa/* or <trust domain>/*, bare namespaces as
// namespaces; ports, methods and paths as the rule's operation. A DenyAll
// policy becomes an AuthorizationPolicy with an empty spec named <policy>
// in each namespace whose Services it selects all of, else one without rules
// per Service. Every protected Service gets a PeerAuthentication
// <service>-strict requiring mTLS, shared by the policies protecting it.
//
// The policy's ports are Service ports, but Istio matches an operation's
// ports against the port of the workload a request arrives at. So each
// becomes the target port it forwards to (sdk.Cluster.TargetPorts): a
// numeric targetPort as is, a named one as the number each of the
// Service's workloads gives that container port (the union, when workloads
// differ), read from the pod templates of its Deployments, StatefulSets and
// DaemonSets, or from its EndpointSlices when no such workload backs it. A
// port that does not resolve — not a port of the Service, a name no
// container port has, a name whose number nothing in the inputs tells — is
// left out with a warning naming the Service and the port; when none of
// the policy's ports resolves, the AuthorizationPolicy has no rules, so it
// admits nothing and the workloads stay closed.
//
// # VirtualDestination
//
// In every Istio cluster, a ServiceEntry <name> for the hostname
// (MESH_INTERNAL; STATIC, or DNS when an address is a name) whose endpoints
// are the ready endpoints of backing Services in that cluster (their cluster
// DNS name when none is known) and the east-west gateways of other backing
// clusters, each with its locality; and a DestinationRule <name> with the
// outlier detection and, for failover, locality load balancing. Priority
// failover [c1, c2, ...] becomes failover from c1's region to c2's, and so
// on, the region of a cluster being that of its backing Service's endpoints
// (else of its nodes). Istio always keeps a client's own locality first, so
// the priority list orders where traffic goes after it; clusters that share
// a region cannot be ordered and get a warning. Both objects go into the
// policy's namespace (Istio's root namespace when it has none).
//
// Outputs are deterministic: objects are sorted, names are DNS-1123 labels
// of at most 63 characters (longer ones end with a hash), and the SDK stamps
// each with the policies it derives from. A translator made by New keeps the
// JSON of the specs it encoded, by their binary encoding, and the objects
// the SDK encoded and stamped ([sdk.Encoded]), by that encoding, their
// identity and their parents (encode.go). An edit which computes every
// target again, or a change of one cluster which computes its target
// again, encodes only the objects that changed, once for all the clusters
// that have them; the bytes are the typed objects'.
package istio
