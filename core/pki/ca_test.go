package pki

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestGenerateCA(t *testing.T) {
	ca, err := GenerateCA("meshrelay test CA", 2*time.Hour)
	if err != nil {
		t.Fatalf("GenerateCA = %v", err)
	}
	c := ca.Certificate()
	if !c.IsCA || !isSelfSigned(c) {
		t.Errorf("CA certificate IsCA=%v self-signed=%v, want both", c.IsCA, isSelfSigned(c))
	}
	pub, ok := c.PublicKey.(*ecdsa.PublicKey)
	if !ok || pub.Curve != elliptic.P256() {
		t.Errorf("CA key = %T, want ECDSA P-256", c.PublicKey)
	}
	if got := c.NotAfter.Sub(c.NotBefore); got != 2*time.Hour+backdate {
		t.Errorf("CA lifetime = %v, want %v", got, 2*time.Hour+backdate)
	}
	if c.MaxPathLen != 0 || !c.MaxPathLenZero {
		t.Errorf("CA MaxPathLen = %d (zero=%v), want 0: a generated root signs only leaves", c.MaxPathLen, c.MaxPathLenZero)
	}
	certs, err := parseCertificates(ca.BundlePEM())
	if err != nil || len(certs) != 1 || !certs[0].Equal(c) {
		t.Errorf("BundlePEM = %d certificates, %v; want the CA certificate", len(certs), err)
	}

	for name, tc := range map[string]struct {
		cn  string
		ttl time.Duration
	}{
		"empty name":   {cn: "", ttl: time.Hour},
		"negative ttl": {cn: "x", ttl: -time.Hour},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := GenerateCA(tc.cn, tc.ttl); err == nil {
				t.Errorf("GenerateCA(%q, %v) = nil error, want error", tc.cn, tc.ttl)
			}
		})
	}
}

func TestSaveLoadRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	ca := newTestCA(t, "roundtrip")
	if err := ca.Save(dir); err != nil {
		t.Fatalf("Save = %v", err)
	}
	fi, err := os.Stat(filepath.Join(dir, CAKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Errorf("key file mode = %o, want 600", perm)
	}
	if _, err := os.Stat(filepath.Join(dir, CAChainFile)); !os.IsNotExist(err) {
		t.Errorf("chain file for a root CA: stat = %v, want not exist", err)
	}
	loaded, err := LoadCA(filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile), "")
	if err != nil {
		t.Fatalf("LoadCA = %v", err)
	}
	if !loaded.Certificate().Equal(ca.Certificate()) {
		t.Errorf("LoadCA certificate differs from the saved one")
	}
	// The loaded CA signs certificates that the original CA's pool trusts.
	leaf := clusterCert(t, loaded, "alpha", time.Hour)
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("certificate signed by the loaded CA does not verify: %v", err)
	}

	again, err := LoadOrCreateCA(dir, "ignored", 0)
	if err != nil {
		t.Fatalf("LoadOrCreateCA(existing) = %v", err)
	}
	if !again.Certificate().Equal(ca.Certificate()) {
		t.Errorf("LoadOrCreateCA replaced an existing CA")
	}
}

func TestLoadOrCreateCA(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new")
	ca, err := LoadOrCreateCA(dir, "created", time.Hour)
	if err != nil {
		t.Fatalf("LoadOrCreateCA(empty) = %v", err)
	}
	again, err := LoadOrCreateCA(dir, "created", time.Hour)
	if err != nil {
		t.Fatalf("LoadOrCreateCA(second) = %v", err)
	}
	if !again.Certificate().Equal(ca.Certificate()) {
		t.Errorf("second LoadOrCreateCA made a new CA, want the saved one")
	}
	if err := os.Remove(filepath.Join(dir, CAKeyFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateCA(dir, "created", time.Hour); err == nil {
		t.Errorf("LoadOrCreateCA with the key missing = nil error, want refusal")
	}
}

func TestMarshalParsePEM(t *testing.T) {
	ca := newTestCA(t, "kv")
	data, err := ca.MarshalPEM()
	if err != nil {
		t.Fatalf("MarshalPEM = %v", err)
	}
	got, err := ParsePEM(data)
	if err != nil {
		t.Fatalf("ParsePEM = %v", err)
	}
	if !got.Certificate().Equal(ca.Certificate()) {
		t.Errorf("ParsePEM certificate differs")
	}
	if !bytes.Equal(got.BundlePEM(), ca.BundlePEM()) {
		t.Errorf("ParsePEM bundle differs")
	}

	other := newTestCA(t, "other")
	otherKey, err := KeyPEM(other.signer.(*ecdsa.PrivateKey))
	if err != nil {
		t.Fatal(err)
	}
	for name, input := range map[string][]byte{
		"empty":            nil,
		"no key":           ca.BundlePEM(),
		"no certificate":   otherKey,
		"mismatched key":   append(append([]byte{}, otherKey...), ca.BundlePEM()...),
		"two keys":         append(append([]byte{}, otherKey...), data...),
		"unknown block":    append(append([]byte{}, data...), pem.EncodeToMemory(&pem.Block{Type: "JUNK", Bytes: []byte{1}})...),
		"garbled cert":     append(append([]byte{}, otherKey...), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{1, 2}})...),
		"leaf, not a CA":   leafWithKey(t, ca),
		"two roots listed": append(append([]byte{}, data...), other.BundlePEM()...),
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := ParsePEM(input); err == nil {
				t.Errorf("ParsePEM(%s) = nil error, want error", name)
			}
		})
	}
}

// leafWithKey returns the PEM of a cluster certificate and its key: valid
// PEM, but not a CA.
func leafWithKey(t *testing.T, ca *CA) []byte {
	t.Helper()
	key, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	csr, err := NewCSR(key, "leaf")
	if err != nil {
		t.Fatal(err)
	}
	chain, _, _, err := ca.SignClusterCSR(csr, "leaf", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := KeyPEM(key)
	if err != nil {
		t.Fatal(err)
	}
	return append(keyPEM, chain...)
}

func writePEM(t *testing.T, path, typ string, ders ...[]byte) {
	t.Helper()
	var buf bytes.Buffer
	for _, der := range ders {
		if err := pem.Encode(&buf, &pem.Block{Type: typ, Bytes: der}); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestIntermediateCA(t *testing.T) {
	pki := newUserPKI(t)
	dir := t.TempDir()
	keyDER, err := x509.MarshalPKCS8PrivateKey(pki.interKey)
	if err != nil {
		t.Fatal(err)
	}
	certFile := filepath.Join(dir, "inter.crt")
	keyFile := filepath.Join(dir, "inter.key")
	chainFile := filepath.Join(dir, "chain.crt")
	writePEM(t, certFile, "CERTIFICATE", pki.inter.Raw)
	writePEM(t, keyFile, "PRIVATE KEY", keyDER)
	writePEM(t, chainFile, "CERTIFICATE", pki.root.Raw)

	ca, err := LoadCA(certFile, keyFile, chainFile)
	if err != nil {
		t.Fatalf("LoadCA(intermediate) = %v", err)
	}
	bundle, err := parseCertificates(ca.BundlePEM())
	if err != nil {
		t.Fatal(err)
	}
	if len(bundle) != 2 || !bundle[0].Equal(pki.inter) || !bundle[1].Equal(pki.root) {
		t.Errorf("BundlePEM = %d certificates, want intermediate then root", len(bundle))
	}

	// A cluster certificate carries the intermediate and verifies against
	// the root alone.
	key, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	csr, err := NewCSR(key, "alpha")
	if err != nil {
		t.Fatal(err)
	}
	chainPEM, _, _, err := ca.SignClusterCSR(csr, "alpha", time.Hour)
	if err != nil {
		t.Fatalf("SignClusterCSR = %v", err)
	}
	chain, err := parseCertificates(chainPEM)
	if err != nil {
		t.Fatal(err)
	}
	if len(chain) != 2 || !chain[1].Equal(pki.inter) {
		t.Fatalf("issued chain = %d certificates, want leaf and intermediate (not the root)", len(chain))
	}
	rootOnly := x509.NewCertPool()
	rootOnly.AddCert(pki.root)
	inters := x509.NewCertPool()
	inters.AddCert(chain[1])
	if _, err := chain[0].Verify(x509.VerifyOptions{Roots: rootOnly, Intermediates: inters, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("cluster certificate does not verify against the root: %v", err)
	}
	if _, err := chain[0].Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("cluster certificate does not verify against Pool: %v", err)
	}

	srv, err := ca.IssueServerCert([]string{"relay.example.com"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if len(srv.Certificate) != 2 {
		t.Errorf("server certificate chain length = %d, want 2 (leaf, intermediate)", len(srv.Certificate))
	}
	if _, err := srv.Leaf.Verify(x509.VerifyOptions{Roots: rootOnly, Intermediates: inters, DNSName: "relay.example.com"}); err != nil {
		t.Errorf("server certificate does not verify against the root: %v", err)
	}

	// Save and load keeps the chain, and the key stays private.
	saved := filepath.Join(dir, "saved")
	if err := ca.Save(saved); err != nil {
		t.Fatalf("Save = %v", err)
	}
	again, err := LoadOrCreateCA(saved, "unused", 0)
	if err != nil {
		t.Fatalf("LoadOrCreateCA(saved intermediate) = %v", err)
	}
	if !bytes.Equal(again.BundlePEM(), ca.BundlePEM()) {
		t.Errorf("saved intermediate CA bundle differs after reload")
	}
	data, err := ca.MarshalPEM()
	if err != nil {
		t.Fatal(err)
	}
	if parsed, err := ParsePEM(data); err != nil || !bytes.Equal(parsed.BundlePEM(), ca.BundlePEM()) {
		t.Errorf("ParsePEM(MarshalPEM(intermediate)) = %v, want same bundle", err)
	}

	// Without its chain an intermediate is its own trust anchor.
	alone, err := LoadCA(certFile, keyFile, "")
	if err != nil {
		t.Fatalf("LoadCA(intermediate without chain) = %v", err)
	}
	if got, _ := parseCertificates(alone.BundlePEM()); len(got) != 1 || !got[0].Equal(pki.inter) {
		t.Errorf("BundlePEM without chain = %d certificates, want the intermediate alone", len(got))
	}

	// The signing certificate followed by its chain in one file also works.
	combined := filepath.Join(dir, "combined.crt")
	writePEM(t, combined, "CERTIFICATE", pki.inter.Raw, pki.root.Raw)
	if _, err := LoadCA(combined, keyFile, ""); err != nil {
		t.Errorf("LoadCA(cert+chain in one file) = %v", err)
	}
}

func TestLoadCAErrors(t *testing.T) {
	pki := newUserPKI(t)
	dir := t.TempDir()
	interKeyDER, err := x509.MarshalPKCS8PrivateKey(pki.interKey)
	if err != nil {
		t.Fatal(err)
	}
	rootKeyDER, err := x509.MarshalPKCS8PrivateKey(pki.rootKey)
	if err != nil {
		t.Fatal(err)
	}
	other := newTestCA(t, "other")
	files := map[string]func(string){
		"inter.crt":      func(p string) { writePEM(t, p, "CERTIFICATE", pki.inter.Raw) },
		"inter.key":      func(p string) { writePEM(t, p, "PRIVATE KEY", interKeyDER) },
		"root.crt":       func(p string) { writePEM(t, p, "CERTIFICATE", pki.root.Raw) },
		"root.key":       func(p string) { writePEM(t, p, "PRIVATE KEY", rootKeyDER) },
		"other.crt":      func(p string) { writePEM(t, p, "CERTIFICATE", other.Certificate().Raw) },
		"leaf.crt":       func(p string) { writePEM(t, p, "CERTIFICATE", clusterCert(t, other, "leaf", time.Hour).Certificate[0]) },
		"garbage.crt":    func(p string) { _ = os.WriteFile(p, []byte("not pem"), 0o600) },
		"root-inter.crt": func(p string) { writePEM(t, p, "CERTIFICATE", pki.root.Raw, pki.inter.Raw) },
	}
	for name, write := range files {
		write(filepath.Join(dir, name))
	}
	for name, tc := range map[string]struct{ cert, key, chain, want string }{
		"missing cert":         {cert: "nope.crt", key: "inter.key", want: "no such file"},
		"missing key":          {cert: "inter.crt", key: "nope.key", want: "no such file"},
		"garbage cert":         {cert: "garbage.crt", key: "inter.key", want: "no PEM certificate"},
		"key of another cert":  {cert: "inter.crt", key: "root.key", chain: "root.crt", want: "does not match"},
		"wrong chain":          {cert: "inter.crt", key: "inter.key", chain: "other.crt", want: "not signed by"},
		"chain in wrong order": {cert: "inter.crt", key: "inter.key", chain: "root-inter.crt", want: "not signed by"},
		"not a CA":             {cert: "leaf.crt", key: "inter.key", want: "not a CA"},
	} {
		t.Run(name, func(t *testing.T) {
			chain := ""
			if tc.chain != "" {
				chain = filepath.Join(dir, tc.chain)
			}
			_, err := LoadCA(filepath.Join(dir, tc.cert), filepath.Join(dir, tc.key), chain)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("LoadCA(%s, %s, %q) = %v, want error containing %q", tc.cert, tc.key, tc.chain, err, tc.want)
			}
		})
	}
}

func TestLoadCAExpired(t *testing.T) {
	ca := newTestCA(t, "expiring")
	data, err := ca.MarshalPEM()
	if err != nil {
		t.Fatal(err)
	}
	key, err := ParseKeyPEM(data)
	if err != nil {
		t.Fatal(err)
	}
	later := func() time.Time { return time.Now().Add(2 * time.Hour) }
	if _, err := newCA([]*x509.Certificate{ca.Certificate()}, key, later); err == nil {
		t.Errorf("newCA with an expired certificate = nil error, want error")
	}
	// An unexpired CA caps certificates at its own expiry.
	_, _, notAfter, err := ca.SignClusterCSR(mustCSR(t, "alpha"), "alpha", 48*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if !notAfter.Equal(ca.Certificate().NotAfter) {
		t.Errorf("notAfter = %v, want capped at CA expiry %v", notAfter, ca.Certificate().NotAfter)
	}
}

func mustCSR(tb testing.TB, cluster string) []byte {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	csr, err := NewCSR(key, cluster)
	if err != nil {
		tb.Fatal(err)
	}
	return csr
}
