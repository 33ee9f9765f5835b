package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"net"
	"net/url"
	"slices"
	"testing"
	"time"
)

func TestSignClusterCSR(t *testing.T) {
	ca := newTestCA(t, "sign")
	p256, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	_, edKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	// greedy asks for everything a CSR can ask for: another cluster's
	// identity, DNS, IP and e-mail SANs, and a CA-looking subject.
	greedy := func(key crypto.Signer) []byte {
		other, _ := url.Parse(ClusterURI("beta"))
		evil, _ := url.Parse("spiffe://cluster.local/ns/istio-system/sa/istiod")
		der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
			Subject:        pkix.Name{CommonName: "beta", Organization: []string{"system:masters"}},
			DNSNames:       []string{"relay.example.com", "*.example.com"},
			IPAddresses:    []net.IP{net.ParseIP("10.0.0.1")},
			EmailAddresses: []string{"root@example.com"},
			URIs:           []*url.URL{other, evil},
		}, key)
		if err != nil {
			t.Fatal(err)
		}
		return der
	}
	csrFor := func(key crypto.Signer, cluster string) []byte {
		der, err := NewCSR(key, cluster)
		if err != nil {
			t.Fatal(err)
		}
		return der
	}
	tampered := csrFor(p256, "alpha")
	tampered = slices.Clone(tampered)
	tampered[len(tampered)-5] ^= 0xff // inside the signature

	for name, tc := range map[string]struct {
		csr     []byte
		cluster string
		ttl     time.Duration
		wantTTL time.Duration
		wantErr error
	}{
		"p256":                {csr: csrFor(p256, "alpha"), cluster: "alpha", ttl: 30 * time.Minute, wantTTL: 30 * time.Minute},
		"ed25519":             {csr: csrFor(edKey, "alpha"), cluster: "alpha", ttl: time.Minute, wantTTL: time.Minute},
		"default ttl":         {csr: csrFor(p256, "alpha"), cluster: "alpha", wantTTL: 0}, // capped by the 1h CA below
		"extra SANs ignored":  {csr: greedy(p256), cluster: "alpha", ttl: time.Minute, wantTTL: time.Minute},
		"CSR names other":     {csr: csrFor(p256, "beta"), cluster: "alpha", ttl: time.Minute, wantTTL: time.Minute},
		"max length name":     {csr: csrFor(p256, "alpha"), cluster: "a23456789012345678901234567890123456789012345678901234567890123", ttl: time.Minute, wantTTL: time.Minute},
		"p384 refused":        {csr: csrFor(p384, "alpha"), cluster: "alpha", wantErr: ErrUnsupportedKey},
		"rsa refused":         {csr: csrFor(rsaKey, "alpha"), cluster: "alpha", wantErr: ErrUnsupportedKey},
		"bad signature":       {csr: tampered, cluster: "alpha", wantErr: ErrInvalidCSR},
		"garbage":             {csr: []byte{0x30, 0x03, 1, 2, 3}, cluster: "alpha", wantErr: ErrInvalidCSR},
		"oversized":           {csr: make([]byte, maxCSRSize+1), cluster: "alpha", wantErr: ErrInvalidCSR},
		"upper case name":     {csr: csrFor(p256, "alpha"), cluster: "Alpha", wantErr: ErrInvalidClusterName},
		"dotted name":         {csr: csrFor(p256, "alpha"), cluster: "a.b", wantErr: ErrInvalidClusterName},
		"slash name":          {csr: csrFor(p256, "alpha"), cluster: "a/../b", wantErr: ErrInvalidClusterName},
		"empty name":          {csr: csrFor(p256, "alpha"), cluster: "", wantErr: ErrInvalidClusterName},
		"name too long":       {csr: csrFor(p256, "alpha"), cluster: "a234567890123456789012345678901234567890123456789012345678901234", wantErr: ErrInvalidClusterName},
		"negative ttl":        {csr: csrFor(p256, "alpha"), cluster: "alpha", ttl: -time.Minute, wantErr: errAny},
		"leading hyphen name": {csr: csrFor(p256, "alpha"), cluster: "-alpha", wantErr: ErrInvalidClusterName},
	} {
		t.Run(name, func(t *testing.T) {
			before := time.Now().Truncate(time.Second)
			chainPEM, serial, notAfter, err := ca.SignClusterCSR(tc.csr, tc.cluster, tc.ttl)
			if tc.wantErr != nil {
				if err == nil || (tc.wantErr != errAny && !errors.Is(err, tc.wantErr)) {
					t.Fatalf("SignClusterCSR(%q) = %v, want %v", tc.cluster, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("SignClusterCSR(%q) = %v", tc.cluster, err)
			}
			certs, err := parseCertificates(chainPEM)
			if err != nil || len(certs) != 1 {
				t.Fatalf("chain = %d certificates, %v; want 1 from a root CA", len(certs), err)
			}
			c := certs[0]
			if got := uriStrings(c); !slices.Equal(got, []string{ClusterURI(tc.cluster)}) {
				t.Errorf("URI SANs = %q, want only %q", got, ClusterURI(tc.cluster))
			}
			if len(c.DNSNames)+len(c.IPAddresses)+len(c.EmailAddresses) != 0 {
				t.Errorf("certificate has DNS %q, IP %v, email %q; want none", c.DNSNames, c.IPAddresses, c.EmailAddresses)
			}
			if c.Subject.CommonName != tc.cluster || len(c.Subject.Organization) != 0 {
				t.Errorf("subject = %q, want CN=%s only", c.Subject, tc.cluster)
			}
			if c.IsCA || !slices.Equal(c.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}) {
				t.Errorf("IsCA=%v ExtKeyUsage=%v, want a client-auth leaf", c.IsCA, c.ExtKeyUsage)
			}
			if got, err := ClusterFromCert(c); err != nil || got != tc.cluster {
				t.Errorf("ClusterFromCert = %q, %v; want %q", got, err, tc.cluster)
			}
			if serial != Serial(c) || c.SerialNumber.BitLen() > 128 || c.SerialNumber.BitLen() < 64 {
				t.Errorf("serial = %s (cert %s, %d bits), want the certificate's random 128-bit serial", serial, Serial(c), c.SerialNumber.BitLen())
			}
			if !notAfter.Equal(c.NotAfter) {
				t.Errorf("notAfter = %v, certificate says %v", notAfter, c.NotAfter)
			}
			if c.NotBefore.After(before.Add(-backdate)) {
				t.Errorf("NotBefore = %v, want backdated by %v from %v", c.NotBefore, backdate, before)
			}
			want := tc.wantTTL
			if want == 0 {
				want = time.Until(ca.Certificate().NotAfter) // DefaultClusterCertTTL capped by the CA
			}
			if got := c.NotAfter.Sub(c.NotBefore) - backdate; got < want-5*time.Second || got > want+5*time.Second {
				t.Errorf("lifetime = %v, want %v", got, want)
			}
			if _, err := c.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
				t.Errorf("certificate does not verify against the CA: %v", err)
			}
		})
	}
}

// errAny marks a table case that expects some error, whatever it wraps.
var errAny = errors.New("any error")

// uriStrings returns the URI SANs of c as strings.
func uriStrings(c *x509.Certificate) []string {
	var out []string
	for _, u := range c.URIs {
		out = append(out, u.String())
	}
	return out
}

func TestSignClusterCSRDefaultTTL(t *testing.T) {
	ca, err := GenerateCA("long", 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _, notAfter, err := ca.SignClusterCSR(mustCSR(t, "alpha"), "alpha", 0)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Until(notAfter); d < DefaultClusterCertTTL-time.Minute || d > DefaultClusterCertTTL {
		t.Errorf("default lifetime left = %v, want about %v", d, DefaultClusterCertTTL)
	}
}

func TestSerialsDiffer(t *testing.T) {
	ca := newTestCA(t, "serials")
	csr := mustCSR(t, "alpha")
	seen := map[string]bool{}
	for range 20 {
		_, serial, _, err := ca.SignClusterCSR(csr, "alpha", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if seen[serial] {
			t.Fatalf("serial %s issued twice", serial)
		}
		seen[serial] = true
	}
}

func TestIssueServerCert(t *testing.T) {
	ca := newTestCA(t, "server")
	cert, err := ca.IssueServerCert([]string{"relay.example.com", "*.relay.example.com", "127.0.0.1", "::1"}, 10*time.Minute)
	if err != nil {
		t.Fatalf("IssueServerCert = %v", err)
	}
	leaf := cert.Leaf
	if !slices.Equal(leaf.DNSNames, []string{"relay.example.com", "*.relay.example.com"}) {
		t.Errorf("DNSNames = %q", leaf.DNSNames)
	}
	if len(leaf.IPAddresses) != 2 || !leaf.IPAddresses[0].Equal(net.ParseIP("127.0.0.1")) || !leaf.IPAddresses[1].Equal(net.ParseIP("::1")) {
		t.Errorf("IPAddresses = %v", leaf.IPAddresses)
	}
	if len(leaf.URIs) != 0 {
		t.Errorf("server certificate has URI SANs %v, want none", leaf.URIs)
	}
	for _, host := range []string{"relay.example.com", "a.relay.example.com", "127.0.0.1", "::1"} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: ca.Pool(), DNSName: host}); err != nil {
			t.Errorf("server certificate does not verify for %s: %v", host, err)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Errorf("server certificate verifies for client auth, want server auth only")
	}
	if got := leaf.NotAfter.Sub(leaf.NotBefore); got != 10*time.Minute+backdate {
		t.Errorf("lifetime = %v, want %v", got, 10*time.Minute+backdate)
	}
	for name, sans := range map[string][]string{
		"none":        nil,
		"empty":       {""},
		"space":       {"relay example"},
		"empty label": {"relay..example"},
		"url":         {"https://relay"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := ca.IssueServerCert(sans, time.Hour); err == nil {
				t.Errorf("IssueServerCert(%q) = nil error, want error", sans)
			}
		})
	}
}

func TestRenewAt(t *testing.T) {
	nb := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for name, tc := range map[string]struct {
		life time.Duration
		want time.Duration
	}{
		"24h": {life: 24 * time.Hour, want: 16 * time.Hour},
		"3m":  {life: 3 * time.Minute, want: 2 * time.Minute},
	} {
		t.Run(name, func(t *testing.T) {
			c := &x509.Certificate{NotBefore: nb, NotAfter: nb.Add(tc.life)}
			if got := RenewAt(c); !got.Equal(nb.Add(tc.want)) {
				t.Errorf("RenewAt(%v lifetime) = %v, want %v", tc.life, got, nb.Add(tc.want))
			}
		})
	}
}

func BenchmarkSignClusterCSR(b *testing.B) {
	ca := newTestCA(b, "bench")
	csr := mustCSR(b, "alpha")
	for b.Loop() {
		if _, _, _, err := ca.SignClusterCSR(csr, "alpha", time.Hour); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "signs/s")
}

func BenchmarkSignClusterCSRParallel(b *testing.B) {
	ca := newTestCA(b, "bench")
	csr := mustCSR(b, "alpha")
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, _, _, err := ca.SignClusterCSR(csr, "alpha", time.Hour); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "signs/s")
}
