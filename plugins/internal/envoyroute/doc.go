// Package envoyroute translates TrafficPolicy HTTP rules into Envoy routes,
// for the backends that configure an Envoy: the envoy backend (its node
// groups' outbound routes) and the cilium backend (CiliumEnvoyConfig, where
// Cilium's Envoy takes it). Each backend resolves a rule's destinations to
// Envoy Cluster names of its own through a Resolver; everything else — the
// matches, weights, retries, timeouts, faults, mirrors and header changes —
// is translated here once, so both backends mean the same by a rule.
//
// It also says which Service ports carry HTTP (TCPPort), the way Istio
// selects a port's protocol, so that every backend serves the same ports
// as HTTP.
package envoyroute
