// Package server is the meshrelay management server: registration and the
// CA, the relay streams to agents, delivery of outputs, safe mode, and the
// admin API.
//
// The fleet has one owner on its path: relay → store → engine → delivery.
// Agents register with a relay identity token and a CSR
// ([relayv1.RegistrationServer]), then keep one Sync stream each: inputs come
// up as versioned deltas, are applied to the input the [store.Store] holds
// and written back to it (the source of truth for inputs and outputs), and
// are acked, or nacked when they do not apply or the store refuses them.
// The server keeps no copy of the inputs: only which clusters are in its
// view, when it took each input and whether the agent is away (fleet.go).
// The engine (core/engine) reads the fleet from the store through that view,
// turns it and the policies of the management source into outputs, and
// returns each cycle's changed outputs as data; the delivery step writes
// every one to the store, whether or not its agent is connected, and hands
// it to the agent's stream, which resumes from the outputs the store holds
// for its cluster. Outputs go down as deltas computed per stream against what that agent
// last applied, so a one-resource change costs one resource on the wire.
// Status and inspection read the outputs from the store as well, for the
// clusters this replica computes.
//
// Security: in mTLS mode (the default) every RPC except Register needs a
// client certificate issued by the server's CA whose URI SAN names the
// cluster; a stream may only send its own cluster's inputs and receives only
// its own outputs. Deregistered clusters and revoked serials are refused at
// the handshake. In TLS-only mode agents present the token on every stream.
// Each peer is held to budgets it owns (README, Security model): the gate
// (gate.go) counts connections per address, per cluster and in total, and
// reads every connection through an inspector (inspector.go) that holds
// each gRPC message to its method's limit and the unfinished messages to
// their connection's and cluster's budgets before gRPC reads them.
//
// Replicas divide the agents (rebalance.go): each announces in the store
// how many agents it serves, and one above its fair share of the live
// replicas asks a few settled agents to move on to their next server
// address, which costs no output churn.
//
// Inspection (inspect.go): the admin API's List and Describe calls show the
// fleet as people ask about it — clusters, policies, outputs per backend and
// the discovery objects core/catalog derives from each cluster's current
// input (Meshes, Workloads, Destinations). They read the same state status
// folds; derived objects go with their cluster's input when it is
// deregistered. Neither decodes the fleet on each call: the discovery
// objects are derived as inputs change, after each engine cycle, and the
// output index (outputindex.go) keeps each output's resources' parent
// policies and labels, decoded once per content, as delivery writes them
// and readers read them; it holds the output set itself and, per
// resource, only the index of its policies and labels among the set's
// distinct ones.
//
// Mesh trust (core/server/trust) runs beside the fleet: the server wires
// its store, its safe mode and the engine's meshes into a trust.Manager,
// seals the mesh roots' keys like its CA's (cakey.go) and authenticates the
// Trust RPCs before handing them to the manager (trust.go).
//
// Traffic (traffic.go): the windows of edges an agent sends on its Sync
// stream are decoded against core/traffic's limits and kept, per replica,
// for the last hour (core/traffic.Hour, at most Options.TrafficMaxEdges),
// with the sending cluster as every edge's source cluster; /metrics exposes
// them, and the Traffic service, behind the admin token, lists them and
// the error rate of a policy's destinations around its last change as
// this replica saw it. It answers for the whole fleet: the replica asks
// the other live replicas that announce an address (Options.AdvertiseAddr)
// for their own edges and merges them into its answer (peers.go).
//
// Safe mode: after a start where some registered cluster has no fresh input
// (the store was empty or lost), outputs are delivered with pruning forbidden
// until every such cluster has sent a fresh snapshot, or the safe-start
// window ends.
package server
