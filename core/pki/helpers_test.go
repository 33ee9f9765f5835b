package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"testing"
	"time"
)

// newTestCA generates a throwaway root CA.
func newTestCA(tb testing.TB, name string) *CA {
	tb.Helper()
	ca, err := GenerateCA(name, time.Hour)
	if err != nil {
		tb.Fatalf("GenerateCA(%q) = %v", name, err)
	}
	return ca
}

// clusterCert issues a cluster certificate for cluster through the same path
// an agent uses: NewKey, NewCSR, SignClusterCSR.
func clusterCert(tb testing.TB, ca *CA, cluster string, ttl time.Duration) *tls.Certificate {
	tb.Helper()
	key, err := NewKey()
	if err != nil {
		tb.Fatal(err)
	}
	csr, err := NewCSR(key, cluster)
	if err != nil {
		tb.Fatalf("NewCSR(%q) = %v", cluster, err)
	}
	chainPEM, _, _, err := ca.SignClusterCSR(csr, cluster, ttl)
	if err != nil {
		tb.Fatalf("SignClusterCSR(%q) = %v", cluster, err)
	}
	keyPEM, err := KeyPEM(key)
	if err != nil {
		tb.Fatal(err)
	}
	cert, err := tls.X509KeyPair(chainPEM, keyPEM)
	if err != nil {
		tb.Fatalf("X509KeyPair: %v", err)
	}
	return &cert
}

// serverCert issues a serving certificate for localhost and 127.0.0.1.
func serverCert(tb testing.TB, ca *CA) *tls.Certificate {
	tb.Helper()
	cert, err := ca.IssueServerCert([]string{"localhost", "127.0.0.1"}, time.Hour)
	if err != nil {
		tb.Fatalf("IssueServerCert = %v", err)
	}
	return &cert
}

// reloader wraps cert in a Reloader.
func reloader(tb testing.TB, cert *tls.Certificate) *Reloader {
	tb.Helper()
	r, err := NewReloader(cert)
	if err != nil {
		tb.Fatalf("NewReloader = %v", err)
	}
	return r
}

// userPKI builds a root and an intermediate the way an existing PKI would:
// the root may sign CAs, the intermediate (RSA, to show non-ECDSA CA keys
// work) signs leaves.
type userPKI struct {
	root, inter       *x509.Certificate
	rootKey, interKey any
}

func newUserPKI(tb testing.TB) userPKI {
	tb.Helper()
	rootKey, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	now := time.Now()
	rootTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "Example Corp Root"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(48 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	rootDER, err := x509.CreateCertificate(rand.Reader, rootTmpl, rootTmpl, rootKey.Public(), rootKey)
	if err != nil {
		tb.Fatal(err)
	}
	root, err := x509.ParseCertificate(rootDER)
	if err != nil {
		tb.Fatal(err)
	}
	interKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		tb.Fatal(err)
	}
	interTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(2),
		Subject:               pkix.Name{CommonName: "Example Corp meshrelay Intermediate"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	interDER, err := x509.CreateCertificate(rand.Reader, interTmpl, root, interKey.Public(), rootKey)
	if err != nil {
		tb.Fatal(err)
	}
	inter, err := x509.ParseCertificate(interDER)
	if err != nil {
		tb.Fatal(err)
	}
	return userPKI{root: root, inter: inter, rootKey: rootKey, interKey: interKey}
}
