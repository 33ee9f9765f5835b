// Package pki owns meshrelay's certificate authority, the signing of cluster
// certificates, the TLS configurations of the relay connection, certificate
// reloading and relay identity tokens.
//
// # Identity
//
// A workload cluster is identified by a client certificate whose only identity
// is the URI SAN spiffe://meshrelay/cluster/NAME (see [ClusterURI] and
// [ClusterFromCert]). NAME is a DNS-1123 label ([ValidateClusterName]). The CA
// never copies names or SANs from a certificate signing request: whatever a
// CSR asks for, [CA.SignClusterCSR] issues the identity of the cluster the
// server authenticated, so a cluster holding a token for A can never obtain a
// certificate for B.
//
// # Server side
//
// The management server loads or creates its CA ([LoadOrCreateCA], [LoadCA],
// or [ParsePEM] for a CA kept in a key/value store), issues its own serving
// certificate with [CA.IssueServerCert] and builds its listener configuration
// with [ServerTLSConfig]. With [VerifyClientCertIfGiven] the token
// registration RPC can come in over server-authenticated TLS while every other
// RPC checks for a client certificate with [ClusterFromConnectionState]. The
// VerifyCluster hook refuses revoked clusters and serials during every
// handshake, resumed ones included. Registration checks a token against its
// stored hash with [TokenMatches], then calls [CA.SignClusterCSR].
//
// # Agent side
//
// The agent creates its key with [NewKey] (the key never leaves the agent),
// asks for a certificate with [NewCSR], and dials with [ClientTLSConfig]. Its
// certificate lives in a [Reloader]: when [RenewAt] is reached the agent
// renews over mTLS and stores the new certificate, and new connections use it
// without a restart.
//
// # Mesh roots
//
// A mesh root ([GenerateMeshRoot], or a user's CA loaded with [LoadCA] or
// [ParsePEM]) is a CA of its own, separate from the relay CA. It signs each
// cluster's Istio intermediate CA with [CA.SignIntermediateCSR], from a CSR
// the cluster's agent made with a key that never leaves the cluster.
// [Fingerprint] names roots in status and plans.
//
// # Tokens
//
// [NewToken] makes a relay identity token; only [HashToken] of it is stored.
package pki
