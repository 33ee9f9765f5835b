package pki

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"time"
)

// Defaults for certificate lifetimes.
const (
	// DefaultCATTL is the lifetime of a CA that GenerateCA creates when given
	// a zero TTL.
	DefaultCATTL = 10 * 365 * 24 * time.Hour
	// DefaultClusterCertTTL is the lifetime of a cluster certificate when
	// SignClusterCSR is given a zero TTL.
	DefaultClusterCertTTL = 24 * time.Hour
	// DefaultServerCertTTL is the lifetime of a server certificate when
	// IssueServerCert is given a zero TTL.
	DefaultServerCertTTL = 90 * 24 * time.Hour
)

// File names used by Save and LoadOrCreateCA inside their directory.
const (
	// CACertFile holds the PEM signing certificate.
	CACertFile = "ca.crt"
	// CAKeyFile holds the PEM PKCS #8 private key, mode 0600.
	CAKeyFile = "ca.key"
	// CAChainFile holds the PEM certificates above the signing certificate,
	// issuer of the signing certificate first; it exists only for an
	// intermediate CA.
	CAChainFile = "ca-chain.crt"
)

// backdate is how far NotBefore is set in the past to tolerate clock skew.
const backdate = time.Minute

// PEM block types.
const (
	pemCertificate = "CERTIFICATE"
	pemPrivateKey  = "PRIVATE KEY"
)

// CA signs cluster and server certificates. Its signing certificate is either
// a self-signed root made by GenerateCA or a certificate loaded from a user's
// PKI, which may be an intermediate with its chain. A CA is immutable and safe
// for concurrent use.
type CA struct {
	cert   *x509.Certificate
	signer crypto.Signer
	// chain holds the certificates above cert, issuer of cert first, up to
	// the root if the user supplied it.
	chain []*x509.Certificate
	// issued holds the DER certificates sent after every leaf the CA signs;
	// see intermediates.
	issued [][]byte
	// now is the clock; tests replace it to issue certificates in the past.
	now func() time.Time
}

// GenerateCA creates a self-signed ECDSA P-256 root CA named commonName, valid
// for ttl (DefaultCATTL if ttl is zero). The root may sign only end-entity
// certificates.
func GenerateCA(commonName string, ttl time.Duration) (*CA, error) {
	return generateCA(commonName, ttl, 0)
}

// generateCA creates a self-signed root that allows maxPathLen CAs below it.
func generateCA(commonName string, ttl time.Duration, maxPathLen int) (*CA, error) {
	if commonName == "" {
		return nil, errors.New("generate CA: common name is empty")
	}
	if ttl < 0 {
		return nil, fmt.Errorf("generate CA: negative ttl %v", ttl)
	}
	if ttl == 0 {
		ttl = DefaultCATTL
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, fmt.Errorf("generate CA: %w", err)
	}
	now := time.Now().UTC().Truncate(time.Second) // the precision certificates keep
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName, Organization: []string{"meshrelay"}},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(ttl),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            maxPathLen,
		MaxPathLenZero:        maxPathLen == 0,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("generate CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("generate CA: parse certificate: %w", err)
	}
	return &CA{cert: cert, signer: key, now: time.Now}, nil
}

// LoadCA loads a CA from PEM files. certFile holds the signing certificate,
// optionally followed by its chain; keyFile its private key (PKCS #8, SEC 1
// or PKCS #1); chainFile, if not empty, the certificates above the signing
// certificate, issuer first, up to and preferably including the root. Each
// certificate must be signed by the next, and the signing certificate must be
// a currently valid CA matching the key. The last certificate becomes the
// trust anchor: without a chain, an intermediate is itself the anchor agents
// receive in BundlePEM. The CA key may be ECDSA, Ed25519 or
// RSA, so an intermediate from an existing PKI can be used.
func LoadCA(certFile, keyFile, chainFile string) (*CA, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("load CA: %w", err)
	}
	certs, err := parseCertificates(certPEM)
	if err != nil {
		return nil, fmt.Errorf("load CA certificate %s: %w", certFile, err)
	}
	if chainFile != "" {
		chainPEM, err := os.ReadFile(chainFile)
		if err != nil {
			return nil, fmt.Errorf("load CA: %w", err)
		}
		chain, err := parseCertificates(chainPEM)
		if err != nil {
			return nil, fmt.Errorf("load CA chain %s: %w", chainFile, err)
		}
		certs = append(certs, chain...)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("load CA: %w", err)
	}
	key, err := ParseKeyPEM(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("load CA key %s: %w", keyFile, err)
	}
	ca, err := newCA(certs, key, time.Now)
	if err != nil {
		return nil, fmt.Errorf("load CA %s: %w", certFile, err)
	}
	return ca, nil
}

// LoadOrCreateCA loads the CA saved in dir by Save, or, when dir holds neither
// CACertFile nor CAKeyFile, generates one with GenerateCA(commonName, ttl) and
// saves it there. It refuses a directory holding only one of the two files
// rather than replacing a CA agents already trust.
func LoadOrCreateCA(dir, commonName string, ttl time.Duration) (*CA, error) {
	certPath := filepath.Join(dir, CACertFile)
	keyPath := filepath.Join(dir, CAKeyFile)
	chainPath := filepath.Join(dir, CAChainFile)
	certOK, err := exists(certPath)
	if err != nil {
		return nil, fmt.Errorf("load or create CA in %s: %w", dir, err)
	}
	keyOK, err := exists(keyPath)
	if err != nil {
		return nil, fmt.Errorf("load or create CA in %s: %w", dir, err)
	}
	switch {
	case certOK && keyOK:
		chainOK, err := exists(chainPath)
		if err != nil {
			return nil, fmt.Errorf("load or create CA in %s: %w", dir, err)
		}
		if !chainOK {
			chainPath = ""
		}
		return LoadCA(certPath, keyPath, chainPath)
	case certOK || keyOK:
		return nil, fmt.Errorf("load or create CA in %s: found only one of %s and %s; restore the other or remove both", dir, CACertFile, CAKeyFile)
	}
	ca, err := GenerateCA(commonName, ttl)
	if err != nil {
		return nil, fmt.Errorf("load or create CA in %s: %w", dir, err)
	}
	if err := ca.Save(dir); err != nil {
		return nil, fmt.Errorf("load or create CA: %w", err)
	}
	return ca, nil
}

// ParsePEM parses a CA from the PEM MarshalPEM returns: one private key block
// and the signing certificate followed by its chain. It applies the checks of
// LoadCA.
func ParsePEM(data []byte) (*CA, error) {
	var (
		certs  []*x509.Certificate
		keyDER []byte
		keyTyp string
	)
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		switch block.Type {
		case pemCertificate:
			cert, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				return nil, fmt.Errorf("parse CA PEM: certificate %d: %w", len(certs)+1, err)
			}
			certs = append(certs, cert)
		case pemPrivateKey, "EC PRIVATE KEY", "RSA PRIVATE KEY":
			if keyDER != nil {
				return nil, errors.New("parse CA PEM: more than one private key")
			}
			keyDER, keyTyp = block.Bytes, block.Type
		default:
			return nil, fmt.Errorf("parse CA PEM: unexpected block %q", block.Type)
		}
	}
	if keyDER == nil {
		return nil, errors.New("parse CA PEM: no private key")
	}
	key, err := parseKeyDER(keyTyp, keyDER)
	if err != nil {
		return nil, fmt.Errorf("parse CA PEM: %w", err)
	}
	ca, err := newCA(certs, key, time.Now)
	if err != nil {
		return nil, fmt.Errorf("parse CA PEM: %w", err)
	}
	return ca, nil
}

// newCA checks that certs[0] is a valid CA for key, that every certificate is
// signed by the next one, and that the chain verifies at now.
func newCA(certs []*x509.Certificate, key crypto.Signer, now func() time.Time) (*CA, error) {
	if len(certs) == 0 {
		return nil, errors.New("no certificate")
	}
	cert := certs[0]
	if !cert.BasicConstraintsValid || !cert.IsCA {
		return nil, fmt.Errorf("certificate %q is not a CA", cert.Subject)
	}
	if cert.KeyUsage != 0 && cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, fmt.Errorf("certificate %q lacks the certSign key usage", cert.Subject)
	}
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(cert.PublicKey) {
		return nil, fmt.Errorf("private key does not match certificate %q", cert.Subject)
	}
	chain := certs[1:]
	if isSelfSigned(cert) && len(chain) > 0 {
		return nil, fmt.Errorf("certificate %q is self-signed but a chain of %d certificates follows it", cert.Subject, len(chain))
	}
	for i, parent := range chain {
		child := certs[i]
		if err := child.CheckSignatureFrom(parent); err != nil {
			return nil, fmt.Errorf("chain: certificate %q is not signed by the next one, %q (order the chain issuer first): %w", child.Subject, parent.Subject, err)
		}
	}
	top := certs[len(certs)-1]
	roots := x509.NewCertPool()
	roots.AddCert(top)
	inter := x509.NewCertPool()
	if len(certs) > 2 {
		for _, c := range certs[1 : len(certs)-1] {
			inter.AddCert(c)
		}
	}
	if _, err := cert.Verify(x509.VerifyOptions{
		Roots:         roots,
		Intermediates: inter,
		CurrentTime:   now(),
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
	}); err != nil {
		return nil, fmt.Errorf("verify CA certificate %q: %w", cert.Subject, err)
	}
	return &CA{cert: cert, signer: key, chain: chain, issued: intermediates(cert, chain), now: now}, nil
}

// Certificate returns the CA's signing certificate.
func (ca *CA) Certificate() *x509.Certificate {
	return ca.cert
}

// BundlePEM returns the trust anchors to give agents and to verify client
// certificates with: the signing certificate followed by its chain, so up to
// the root when the CA was loaded with one.
func (ca *CA) BundlePEM() []byte {
	var buf bytes.Buffer
	for _, c := range ca.bundle() {
		_ = pem.Encode(&buf, &pem.Block{Type: pemCertificate, Bytes: c.Raw}) // writes to a bytes.Buffer do not fail
	}
	return buf.Bytes()
}

// Pool returns a new pool holding the certificates of BundlePEM.
func (ca *CA) Pool() *x509.CertPool {
	pool := x509.NewCertPool()
	for _, c := range ca.bundle() {
		pool.AddCert(c)
	}
	return pool
}

// ClientPool returns a pool holding only the signing certificate: the
// anchor for verifying agents' client certificates. Certificates that other
// CAs under the same root issued are not trusted, only this CA's own.
func (ca *CA) ClientPool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	return pool
}

// bundle returns the signing certificate and its chain.
func (ca *CA) bundle() []*x509.Certificate {
	return append([]*x509.Certificate{ca.cert}, ca.chain...)
}

// MarshalPEM returns the CA's private key (PKCS #8) followed by its signing
// certificate and chain, for ParsePEM. The result is secret: store it only
// where the CA key may be kept.
func (ca *CA) MarshalPEM() ([]byte, error) {
	keyPEM, err := KeyPEM(ca.signer)
	if err != nil {
		return nil, fmt.Errorf("marshal CA: %w", err)
	}
	return append(keyPEM, ca.BundlePEM()...), nil
}

// Save writes the CA into dir as CACertFile, CAKeyFile (mode 0600) and, for an
// intermediate, CAChainFile, creating dir with mode 0700 if needed. Each file
// is replaced atomically.
func (ca *CA) Save(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("save CA: %w", err)
	}
	keyPEM, err := KeyPEM(ca.signer)
	if err != nil {
		return fmt.Errorf("save CA: %w", err)
	}
	if err := writeFileAtomic(filepath.Join(dir, CAKeyFile), keyPEM, 0o600); err != nil {
		return fmt.Errorf("save CA key: %w", err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: pemCertificate, Bytes: ca.cert.Raw})
	if err := writeFileAtomic(filepath.Join(dir, CACertFile), certPEM, 0o644); err != nil {
		return fmt.Errorf("save CA certificate: %w", err)
	}
	chainPath := filepath.Join(dir, CAChainFile)
	if len(ca.chain) == 0 {
		if err := os.Remove(chainPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("save CA: remove stale chain: %w", err)
		}
		return nil
	}
	var chainPEM []byte
	for _, c := range ca.chain {
		chainPEM = append(chainPEM, pem.EncodeToMemory(&pem.Block{Type: pemCertificate, Bytes: c.Raw})...)
	}
	if err := writeFileAtomic(chainPath, chainPEM, 0o644); err != nil {
		return fmt.Errorf("save CA chain: %w", err)
	}
	return nil
}

// intermediates returns the DER certificates to send after a leaf signed by
// cert: cert and its chain when cert is an intermediate, without the
// self-signed root, which peers hold as a trust anchor.
func intermediates(cert *x509.Certificate, chain []*x509.Certificate) [][]byte {
	if isSelfSigned(cert) {
		return nil
	}
	out := [][]byte{cert.Raw}
	for _, c := range chain {
		if isSelfSigned(c) {
			break
		}
		out = append(out, c.Raw)
	}
	return out
}

// isSelfSigned reports whether c is its own issuer and signed by its own key.
func isSelfSigned(c *x509.Certificate) bool {
	return bytes.Equal(c.RawIssuer, c.RawSubject) && c.CheckSignatureFrom(c) == nil
}

// newSerial returns a random positive 128-bit serial number.
func newSerial() (*big.Int, error) {
	limit := new(big.Int).Lsh(big.NewInt(1), 128)
	for {
		n, err := rand.Int(rand.Reader, limit)
		if err != nil {
			return nil, fmt.Errorf("serial number: %w", err)
		}
		if n.Sign() > 0 {
			return n, nil
		}
	}
}

// parseCertificates parses every CERTIFICATE block of data and refuses any
// other block.
func parseCertificates(data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != pemCertificate {
			return nil, fmt.Errorf("unexpected PEM block %q", block.Type)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %w", len(certs)+1, err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, errors.New("no PEM certificate found")
	}
	return certs, nil
}

// exists reports whether path exists.
func exists(path string) (bool, error) {
	_, err := os.Stat(path)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	default:
		return false, err
	}
}

// writeFileAtomic writes data to a temporary file in path's directory with
// mode perm, syncs it and renames it over path.
func writeFileAtomic(path string, data []byte, perm fs.FileMode) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	if err := f.Chmod(perm); err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
