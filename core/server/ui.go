package server

import (
	"crypto/tls"
	"errors"

	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
)

// AdminServer returns the admin API's implementation for callers in the
// same process, such as the web UI. Every call authorizes the bearer token
// of the context's incoming gRPC metadata ("authorization: Bearer TOKEN"),
// exactly as a call over gRPC does.
func (s *Server) AdminServer() relayv1.AdminServer { return &admin{s: s} }

// ServingTLSConfig returns a TLS configuration presenting the server's
// certificate (the one agents and the CLI verify against the CA bundle,
// with the names of --san) and asking for no client certificate, for HTTPS
// listeners such as the web UI's.
func (s *Server) ServingTLSConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			cert := s.serverCert.Current()
			if cert == nil {
				return nil, errors.New("no server certificate loaded")
			}
			return cert, nil
		},
	}
}

// Loopback reports whether addr (host:port) is on a loopback address,
// where plaintext listeners are allowed.
func Loopback(addr string) bool { return isLoopback(addr) }
