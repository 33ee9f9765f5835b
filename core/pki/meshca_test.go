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
	"net/url"
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
	certPEM, chainPEM, notAfter, err := root.SignIntermediateCSR(csr, "east", []string{"cluster.local"}, 2*time.Hour)
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
			_, _, _, err := root.SignIntermediateCSR(tc.csr, tc.cluster, []string{"cluster.local"}, time.Hour)
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

// An intermediate signs workload identities in its mesh's trust domains
// only: a leaf with a SPIFFE ID in another trust domain fails Go's
// verification against the mesh root, and an intermediate is never signed
// without a trust domain.
func TestSignIntermediateCSRConstrainsTrustDomains(t *testing.T) {
	root, err := GenerateMeshRoot("mesh root", 24*time.Hour)
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
	domains := []string{"cluster.local", "east.example.com"}
	certPEM, _, _, err := root.SignIntermediateCSR(csr, "east", domains, 2*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	inter, err := ParseCertificatesPEM(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	if !ConstrainedTo(inter[0], []string{"east.example.com", "cluster.local"}) || ConstrainedTo(inter[0], []string{"cluster.local"}) {
		t.Errorf("intermediate permits URI domains %v, want exactly %v", inter[0].PermittedURIDomains, domains)
	}
	roots := x509.NewCertPool()
	roots.AddCert(root.Certificate())
	mids := x509.NewCertPool()
	mids.AddCert(inter[0])
	tests := map[string]bool{
		"spiffe://cluster.local/ns/bookinfo/sa/bookinfo-reviews":   true,
		"spiffe://east.example.com/ns/app/sa/reviews":              true,
		"spiffe://other-domain.example/ns/bookinfo/sa/reviews":     false,
		"spiffe://cluster.local.evil.example/ns/bookinfo/sa/evil":  false,
		"spiffe://local/ns/bookinfo/sa/evil":                       false,
		"https://cluster.evil.example/ns/bookinfo/sa/reviews-test": false,
	}
	for id, ok := range tests {
		leaf := signSPIFFELeaf(t, inter[0], key, id)
		_, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: mids})
		if ok && err != nil {
			t.Errorf("leaf %s: %v, want it to verify", id, err)
		}
		if !ok && err == nil {
			t.Errorf("leaf %s verified; want the name constraint to refuse it", id)
		}
	}
	for _, bad := range [][]string{nil, {}, {"*.cluster.local"}, {"a/b"}} {
		if _, _, _, err := root.SignIntermediateCSR(csr, "east", bad, time.Hour); err == nil {
			t.Errorf("SignIntermediateCSR(trust domains %q) succeeded, want an error", bad)
		}
	}
}

func signSPIFFELeaf(t *testing.T, issuer *x509.Certificate, issuerKey *ecdsa.PrivateKey, id string) *x509.Certificate {
	t.Helper()
	u, err := url.Parse(id)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), URIs: []*url.URL{u},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, issuer, key.Public(), issuerKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
