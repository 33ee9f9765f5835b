// Package trust is the agent's side of the fleet's mesh trust: it makes the
// cluster's Istio intermediate CA and keeps Istio's plug-in CA Secret
// (cacerts in the mesh namespace: ca-cert.pem, ca-key.pem, root-cert.pem,
// cert-chain.pem) as the server's plan says, and restarts the workloads
// whose proxies still carry the old chain.
//
// A [Manager] runs on the agent's leader only. Each [Manager.Step] reports
// what the Secret holds (certificates only) to the server's Trust service
// and gets the plan back: the policy, the mesh namespace, the roots to
// trust, the root that signs now, when to renew, and how fast to bounce.
// When the intermediate is missing, near its expiry or signed by another
// root than the signing one, the manager makes a new ECDSA P-256 key in
// the cluster, sends only its CSR, and writes the signed intermediate with
// the key. The key is never sent anywhere: it lives in the manager's
// memory and in the Secret.
//
// The manager owns the Secret (label app.kubernetes.io/managed-by:
// meshrelay): drift is overwritten with what the manager last wrote, also
// while the server is away, and the Secret is never deleted — not in safe
// mode, not while disconnected, not when no MeshTrust selects the cluster
// any more. Before writing, it checks that the intermediate verifies up to
// one of the roots of root-cert.pem, so a half-rotated Secret is never
// written.
//
// Bouncing (bounce.go) knows which workloads carry the old chain from the
// chain fingerprint: the Secret records the fingerprint of its intermediate
// and roots (meshrelay.io/mesh-trust-chain) and when it last changed, and
// each workload restarted for a chain carries its fingerprint in its pod
// template. A workload is stale when its template carries another
// fingerprint (or none) and one of its sidecar-injected pods was created
// before the chain changed, or before istiod was restarted for it. istiod
// itself is restarted first when its pods predate the chain, and workloads
// wait until its rollout completes; they are then restarted with a
// rollout restart at most BouncePerMinute per minute, skipping any whose
// PodDisruptionBudget allows no disruption now. Pods are listed once per
// step, and once nothing is left to restart for a chain the bouncer rests
// until the chain changes again.
package trust
