package pki

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"sync/atomic"
)

// Reloader holds a certificate that can be replaced while TLS configurations
// use it: a server swaps in a reissued serving certificate, an agent its
// renewed cluster certificate, and each new handshake presents the newest.
// Connections already established keep the certificate they were made with.
// The zero value holds no certificate. A Reloader is safe for concurrent use.
type Reloader struct {
	cert atomic.Pointer[tls.Certificate]
}

var _ CertSource = (*Reloader)(nil)

// NewReloader returns a Reloader holding cert, which may be nil.
func NewReloader(cert *tls.Certificate) (*Reloader, error) {
	r := &Reloader{}
	if cert != nil {
		if err := r.Store(cert); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Current returns the certificate held now, or nil if there is none.
func (r *Reloader) Current() *tls.Certificate {
	return r.cert.Load()
}

// Store replaces the certificate atomically. It parses cert.Leaf if missing
// and refuses a certificate without a private key.
func (r *Reloader) Store(cert *tls.Certificate) error {
	if cert == nil || len(cert.Certificate) == 0 {
		return errors.New("store certificate: empty certificate")
	}
	if cert.PrivateKey == nil {
		return errors.New("store certificate: no private key")
	}
	if cert.Leaf == nil {
		leaf, err := x509.ParseCertificate(cert.Certificate[0])
		if err != nil {
			return fmt.Errorf("store certificate: %w", err)
		}
		c := *cert
		c.Leaf = leaf
		cert = &c
	}
	r.cert.Store(cert)
	return nil
}

// StorePEM replaces the certificate with certChainPEM (the leaf first, as
// SignClusterCSR returns it) and keyPEM, after checking that they match.
func (r *Reloader) StorePEM(certChainPEM, keyPEM []byte) error {
	cert, err := tls.X509KeyPair(certChainPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("store certificate: %w", err)
	}
	return r.Store(&cert)
}

// LoadFiles replaces the certificate with the PEM files certFile and keyFile,
// for a server whose serving certificate is rotated on disk.
func (r *Reloader) LoadFiles(certFile, keyFile string) error {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return fmt.Errorf("load certificate %s: %w", certFile, err)
	}
	return r.Store(&cert)
}
