package pki

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"path/filepath"
	"testing"
	"time"
)

// loadIntermediate writes an intermediate under p's root and loads it as a
// CA with its chain.
func loadIntermediate(t *testing.T, p userPKI, cert *x509.Certificate, key any) *CA {
	t.Helper()
	dir := t.TempDir()
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, chainFile := filepath.Join(dir, "c.crt"), filepath.Join(dir, "c.key"), filepath.Join(dir, "chain.crt")
	writePEM(t, certFile, "CERTIFICATE", cert.Raw)
	writePEM(t, keyFile, "PRIVATE KEY", keyDER)
	writePEM(t, chainFile, "CERTIFICATE", p.root.Raw)
	ca, err := LoadCA(certFile, keyFile, chainFile)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// A CA loaded with its chain trusts only the client certificates it
// issued, not those of another intermediate under the same root.
func TestClientPoolTrustsOnlyTheIssuingCA(t *testing.T) {
	p := newUserPKI(t)
	ours := loadIntermediate(t, p, p.inter, p.interKey)
	siblingKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(3), Subject: pkix.Name{CommonName: "Example Corp other team"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true, MaxPathLenZero: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.root, siblingKey.Public(), p.rootKey)
	if err != nil {
		t.Fatal(err)
	}
	siblingCert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	sibling := loadIntermediate(t, p, siblingCert, siblingKey)

	server := func(pool *x509.CertPool) ServerTLSOptions {
		return ServerTLSOptions{Certificate: reloader(t, serverCert(t, ours)), ClientCAs: pool, ClientAuth: VerifyClientCertIfGiven}
	}
	client := func(ca *CA) ClientTLSOptions {
		return ClientTLSOptions{RootCAs: ours.Pool(), ServerName: "localhost", Certificate: reloader(t, clusterCert(t, ca, "alpha", time.Hour))}
	}
	if res := handshake(t, ServerTLSConfig(server(ours.ClientPool())), ClientTLSConfig(client(ours))); !res.ok() {
		t.Fatalf("our own cluster certificate refused: server %v, client %v", res.serverErr, res.clientErr)
	}
	if res := handshake(t, ServerTLSConfig(server(ours.ClientPool())), ClientTLSConfig(client(sibling))); res.ok() {
		t.Fatal("a cluster certificate of another intermediate under the same root was accepted")
	}
}
