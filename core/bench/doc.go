// Package bench measures a meshrelay fleet at scale: it simulates many relay
// agents in one process against a real management server process, and
// reports what DESIGN.md §6 asks of one replica — how long the fleet takes
// to register and converge, how fast a change in one cluster and a policy
// change reach the agents they affect, how many bytes a change costs on the
// wire, and the server's CPU and memory.
//
// [Run] drives one measurement: it starts `meshrelay server` as a child
// process on loopback (memory or Redis store, the real translator plugins
// installed in a temporary plugin directory, policies from a generated
// directory), registers one identity per simulated cluster through the
// admin API, and runs a real [agent.Agent] per cluster: each trades its
// token and a CSR for a client certificate and keeps its own mTLS stream.
// The agents' sources are generated input snapshots (Services,
// EndpointSlices, Deployments, ServiceAccounts, Namespaces, a Node and an
// istiod Deployment, from which discovery computes the istio Mesh); their
// sinks discard what they are given after noting when each change arrived
// and how large the output delta was. Run then
//
//  1. waits until every agent is connected and has its first outputs;
//  2. measures the idle traffic (heartbeats) for 10s, a baseline;
//  3. churns inputs at Options.Churn changes per second for
//     Options.Duration — each change rewrites one Service and its
//     Deployment in one random cluster, which changes that cluster's Istio
//     authorization only — and times each change until its agent receives
//     it;
//  4. edits the fleet-wide AccessPolicy Options.PolicyChanges times and
//     times each edit until every agent has received it;
//  5. reads the server's CPU time and peak RSS (and its plugins') from
//     /proc, and Redis's used_memory when the store is Redis; then stops
//     the agents and the server.
//
// Bytes on the wire are counted from the agents' side, as the TCP bytes
// their connections to the server received (TCP_INFO), less the idle
// baseline; the payload — the protobuf size of the output deltas the agents
// assembled — is reported beside it.
//
// The package's Go benchmarks (go test -bench . ./core/bench) measure the
// pieces in isolation: the engine's fan-out over a 1,000-cluster fleet, the
// relay's bytes for a one-resource change against a full resend, and
// registrations per second against an in-process server.
package bench
