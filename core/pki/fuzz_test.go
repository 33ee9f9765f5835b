package pki

import (
	"crypto/x509"
	"slices"
	"testing"
	"time"
)

// FuzzParsePEM feeds arbitrary bytes to the CA decoders: they must refuse or
// return a CA whose key signs what its certificate claims.
func FuzzParsePEM(f *testing.F) {
	ca := newTestCA(f, "fuzz")
	good, err := ca.MarshalPEM()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(ca.BundlePEM())
	f.Add([]byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = ParseKeyPEM(data)
		_, _ = parseCertificates(data)
		parsed, err := ParsePEM(data)
		if err != nil {
			return
		}
		if !parsed.Certificate().IsCA {
			t.Fatalf("ParsePEM accepted a non-CA certificate")
		}
		if _, _, _, err := parsed.SignClusterCSR(mustCSR(t, "alpha"), "alpha", time.Minute); err != nil {
			t.Fatalf("CA from ParsePEM cannot sign: %v", err)
		}
	})
}

// FuzzSignClusterCSR feeds arbitrary requests to the CA: whatever it signs
// carries only the identity of the cluster it was asked for.
func FuzzSignClusterCSR(f *testing.F) {
	ca := newTestCA(f, "fuzz")
	f.Add(mustCSR(f, "alpha"), "alpha")
	f.Add(mustCSR(f, "beta"), "alpha")
	f.Add([]byte{0x30, 0x00}, "a")
	f.Fuzz(func(t *testing.T, csr []byte, cluster string) {
		chainPEM, serial, _, err := ca.SignClusterCSR(csr, cluster, time.Minute)
		if err != nil {
			return
		}
		certs, err := parseCertificates(chainPEM)
		if err != nil || len(certs) != 1 {
			t.Fatalf("signed chain: %d certificates, %v", len(certs), err)
		}
		c := certs[0]
		if got := uriStrings(c); !slices.Equal(got, []string{ClusterURI(cluster)}) {
			t.Fatalf("URI SANs = %q, want only %q", got, ClusterURI(cluster))
		}
		if len(c.DNSNames)+len(c.IPAddresses)+len(c.EmailAddresses) != 0 || c.IsCA {
			t.Fatalf("certificate carries more than the cluster identity")
		}
		if name, err := ClusterFromCert(c); err != nil || name != cluster || Serial(c) != serial {
			t.Fatalf("ClusterFromCert = %q, %v; want %q", name, err, cluster)
		}
		if _, err := c.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Fatalf("issued certificate does not verify: %v", err)
		}
	})
}
