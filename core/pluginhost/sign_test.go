package pluginhost

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"strings"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/content/oci"
)

// Signatures made with each supported key verify with its public key
// only, and only for the index they name; unsupported keys are refused
// when read.
func TestSignatureKeys(t *testing.T) {
	ctx := context.Background()
	_, edPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecPriv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecDER, err := x509.MarshalECPrivateKey(ecPriv)
	if err != nil {
		t.Fatal(err)
	}
	edDER, err := x509.MarshalPKCS8PrivateKey(edPriv)
	if err != nil {
		t.Fatal(err)
	}
	genPriv, _, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string][]byte{
		"ECDSA P-256 PKCS#8 (keygen)": genPriv,
		"ECDSA P-256 SEC 1":           pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: ecDER}),
		"Ed25519 PKCS#8":              pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: edDER}),
	}
	store, err := oci.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	index := content.NewDescriptorFromBytes(ocispec.MediaTypeImageIndex, []byte(`{"schemaVersion":2}`))
	other := content.NewDescriptorFromBytes(ocispec.MediaTypeImageIndex, []byte(`{"schemaVersion":2,"annotations":{}}`))
	var pubs []PublicKey
	for name, data := range keys {
		k, err := ParsePrivateKey(data)
		if err != nil {
			t.Fatalf("ParsePrivateKey(%s) = %v", name, err)
		}
		pub, err := k.Public()
		if err != nil {
			t.Fatal(err)
		}
		pubs = append(pubs, pub)
	}
	for name, data := range keys {
		t.Run(name, func(t *testing.T) {
			k, _ := ParsePrivateKey(data)
			pub, _ := k.Public()
			if err := sign(ctx, store, "example.com/acme", index, k); err != nil {
				t.Fatalf("sign = %v", err)
			}
			if err := verifySignature(ctx, store, index, []PublicKey{pub}); err != nil {
				t.Errorf("verify with its own key = %v", err)
			}
			var others []PublicKey
			for _, p := range pubs {
				if p.Fingerprint != pub.Fingerprint {
					others = append(others, p)
				}
			}
			if err := verifySignature(ctx, store, index, others); !errors.Is(err, ErrSignature) {
				t.Errorf("verify with the other keys = %v, want ErrSignature", err)
			}
			if err := verifySignature(ctx, store, other, []PublicKey{pub}); !errors.Is(err, ErrUnsigned) {
				t.Errorf("verify an index nobody signed = %v, want ErrUnsigned", err)
			}
		})
	}

	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKCS8PrivateKey(p384)
	for name, data := range map[string][]byte{
		"P-384":     pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}),
		"encrypted": pem.EncodeToMemory(&pem.Block{Type: "ENCRYPTED SIGSTORE PRIVATE KEY", Bytes: []byte("x")}),
		"not PEM":   []byte("hello"),
	} {
		if _, err := ParsePrivateKey(data); err == nil {
			t.Errorf("ParsePrivateKey(%s) accepted it", name)
		}
	}
	if _, err := ParsePublicKeys([]byte("no keys here")); err == nil || !strings.Contains(err.Error(), "no PEM") {
		t.Errorf("ParsePublicKeys(no PEM) = %v", err)
	}
}
