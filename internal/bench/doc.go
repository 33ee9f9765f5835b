// Package bench measures a meshrelay fleet at scale, and soaks it under
// faults: it simulates many relay agents in one process against real
// management server processes, and reports the scale figures of docs/performance.md — how long the fleet takes
// to register and converge, how fast a change in one cluster and a policy
// change reach the agents they affect, how many bytes a change costs on the
// wire, and the servers' CPU and memory.
//
// [Run] drives one measurement: it starts `meshrelay server` as a child
// process on loopback (memory or Redis store, the real translator plugins
// installed in a temporary plugin directory, policies from a generated
// directory) — or Options.Replicas of them on one Redis store, sharing the
// CA through the store and the first replica's admin token —, registers
// one identity per simulated cluster through the admin API of its replica
// (round-robin), and runs a real [agent.Agent] per cluster: each trades its
// token and a CSR for a client certificate and keeps its own mTLS stream
// to its replica, with the other replicas next in its server list.
// The agents' sources are generated input snapshots (Services,
// EndpointSlices, Deployments, ServiceAccounts, Namespaces, a Node and an
// istiod Deployment, from which discovery computes the istio Mesh); their
// sinks discard what they are given after noting when each change arrived
// and how large the output delta was. Run then
//
//  1. waits until every agent is connected and has its first outputs,
//     then until the replicas and their plugins are quiet (under 0.1 cores
//     over 2 s, at most 2 minutes; the report's settle_seconds), since
//     work that follows delivery (a derivation of the discovery catalog
//     when something reads it, collections of the heap) must not count;
//  2. measures the idle traffic and CPU (heartbeats) over two heartbeats
//     of the slower side, agent or server ([IdleWindow]), a baseline;
//  3. churns inputs at Options.Churn changes per second for
//     Options.Duration and times each change until its agent receives it.
//     In the local scenario each change rewrites one Service and its
//     Deployment in one random cluster, which changes that cluster's Istio
//     authorization only; in the global scenario a VirtualDestination
//     exports svc-000 of every cluster (each has an east-west gateway), so
//     every cluster's Istio outputs are computed from every cluster's
//     svc-000 endpoints, and each change gives an endpoint of svc-000 in
//     one random cluster a new address, which appears in that cluster's
//     ServiceEntry. The CPU the replicas and their plugins spent, divided
//     by the changes, is the cost of a change;
//  4. with Options.KillReplica, kills replica 0 and its plugins (SIGKILL)
//     and measures its agents' move to the next replica: reconnect
//     latency, when they hold what their new replica computed, full input
//     resends, and the churn of their outputs ([OutputChurn]; inputs and
//     policies do not change meanwhile);
//  5. edits the fleet-wide AccessPolicy Options.PolicyChanges times and
//     times each edit until every agent has received it;
//  6. with Options.Rollout, stages one edit of the AccessPolicy under a
//     RolloutStrategy of [RolloutStages] stages (the clusters are
//     registered with a stage label, every stage waits for approval):
//     after a window of settling, measures one revision over a window
//     while inputs churn, edits the
//     policy, approves the stages one at a time and times each from its
//     approval until every agent of the stage received the new outputs,
//     measures two revisions after the first stage, and one again once
//     the rollout completed ([RolloutReport]): the servers' and plugins'
//     RSS, the servers' live heap and their CPU;
//  7. reads each replica's CPU time and peak RSS (and its plugins'): the
//     CPU from each process's CPU-time clock, to the nanosecond (the ticks
//     of /proc/PID/stat are 10 ms, too coarse for a quiet window), the
//     memory from /proc; and Redis's used_memory when the store is Redis;
//     then stops the agents and the servers.
//
// Bytes on the wire are counted from the agents' side, as the TCP bytes
// their connections to the server received (TCP_INFO), less the idle
// baseline; the payload — the protobuf size of the output deltas the agents
// assembled — is reported beside it.
//
// [RunChaos] is the chaos soak (meshrelay bench --chaos): Options.Replicas
// replicas on a redis-server of its own, each reaching it through an
// internal/tcpproxy that can cut that replica alone off, the simulated
// fleet churning inputs and policy edits, and a fault every
// Options.FaultEvery drawn with Options.Seed — Redis killed and restarted
// empty, a replica killed (its agents move) or paused past the agents'
// server timeout, agents restarted with and without their key and
// certificate, a replica cut off from Redis while the others keep it, a
// plugin process killed or stopped. With Options.RedisSentinel Redis is a
// Sentinel set instead (sentinel.go) and its primary is killed; with
// Options.RedisCluster a Redis Cluster of three primaries, each with a
// replica (rediscluster.go), the slot holding the store's keys is moved
// to another primary and that slot's primary is killed. An independent
// checker keeps what every cluster's outputs must be by translating the
// same inputs and policies offline ([offline.Model], with plugin
// processes of its own) and, at quiescent points, compares it with what each agent's sink holds (a
// sink that, like a real one, deletes only when pruning is allowed):
// resources missing, stale or extra, outputs going back to an older change
// (the changes' markers only grow) and prunes of resources the model holds
// fail the soak. Before the faults replica 1 is killed with its third of
// the evenly spread fleet, and at the end the replica serving the most
// agents, and each reconnect storm is measured. The servers' and plugins'
// memory, Redis's and the servers' goroutines are sampled throughout and
// reported as growth per hour after warm-up ([Growth]).
//
// With Options.ChaosRollout (--chaos-rollout) the policies carry a
// RolloutStrategy ([ChaosStrategyYAML]: three stages by a wave label,
// the last gated), so each policy edit is a revision that a staged rollout
// carries while the faults run, and the bench acts as an operator
// (approves, resumes what a failure paused, pauses and undoes some
// rollouts). The checker keeps each policy set it was given as a revision,
// named by its hash as the servers name it, reads the rollout record at
// each check and judges every cluster under the revision the record puts
// it on; an output going back from an undone revision to its previous one
// is the undo's. After the faults the rollouts are driven to their end,
// and the last checks require every cluster on the last revision; a
// rollout record that goes missing fails the soak.
//
// [RunColdStart] (meshrelay bench --cold-start) times a server's cold start
// from Redis: Options.Agents clusters written into the store through its
// API (registry record, input, an output per plugin), no agents, then one
// server process started on it ([ColdStartReport]).
//
// The package's Go benchmarks (go test -bench . ./internal/bench) measure the
// pieces in isolation: the engine's fan-out over a 1,000-cluster fleet, the
// relay's bytes for a one-resource change against a full resend, and
// registrations per second against an in-process server.
package bench
