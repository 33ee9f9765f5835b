package pki

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"testing"
	"time"
)

// TestSignIntermediateCSR checks that an intermediate signed from a CSR can
// sign a workload leaf that verifies up to the mesh root, and cannot sign
// a further CA.
func TestSignIntermediateCSR(t *testing.T) {
	root, err := GenerateMeshRoot("mesh root", time.Hour*24)
	if err != nil {
		t.Fatal(err)
	}
	key, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	csr, err := NewCSR(key, "east")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, chainPEM, notAfter, err := root.SignIntermediateCSR(csr, "east", 2*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	inter, err := ParseCertificatesPEM(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	chain, err := ParseCertificatesPEM(chainPEM)
	if err != nil {
		t.Fatal(err)
	}
	if len(chain) != 2 || !chain[1].Equal(root.Certificate()) || !chain[0].Equal(inter[0]) {
		t.Fatalf("chain = %d certificates, want the intermediate then the root", len(chain))
	}
	if !inter[0].IsCA || !inter[0].MaxPathLenZero || !notAfter.Equal(inter[0].NotAfter) {
		t.Errorf("intermediate IsCA=%v MaxPathLenZero=%v NotAfter=%v (returned %v)", inter[0].IsCA, inter[0].MaxPathLenZero, inter[0].NotAfter, notAfter)
	}
	leaf, _ := signLeaf(t, inter[0], key, true)
	roots := x509.NewCertPool()
	roots.AddCert(root.Certificate())
	mids := x509.NewCertPool()
	mids.AddCert(inter[0])
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: mids}); err != nil {
		t.Errorf("workload leaf does not verify to the mesh root: %v", err)
	}
	// A CA under the intermediate breaks its path length.
	sub, subKey := signLeaf(t, inter[0], key, false)
	mids.AddCert(sub)
	subLeaf, _ := signLeaf(t, sub, subKey, true)
	if _, err := subLeaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: mids}); err == nil {
		t.Error("a CA below the intermediate verified; want the path length to refuse it")
	}
}

func TestSignIntermediateCSRRefuses(t *testing.T) {
	root, err := GenerateMeshRoot("mesh root", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	p256, _ := NewKey()
	good, _ := NewCSR(p256, "east")
	_, edKey, _ := ed25519.GenerateKey(rand.Reader)
	edCSR, _ := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, edKey)
	small, _ := rsa.GenerateKey(rand.Reader, 1024)
	smallCSR, _ := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, small)
	tampered := append([]byte{}, good...)
	tampered[len(tampered)-5] ^= 0xff
	for name, tc := range map[string]struct {
		csr     []byte
		cluster string
		want    error
	}{
		"garbage":       {csr: []byte("not a csr"), cluster: "east", want: ErrInvalidCSR},
		"bad signature": {csr: tampered, cluster: "east", want: ErrInvalidCSR},
		"ed25519":       {csr: edCSR, cluster: "east", want: ErrUnsupportedKey},
		"small rsa":     {csr: smallCSR, cluster: "east", want: ErrUnsupportedKey},
		"bad cluster":   {csr: good, cluster: "East!", want: ErrInvalidClusterName},
		"too large":     {csr: make([]byte, maxCSRSize+1), cluster: "east", want: ErrInvalidCSR},
	} {
		t.Run(name, func(t *testing.T) {
			_, _, _, err := root.SignIntermediateCSR(tc.csr, tc.cluster, time.Hour)
			if !errors.Is(err, tc.want) {
				t.Errorf("SignIntermediateCSR = %v, want %v", err, tc.want)
			}
		})
	}
}

// signLeaf signs a workload certificate (or, with leaf false, a CA) with
// issuer's key.
func signLeaf(t *testing.T, issuer *x509.Certificate, issuerKey *ecdsa.PrivateKey, leaf bool) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "workload"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		BasicConstraintsValid: true, IsCA: !leaf, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, issuer, key.Public(), issuerKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c, key
}
