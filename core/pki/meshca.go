package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// A mesh root CA signs the intermediate CAs that each cluster's Istio uses
// to sign workload certificates. It is a CA of its own, never the relay CA
// that identifies agents: a workload certificate must never pass for an
// agent, nor the reverse.

// GenerateMeshRoot creates a self-signed ECDSA P-256 root named commonName,
// valid for ttl (DefaultCATTL if zero), that may sign one level of
// intermediate CAs.
func GenerateMeshRoot(commonName string, ttl time.Duration) (*CA, error) {
	return generateCA(commonName, ttl, 1)
}

// SignIntermediateCSR issues an intermediate CA certificate for cluster's
// mesh from csrDER, a DER PKCS #10 request. It verifies the request's
// signature and accepts ECDSA P-256 or P-384 and RSA keys of 2048 bits or
// more (the key types Istio's CA signs with), then ignores everything else
// the request asks for: the subject names the cluster, the certificate may
// sign workload certificates but no further CA, it may sign URI names only
// in trustDomains (a critical name constraint: a SPIFFE ID
// spiffe://TRUST-DOMAIN/... is permitted when its host is one of them), and
// it lives for ttl, cut short at the signing CA's own expiry. DNS names
// stay unconstrained: istiod signs its own serving certificate with the
// intermediate. It returns the PEM intermediate, the chain Istio's
// cert-chain.pem holds (the intermediate up to and including the root) and
// the expiry.
//
// Errors caused by the request wrap ErrInvalidClusterName, ErrInvalidCSR or
// ErrUnsupportedKey; an empty or invalid trustDomains is an error too.
func (ca *CA) SignIntermediateCSR(csrDER []byte, cluster string, trustDomains []string, ttl time.Duration) (certPEM, chainPEM []byte, notAfter time.Time, err error) {
	if err := ValidateClusterName(cluster); err != nil {
		return nil, nil, time.Time{}, fmt.Errorf("sign intermediate CSR: %w", err)
	}
	if err := checkTrustDomains(trustDomains); err != nil {
		return nil, nil, time.Time{}, fmt.Errorf("sign intermediate CSR of cluster %q: %w", cluster, err)
	}
	fail := func(err error) ([]byte, []byte, time.Time, error) {
		return nil, nil, time.Time{}, fmt.Errorf("sign intermediate CSR of cluster %q: %w", cluster, err)
	}
	if len(csrDER) > maxCSRSize {
		return fail(fmt.Errorf("%d bytes exceeds %d: %w", len(csrDER), maxCSRSize, ErrInvalidCSR))
	}
	csr, err := x509.ParseCertificateRequest(csrDER)
	if err != nil {
		return fail(fmt.Errorf("%w: %w", ErrInvalidCSR, err))
	}
	if err := csr.CheckSignature(); err != nil {
		return fail(fmt.Errorf("signature: %w: %w", ErrInvalidCSR, err))
	}
	if err := checkIntermediateKey(csr.PublicKey); err != nil {
		return fail(err)
	}
	if ttl == 0 {
		return fail(errors.New("zero ttl"))
	}
	tmpl := &x509.Certificate{
		Subject:  pkix.Name{CommonName: "meshrelay mesh intermediate " + cluster, Organization: []string{"meshrelay"}, OrganizationalUnit: []string{cluster}},
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,

		PermittedURIDomains:         slices.Clone(trustDomains),
		PermittedDNSDomainsCritical: true, // marks the whole name constraints extension critical
	}
	der, err := ca.issueCA(tmpl, csr.PublicKey, ttl)
	if err != nil {
		return fail(err)
	}
	certPEM = pem.EncodeToMemory(&pem.Block{Type: pemCertificate, Bytes: der})
	return certPEM, append(certPEM, ca.BundlePEM()...), tmpl.NotAfter, nil
}

// checkTrustDomains accepts one or more DNS names without wildcards.
func checkTrustDomains(domains []string) error {
	if len(domains) == 0 {
		return errors.New("no trust domain to constrain the intermediate to")
	}
	for _, d := range domains {
		if strings.HasPrefix(d, "*.") {
			return fmt.Errorf("trust domain %q: no wildcards", d)
		}
		if err := checkDNSName(d); err != nil {
			return fmt.Errorf("trust domain: %w", err)
		}
	}
	return nil
}

// ConstrainedTo reports whether a CA certificate may sign URI names in
// exactly trustDomains, in any order, and no other.
func ConstrainedTo(c *x509.Certificate, trustDomains []string) bool {
	if len(c.PermittedURIDomains) == 0 || len(c.ExcludedURIDomains) > 0 {
		return false
	}
	have, want := slices.Sorted(slices.Values(c.PermittedURIDomains)), slices.Sorted(slices.Values(trustDomains))
	return slices.Equal(slices.Compact(have), slices.Compact(want))
}

// issueCA signs tmpl as a CA certificate that may sign only end-entity
// certificates.
func (ca *CA) issueCA(tmpl *x509.Certificate, pub any, ttl time.Duration) ([]byte, error) {
	tmpl.IsCA = true
	tmpl.MaxPathLen, tmpl.MaxPathLenZero = 0, true
	return ca.issue(tmpl, pub, ttl)
}

// checkIntermediateKey accepts ECDSA P-256 and P-384 and RSA keys of at
// least 2048 bits.
func checkIntermediateKey(pub any) error {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() && k.Curve != elliptic.P384() {
			return fmt.Errorf("ECDSA key on curve %s, want P-256 or P-384: %w", k.Curve.Params().Name, ErrUnsupportedKey)
		}
	case *rsa.PublicKey:
		if k.N.BitLen() < 2048 {
			return fmt.Errorf("RSA key of %d bits, want 2048 or more: %w", k.N.BitLen(), ErrUnsupportedKey)
		}
	default:
		return fmt.Errorf("%T, want ECDSA or RSA: %w", pub, ErrUnsupportedKey)
	}
	return nil
}

// Anchor returns the top of the CA's bundle: the root its certificates
// chain to, or the CA itself when it was loaded without its chain.
func (ca *CA) Anchor() *x509.Certificate {
	b := ca.bundle()
	return b[len(b)-1]
}

// Fingerprint returns the hex SHA-256 of a certificate's DER.
func Fingerprint(c *x509.Certificate) string {
	sum := sha256.Sum256(c.Raw)
	return hex.EncodeToString(sum[:])
}

// CertificatesPEM encodes certificates as consecutive PEM blocks.
func CertificatesPEM(certs ...*x509.Certificate) []byte {
	var out []byte
	for _, c := range certs {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: pemCertificate, Bytes: c.Raw})...)
	}
	return out
}

// ParseCertificatesPEM parses every CERTIFICATE block of data and refuses
// any other block.
func ParseCertificatesPEM(data []byte) ([]*x509.Certificate, error) {
	return parseCertificates(data)
}
