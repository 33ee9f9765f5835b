// Package agent is the meshrelay relay agent of one workload cluster. It
// dials out to the management server, registers with a relay identity token
// and a CSR (its private key never leaves it), then keeps one Sync stream:
// it sends its cluster's input snapshots as versioned deltas and applies the
// outputs it receives through its sinks.
//
// The parts it is built from live in sub-packages: discovery sources
// (core/agent/discovery), sinks for Kubernetes and directories
// (core/agent/sink), the Envoy xDS server (core/agent/xds) and leader
// election (core/agent/leader). The agent sees them through the small
// [Source] and [Sink] interfaces defined here.
//
// The server sends, with a backend's outputs, the kinds the backend's
// plugins declare they emit. The agent keeps them in its state directory
// and tells every [KindSink] (the kube sink) at start, before the server
// answers, and whenever they change, so that pruning finds owned objects
// of those kinds left before a restart. Kinds that are not "group/Kind",
// more than 256 of them, or those of more than 64 backends are refused
// with a warning; no kinds leave the previous ones.
//
// When the server is unreachable the agent keeps what is applied, keeps
// discovering, and resyncs on reconnect: it resumes with a delta from the
// last version the server holds whenever it still has that snapshot, and
// sends in full otherwise.
package agent
