// Package sdk is everything a meshrelay translator author needs. A
// translator maps the fleet view — every cluster's discovered inputs and the
// policies of policy.meshrelay.io — to the resources each cluster should run
// for one or more backends (istio, envoy, cilium, ...).
//
// A plugin's whole main is:
//
//	func main() { sdk.Serve(&myTranslator{}) }
//
// where myTranslator implements [Translator]:
//
//	func (t *myTranslator) Describe() sdk.Description {
//		return sdk.Description{Name: "netpol", Version: "0.1.0", Backends: []string{"netpol"}}
//	}
//
//	func (t *myTranslator) Translate(ctx context.Context, req *sdk.Request, resp *sdk.Response) error {
//		for _, ap := range req.Fleet.AccessPolicies() {
//			for _, dst := range req.Fleet.Select(ap.Spec.DestinationSelectors) {
//				resp.Emit(dst.Cluster.Name, networkPolicyFor(ap, dst), ap)
//			}
//		}
//		return nil
//	}
//
// The SDK handles the protocol: it keeps the fleet view up to date from the
// host's deltas, decodes inputs into typed Kubernetes objects and policies,
// drops invalid policies with a diagnostic on each, stamps ownership labels on
// every emitted object, sends only the clusters whose outputs changed, and
// splits large messages. Translate should be a pure function of the request:
// the same fleet gives the same outputs.
//
// Optional capabilities are found by type assertion: a translator that also
// implements [PolicyValidator] gets to refuse policies it cannot serve before
// Translate sees them.
//
// [Serve] runs the plugin side of go-plugin: handshake, negotiated protocol
// versions (package sdk/protocol), gRPC with raised message limits, hclog
// JSON logs on stderr (level from MESHRELAY_PLUGIN_LOG_LEVEL), and an exit
// when the host process dies. A plugin must not write to stdout.
// [ServeInProcess] serves a translator over an in-memory connection with the
// same protocol, for hosts that link translators in and for tests;
// package sdk/sdktest builds its harness on both.
//
// Within a session the SDK keeps each cluster's *[Cluster] while its inputs
// do not change, so what its typed accessors decoded is reused. After a full
// update every (cluster, backend) output is sent; after a delta only those
// that changed, an emptied one as an empty output. Diagnostics (the SDK's
// own for invalid policies, then the translator's) are sent in full with
// every answer. When Translate fails, emits to an unknown backend or to a
// cluster outside the fleet, or emits the same object twice, only the
// error is sent and the host keeps the previous outputs.
package sdk
