package pki

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"time"
)

// ErrNoClientCertificate reports a connection on which the peer presented no
// client certificate.
var ErrNoClientCertificate = errors.New("no client certificate")

// ClientAuth selects how a server treats client certificates.
type ClientAuth int

const (
	// RequireClientCert refuses any handshake without a valid cluster
	// certificate: mTLS for every RPC. It is the zero value.
	RequireClientCert ClientAuth = iota
	// VerifyClientCertIfGiven accepts handshakes without a client certificate
	// so that token registration can use server-authenticated TLS, but
	// verifies any certificate presented exactly as RequireClientCert does.
	// The server must then check each RPC other than registration with
	// ClusterFromConnectionState.
	VerifyClientCertIfGiven
)

// String returns the mode's name.
func (c ClientAuth) String() string {
	switch c {
	case RequireClientCert:
		return "require"
	case VerifyClientCertIfGiven:
		return "verify-if-given"
	default:
		return fmt.Sprintf("ClientAuth(%d)", int(c))
	}
}

// CertSource supplies the certificate to present on each handshake.
// Implementations are safe for concurrent use; *Reloader is one.
type CertSource interface {
	// Current returns the certificate to present now, or nil if there is
	// none yet.
	Current() *tls.Certificate
}

// ServerTLSOptions configures ServerTLSConfig.
type ServerTLSOptions struct {
	// Certificate supplies the serving certificate on every handshake, so a
	// *Reloader replaces it without a restart. Required.
	Certificate CertSource
	// ClientCAs holds the trust anchors for cluster certificates, usually
	// CA.Pool. Required: a nil pool trusts nothing, never the system roots.
	ClientCAs *x509.CertPool
	// ClientAuth selects mTLS on every connection or only when a
	// certificate is given.
	ClientAuth ClientAuth
	// VerifyCluster, if set, is called on every handshake that presents a
	// verified client certificate, resumed ones included, with the
	// certificate's cluster and serial (see Serial). A non-nil error, such as
	// for a deregistered cluster or a revoked serial, fails the handshake.
	VerifyCluster func(cluster, serial string) error
	// Time, if set, is the clock for certificate validity; nil means
	// time.Now.
	Time func() time.Time
}

// Validate reports whether o is complete.
func (o ServerTLSOptions) Validate() error {
	if o.Certificate == nil {
		return errors.New("server TLS options: no certificate source")
	}
	if o.ClientCAs == nil {
		return errors.New("server TLS options: no client CA pool")
	}
	switch o.ClientAuth {
	case RequireClientCert, VerifyClientCertIfGiven:
	default:
		return fmt.Errorf("server TLS options: unknown client auth mode %v", o.ClientAuth)
	}
	return nil
}

// ServerTLSConfig returns the relay server's TLS configuration: TLS 1.3 or
// later, the certificate from opts.Certificate on every handshake, client
// certificates verified against opts.ClientCAs for client authentication,
// then required to carry exactly one cluster identity and accepted by
// opts.VerifyCluster. It fails closed on incomplete options (a nil pool
// trusts no client, a missing certificate fails every handshake); call
// opts.Validate first to report them.
func ServerTLSConfig(opts ServerTLSOptions) *tls.Config {
	pool := opts.ClientCAs
	if pool == nil {
		pool = x509.NewCertPool()
	}
	auth := tls.RequireAndVerifyClientCert
	if opts.ClientAuth == VerifyClientCertIfGiven {
		auth = tls.VerifyClientCertIfGiven
	}
	src := opts.Certificate
	verify := opts.VerifyCluster
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		ClientAuth: auth,
		ClientCAs:  pool,
		Time:       opts.Time,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			if src == nil {
				return nil, errors.New("no server certificate configured")
			}
			cert := src.Current()
			if cert == nil {
				return nil, errors.New("no server certificate loaded")
			}
			return cert, nil
		},
		// VerifyConnection runs after chain verification on full and resumed
		// handshakes alike, so revocation applies to both.
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				if auth == tls.RequireAndVerifyClientCert {
					return ErrNoClientCertificate
				}
				return nil
			}
			cluster, serial, err := ClusterFromConnectionState(cs)
			if err != nil {
				return err
			}
			if verify != nil {
				if err := verify(cluster, serial); err != nil {
					return fmt.Errorf("cluster %q certificate %s refused: %w", cluster, serial, err)
				}
			}
			return nil
		},
	}
}

// ClusterFromConnectionState returns the cluster and serial of the verified
// client certificate of a server-side connection, such as the TLS state of a
// gRPC peer. It returns ErrNoClientCertificate when the client presented none
// and an error wrapping ErrInvalidIdentity when the certificate carries no
// valid cluster identity. It trusts the handshake's chain verification, so
// use it only with connections made with ServerTLSConfig.
func ClusterFromConnectionState(cs tls.ConnectionState) (cluster, serial string, err error) {
	if len(cs.VerifiedChains) == 0 || len(cs.PeerCertificates) == 0 {
		return "", "", ErrNoClientCertificate
	}
	leaf := cs.PeerCertificates[0]
	cluster, err = ClusterFromCert(leaf)
	if err != nil {
		return "", "", err
	}
	return cluster, Serial(leaf), nil
}

// ClientTLSOptions configures ClientTLSConfig.
type ClientTLSOptions struct {
	// RootCAs holds the trust anchors for the server, usually parsed from
	// the CA bundle the agent was given (--ca-file). Required: a nil pool
	// trusts nothing, never the system roots.
	RootCAs *x509.CertPool
	// ServerName is the name the server certificate must carry; required
	// when dialing by IP address or by a name other than the certificate's.
	ServerName string
	// Certificate supplies the client certificate on each handshake; nil, or
	// a source without a certificate yet, presents none, as registration
	// does.
	Certificate CertSource
	// Time, if set, is the clock for certificate validity; nil means
	// time.Now.
	Time func() time.Time
}

// ClientTLSConfig returns the agent's TLS configuration: TLS 1.3 or later,
// the server verified against opts.RootCAs for opts.ServerName, and the
// current certificate of opts.Certificate presented on every handshake.
func ClientTLSConfig(opts ClientTLSOptions) *tls.Config {
	pool := opts.RootCAs
	if pool == nil {
		pool = x509.NewCertPool()
	}
	src := opts.Certificate
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		RootCAs:    pool,
		ServerName: opts.ServerName,
		Time:       opts.Time,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			if src != nil {
				if cert := src.Current(); cert != nil {
					return cert, nil
				}
			}
			return &tls.Certificate{}, nil // present no certificate
		},
	}
}

// RenewAt returns when a certificate should be renewed: after two thirds of
// its lifetime.
func RenewAt(cert *x509.Certificate) time.Time {
	life := cert.NotAfter.Sub(cert.NotBefore)
	return cert.NotBefore.Add(life / 3 * 2)
}
