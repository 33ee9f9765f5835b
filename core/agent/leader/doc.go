// Package leader owns the agent's leader election: when several agent
// replicas run in one cluster, only the one holding a coordination.k8s.io
// Lease applies and relays.
//
//	err := leader.Run(ctx, cfg, leader.Options{Namespace: "meshrelay-system", Name: "meshrelay-agent"},
//		func(ctx context.Context) { agent.Run(ctx) })
//
// run is called only while leading, and its context is cancelled as soon as
// leadership is lost. When ctx ends, Run first waits for run to return and
// then releases the Lease, so a stopping leader hands over at once without
// two replicas ever acting together.
package leader
