// Package trust is the server's side of mesh trust: the MeshTrust policies
// of the management source, each one's roots, the clusters' reports and the
// rotation from phase to phase (core/agent/trust is the agents' side, which
// installs what a plan says in each cluster).
//
// A [Manager] reconciles on every interval and whenever a policy or a report
// changes: it loads each MeshTrust's roots from the store, or makes them
// (the root of its files or its Secret, else a generated one), selects the
// clusters the policy names, starts a rotation when one is due and moves a
// rotation to its next phase only when every selected cluster reported that
// it got there, so that at every moment each cluster trusts the root that
// signed every other cluster's intermediate. Roots are shared by replicas
// through the store, written by compare-and-set on their version: two
// replicas never both start a rotation, each with a root of its own.
//
// The manager owns none of the server's state. It reads the registry and
// the trust records through [Store], the clusters' meshes and safe mode
// through [Fleet], a root's Secret through [SecretReader], and seals the
// roots' private keys for the store with a [Sealer]:
//
//	m := trust.New(trust.Options{Interval: heartbeat}, trust.Deps{Store: st, Fleet: f, Sealer: sealer, Logger: log})
//	go m.Run(ctx)
//	m.SetPolicies(policies)               // the management source's snapshot
//	plan, err := m.Report(ctx, cluster, req) // the Trust RPCs, once the caller is authenticated
//
// [Manager.Report] and [Manager.Sign] are the bodies of the Trust RPCs of
// proto/relay/v1 and return gRPC status errors; the server authenticates the
// caller first. Statuses, diagnostics and the Kubernetes status of each
// MeshTrust come from the last reconcile.
package trust
