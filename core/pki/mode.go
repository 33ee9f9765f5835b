package pki

// Modes of agent authentication on the relay, which the server's and the
// agent's --mode flags name.
const (
	// ModeMTLS: agents register with a token once, then use client
	// certificates.
	ModeMTLS = "mtls"
	// ModeTLS: server-authenticated TLS, and the token on every stream.
	ModeTLS = "tls"
)
