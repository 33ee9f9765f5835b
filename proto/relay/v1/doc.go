// Package relayv1 is the generated Go code of proto/relay/v1, the protocol
// between agents and the management server (Registration, Relay) and the
// operator's Admin API. relay.proto documents every message and its
// contract; regenerate with `make generate`.
package relayv1
