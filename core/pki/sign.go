package pki

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"
)

// maxCSRSize bounds the DER a caller may hand to SignClusterCSR; a P-256 or
// Ed25519 CSR is a few hundred bytes.
const maxCSRSize = 16 << 10

// ErrInvalidCSR reports a certificate signing request that cannot be parsed
// or whose signature does not verify.
var ErrInvalidCSR = errors.New("invalid certificate signing request")

// ErrUnsupportedKey reports a public key other than ECDSA P-256 or Ed25519.
var ErrUnsupportedKey = errors.New("unsupported key type")

// SignClusterCSR issues a client certificate for cluster from csrDER, a DER
// PKCS #10 request such as NewCSR returns. It verifies the request's
// signature and requires an ECDSA P-256 or Ed25519 public key, then ignores
// everything else the request asks for: the certificate's only identity is
// the URI SAN ClusterURI(cluster), its common name is cluster, and it is good
// only for client authentication. The certificate is valid from one minute
// ago for ttl (DefaultClusterCertTTL if zero), cut short at the CA's own
// expiry. It returns the PEM certificate followed by any intermediates, the
// serial as Serial formats it, and the expiry.
//
// Errors caused by the request wrap ErrInvalidClusterName, ErrInvalidCSR or
// ErrUnsupportedKey; the caller maps those to an invalid-argument status.
func (ca *CA) SignClusterCSR(csrDER []byte, cluster string, ttl time.Duration) (certChainPEM []byte, serial string, notAfter time.Time, err error) {
	if err := ValidateClusterName(cluster); err != nil {
		return nil, "", time.Time{}, fmt.Errorf("sign CSR: %w", err)
	}
	if len(csrDER) > maxCSRSize {
		return nil, "", time.Time{}, fmt.Errorf("sign CSR for cluster %q: %d bytes exceeds %d: %w", cluster, len(csrDER), maxCSRSize, ErrInvalidCSR)
	}
	csr, err := x509.ParseCertificateRequest(csrDER)
	if err != nil {
		return nil, "", time.Time{}, fmt.Errorf("sign CSR for cluster %q: %w: %w", cluster, ErrInvalidCSR, err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, "", time.Time{}, fmt.Errorf("sign CSR for cluster %q: signature: %w: %w", cluster, ErrInvalidCSR, err)
	}
	if err := checkClusterKey(csr.PublicKey); err != nil {
		return nil, "", time.Time{}, fmt.Errorf("sign CSR for cluster %q: %w", cluster, err)
	}
	if ttl == 0 {
		ttl = DefaultClusterCertTTL
	}
	u, err := url.Parse(ClusterURI(cluster))
	if err != nil {
		return nil, "", time.Time{}, fmt.Errorf("sign CSR for cluster %q: %w", cluster, err)
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: cluster},
		URIs:        []*url.URL{u},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := ca.issue(tmpl, csr.PublicKey, ttl)
	if err != nil {
		return nil, "", time.Time{}, fmt.Errorf("sign CSR for cluster %q: %w", cluster, err)
	}
	out := pem.EncodeToMemory(&pem.Block{Type: pemCertificate, Bytes: der})
	for _, c := range ca.issued {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: pemCertificate, Bytes: c})...)
	}
	return out, tmpl.SerialNumber.Text(16), tmpl.NotAfter, nil
}

// IssueServerCert issues a serving certificate with a fresh ECDSA P-256 key
// for sans, each a DNS name or an IP address, valid for ttl
// (DefaultServerCertTTL if zero) and cut short at the CA's own expiry. The
// returned certificate carries any intermediates and its parsed Leaf.
func (ca *CA) IssueServerCert(sans []string, ttl time.Duration) (tls.Certificate, error) {
	if len(sans) == 0 {
		return tls.Certificate{}, errors.New("issue server certificate: no subject alternative names")
	}
	tmpl := &x509.Certificate{
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, san := range sans {
		if ip := net.ParseIP(san); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			continue
		}
		if err := checkDNSName(san); err != nil {
			return tls.Certificate{}, fmt.Errorf("issue server certificate: %w", err)
		}
		tmpl.DNSNames = append(tmpl.DNSNames, san)
	}
	tmpl.Subject = pkix.Name{CommonName: sans[0]}
	if ttl == 0 {
		ttl = DefaultServerCertTTL
	}
	key, err := NewKey()
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("issue server certificate: %w", err)
	}
	der, err := ca.issue(tmpl, key.Public(), ttl)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("issue server certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("issue server certificate: parse: %w", err)
	}
	return tls.Certificate{
		Certificate: append([][]byte{der}, ca.issued...),
		PrivateKey:  key,
		Leaf:        leaf,
	}, nil
}

// issue fills in the serial number and validity of tmpl and signs it for
// pub: an end-entity certificate unless tmpl says it is a CA.
func (ca *CA) issue(tmpl *x509.Certificate, pub any, ttl time.Duration) ([]byte, error) {
	if ttl < 0 {
		return nil, fmt.Errorf("negative ttl %v", ttl)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := ca.now().UTC().Truncate(time.Second) // the precision certificates keep
	tmpl.SerialNumber = serial
	tmpl.NotBefore = now.Add(-backdate)
	tmpl.NotAfter = now.Add(ttl)
	if tmpl.NotAfter.After(ca.cert.NotAfter) {
		tmpl.NotAfter = ca.cert.NotAfter
	}
	if !tmpl.NotAfter.After(now) {
		return nil, fmt.Errorf("CA certificate %q expired at %v", ca.cert.Subject, ca.cert.NotAfter)
	}
	tmpl.BasicConstraintsValid = true
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, pub, ca.signer)
	if err != nil {
		return nil, fmt.Errorf("create certificate: %w", err)
	}
	return der, nil
}

// checkClusterKey accepts ECDSA P-256 and Ed25519 public keys.
func checkClusterKey(pub any) error {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() {
			return fmt.Errorf("ECDSA key on curve %s, want P-256: %w", k.Curve.Params().Name, ErrUnsupportedKey)
		}
		return nil
	case ed25519.PublicKey:
		return nil
	default:
		return fmt.Errorf("%T, want ECDSA P-256 or Ed25519: %w", pub, ErrUnsupportedKey)
	}
}

// checkDNSName accepts a DNS name of letters, digits, '-' and '.', optionally
// starting with a "*." wildcard label.
func checkDNSName(name string) error {
	labels := strings.TrimPrefix(name, "*.")
	if labels == "" || len(name) > 253 {
		return fmt.Errorf("invalid DNS name %.260q", name)
	}
	for _, label := range strings.Split(labels, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return fmt.Errorf("invalid DNS name %q", name)
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return fmt.Errorf("invalid DNS name %q", name)
			}
		}
	}
	return nil
}
