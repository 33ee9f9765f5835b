// Package agent is the meshrelay relay agent of one workload cluster. It
// dials out to the management server, registers with a relay identity token
// and a CSR (its private key never leaves it), then keeps one Sync stream:
// it sends its cluster's input snapshots as versioned deltas and applies the
// outputs it receives through its sinks.
//
// The parts it is built from live in sub-packages: discovery sources
// (core/agent/discovery), sinks for Kubernetes and directories
// (core/agent/sink), the xDS server (core/agent/xds) and leader
// election (core/agent/leader). The agent sees them through the small
// [Source] and [Sink] interfaces defined here.
//
// Outputs go to the sinks by what they are, not by which backend emitted
// them: the agent hands every backend's output to each of its [Sinks],
// each getting the resources of the API groups it takes ([GroupSink]).
// The xDS server takes the xDS resources (group xds.meshrelay.io, see
// api/xds) of any backend, the kube sink every other group, a directory
// sink everything; a resource no sink takes is reported failed
// ([ErrNoSink]). Each sink keeps every backend's resources apart and prunes
// per backend, only when the server allows it.
//
//	a, err := agent.New(opts, source, agent.Sinks{xdsServer, kubeSink}, logger)
//
// The server sends, with a backend's outputs, the kinds the backend's
// plugins declare they emit. The agent keeps them in its state directory
// and tells every [KindSink] (the kube sink) the kinds of its groups at
// start, before the server answers, and whenever they change, so that
// pruning finds owned objects
// of those kinds left before a restart. Kinds that are not "group/Kind",
// more than 256 of them, or those of more than 64 backends are refused
// with a warning; no kinds leave the previous ones.
//
// The server's Welcome names the input kinds: what its plugins read, and
// the policy kinds. The agent keeps them in its state directory as well and
// tells a [KindSource] (the kube source) at start and whenever they change,
// so that it discovers the custom resources of those kinds; the kube source
// publishes nothing until it knows them, so an agent with none kept sends
// its first input after the Welcome, and a restarted one discovers the kept
// kinds before the server answers. Kinds that are not "group/Kind", or more
// than 256 of them, are refused with a warning; none leave the previous ones.
//
// When the server is unreachable the agent keeps what is applied, keeps
// discovering, and resyncs on reconnect: it resumes with a delta from the
// last version the server holds whenever it still has that snapshot, and
// sends in full otherwise.
package agent
