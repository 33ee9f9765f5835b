// Package sdk is everything a meshrelay translator author needs. A
// translator maps the fleet view — every cluster's discovered inputs and the
// policies of policy.meshrelay.io — to the resources each cluster should run
// for one or more backends (istio, envoy, cilium, ...).
//
// A plugin's whole main is:
//
//	func main() { sdk.Serve(&myTranslator{}) }
//
// where myTranslator implements [Translator]: it describes itself and
// computes one target cluster's outputs at a time.
//
//	func (t *myTranslator) Describe() sdk.Description {
//		return sdk.Description{Name: "netpol", Version: "0.1.0", Backends: []string{"netpol"},
//			OutputKinds: []string{"networking.k8s.io/NetworkPolicy"}}
//	}
//
//	func (t *myTranslator) TranslateTarget(ctx context.Context, req *sdk.Request, resp *sdk.Response) error {
//		for _, ap := range req.Fleet.AccessPolicies() {
//			for _, dst := range req.Target.Select(ap.Spec.DestinationSelectors) {
//				resp.Emit(networkPolicyFor(ap, dst), ap)
//			}
//		}
//		return nil
//	}
//
// resp.Emit sends to the target only; resp.Diagnose reports problems in
// the target (the SDK fills in its cluster), resp.DiagnoseFleet those
// about the fleet. A translator that computes the whole fleet in one call
// is a [FleetTranslator], served by [ServeFleet]; it gets none of what
// follows.
//
// # Incremental translation
//
// The SDK records what each target's computation
// reads through req.Fleet and req.Target: every object of a kind in a
// cluster ([Cluster.Services], [Cluster.Deployments], ...), one object
// ([Cluster.Service]), one Service's endpoints ([Cluster.Endpoints]),
// which Services match selectors ([Fleet.Select], [Fleet.SelectsAny]), a
// cluster's presence, staleness and meshes ([Fleet.Cluster],
// [Cluster.HasMesh]), a cluster's registry labels ([Cluster.Labels], and
// [Cluster.Select], [Cluster.Matches], [Cluster.Admits],
// [Cluster.AdmitsClients] with a clusterSelector), which clusters a client
// selector's clusterSelector matches ([Fleet.ClientClusters]), the list of clusters ([Fleet.Clusters],
// [Fleet.ClustersWithMesh]), the policies of a kind, and shared values
// ([Shared], [SharedMap]).
// After a delta it computes again, in parallel on every core (a lone
// target on the session's goroutine), only the
// targets with a read the delta concerns in its old or new state; the
// others cost nothing. So a translator scales with what changed when each
// target reads what its outputs depend on and no more:
//
//   - its own cluster's objects through req.Target ([Cluster.Select] for
//     the destinations that live there);
//   - another cluster's objects only where its outputs use them, such as
//     the endpoints of a Service a VirtualDestination exports;
//   - facts over many clusters that many targets need (trust domains,
//     networks) through a shared value, so that targets depend on the
//     fact, not on every cluster it was derived from.
//
// A shared value is a typed handle, declared once:
//
//	var domains = sdk.NewShared("trust-domains", func(f *sdk.Fleet) []string { ... })
//	... domains.Get(req.Fleet) ...  // a []string, checked by the compiler
//
// A target's emits go to that target only. The host may scope a session
// to some targets (a server replica computes the clusters whose agents
// are connected to it); the others are neither computed nor sent.
// sdktest.Session and sdktest.CheckIncremental test both properties: which
// targets a change computes, and that incremental outputs equal a full
// translation.
//
// # Ports
//
// Policies name Service ports; a backend enforcing access at the workload
// sees the port the Service forwards to. [Cluster.TargetPorts] maps one to
// the other — a named targetPort per workload, from the pod templates of
// the cluster's Deployments, StatefulSets and DaemonSets, else from the
// Service's EndpointSlices — and reports each port that does not resolve
// as a [PortProblem], whose Warning names the Service and the port. It
// reads through the Cluster, so what it used is recorded like any read.
//
// The SDK handles the protocol: it keeps the fleet view up to date from the
// host's deltas, decodes inputs into typed Kubernetes objects and policies,
// drops invalid policies with a diagnostic on each, stamps ownership labels on
// every emitted object, sends only the clusters whose outputs changed, and
// splits large messages. TranslateTarget should be a pure function of the request:
// the same fleet gives the same outputs.
//
// Emitting an object encodes it, stamps it and hashes it. A translator
// whose targets emit many equal objects (the same app in many clusters;
// the unchanged objects of a target computed again) can encode one once
// with [Response.Encode] and emit the [Encoded] value in every target
// that needs it: such an emit costs no encoding. Keep Encoded values by
// everything the encoding depends on — the object and its parents — as
// the istio plugin does (plugins/istio/encode.go).
//
// [Diagnostic], [Severity], [PolicyRef] and the ownership labels
// ([ManagedByLabel], [PoliciesAnnotation] and the rest) are the names of
// package api/meta, which the server and the agents use too: the SDK's
// names are aliases of them, so a diagnostic means the same on both sides
// of the protocol. A Severity's value is what a policy's status shows
// ("Error", "Warning"); it prints in lower case ("error").
//
// An [Output] and an [Object] carry their identity as an embedded
// snapshot.ID (package api/snapshot: group, version, kind, namespace,
// name), the identity the server and the agents key resources by; a
// [ServiceKey] ([Destination.Key]) names a Service in one cluster.
//
// # What a translator declares
//
// [Description] says what the host and the agents obey. Meshes lists the
// backends that need their mesh: such a backend has work only in clusters
// where discovery found a mesh of the same name (the istio, envoy and
// cilium plugins declare theirs), and the translator is not called while
// no cluster has one; any other backend runs for every cluster. A target
// where no backend has work is not computed.
// OutputKinds lists every kind the translator may emit: the server sends
// them to the agents with the outputs, and an agent prunes the objects it
// owns of those kinds, also those left before it restarted (it keeps the
// kinds in its state directory); emitting a kind not listed is an error.
// InputKinds lists the custom kinds the translator reads: what
// [AlwaysDiscovered] reports needs no declaration, any other kind
// reaches a translator only when declared (sdktest drops the others from
// its fixtures). Every
// mesh must be one of Backends, and OutputKinds must be "group/Kind"
// (at most 256): [Serve] refuses a translator that declares otherwise,
// and the host refuses a plugin that describes itself so.
//
// Optional capabilities are found by type assertion: a translator that also
// implements [PolicyValidator] gets to refuse policies it cannot serve before
// it sees them.
//
// [Serve] runs the plugin side of go-plugin: handshake, negotiated protocol
// versions (package sdk/protocol), gRPC with raised message limits, hclog
// JSON logs on stderr (level from MESHRELAY_PLUGIN_LOG_LEVEL), and an exit
// when the host process dies. A plugin must not write to stdout.
// [ServeInProcess] serves a translator over an in-memory connection with the
// same protocol, for hosts that link translators in and for tests;
// package sdk/sdktest builds its harness on both, and checks every answer
// with the server's own host side of the protocol (sdk/protocol/host).
//
// Within one update every target shares what the typed accessors decoded.
// A [FleetTranslator]'s session keeps each cluster's decoded inputs
// while they do not change; a [Translator]'s drops a cluster's as soon
// as its own target is computed, unless another target read them (then
// when the update ends), since a target is computed again mostly after
// its own cluster changed, and keeping them would double what a plugin
// holds per cluster. A fleet-wide update thus does not hold every
// cluster's typed objects at once. Emitted
// typed objects (client-go, istio.io) are marshalled once: the SDK
// writes their metadata with its ownership labels merged in, without
// touching the object; an object that encodes itself (MarshalJSON) or
// whose metadata holds more than a name, namespace, labels and
// annotations has the labels set on it for the time of the call instead
// (FuzzStampedAgreesWithSetting holds both to the same bytes). Emit a
// fresh object each time. Inputs are decoded and outputs encoded with
// encoding/json's rules on the v2 engine
// (github.com/go-json-experiment/json/v1): the same values and bytes as
// encoding/json (FuzzEngineAgreesWithEncodingJSON), faster. After a full update every (cluster, backend) output
// is sent; after a delta only those that changed, an emptied one as an
// empty output, and, where the host allows it, each by the objects that
// changed: the others are named kept (the session holds a 16-byte digest
// per object sent, protocol.KeyOf), and a host that lost its copy asks
// for a cluster whole, which the SDK computes again. Where the host
// allows it (Begin.same_allowed), an object the answer already sent for
// another cluster is named by its number in the answer instead of sent
// again (ClusterOutput.same; the first protocol.MaxSameBodies objects an
// answer sends). An update whose
// targets are the last one's says so (Begin.same_targets, which the SDK
// takes) and costs the SDK no pass over them. A [Translator]'s outputs are sent target by target as
// each is computed, so the host sees a long answer progress (it takes a
// plugin that sends nothing for its call timeout as hung: one target
// must be computed within it); a [FleetTranslator]'s are sent when its
// Translate returns, which must be within the call timeout. Diagnostics
// (the SDK's own for invalid policies and the translator's) are sent in
// full at the end of every answer, sorted, without duplicates. When a
// translation fails, emits to an unknown backend, to a cluster outside
// the fleet or a kind not declared, or emits the same object twice, the
// answer ends with the error, the host drops what it received of it and
// keeps the previous outputs.
package sdk
