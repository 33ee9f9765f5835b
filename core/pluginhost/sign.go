package pluginhost

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/errdef"
)

// Signatures follow cosign's key-based layout, so that they verify offline
// with a public key alone: the signed payload is a simple-signing JSON
// document naming the index digest, pushed as the one layer of a manifest
// tagged sha256-HEX.sig beside the index, with the base64 signature in the
// layer's annotation. ECDSA P-256 keys sign the payload's SHA-256 (ASN.1),
// Ed25519 keys the payload itself. Keys are PEM: PKCS#8 private keys and
// PKIX public keys (cosign's cosign.pub is one).
const (
	simpleSigningMediaType = "application/vnd.dev.cosign.simplesigning.v1+json"
	signatureAnnotation    = "dev.cosignproject.cosign/signature"
	simpleSigningType      = "cosign container image signature"
)

// TrustedKeysFile is the file in a plugin directory holding the PEM public
// keys trusted to sign plugin artifacts.
const TrustedKeysFile = "trusted-keys"

// ErrUnsigned is wrapped by the error of installing an artifact that has
// no signature.
var ErrUnsigned = errors.New("plugin artifact is not signed")

// ErrSignature is wrapped by the error of installing an artifact whose
// signature verifies with no trusted key.
var ErrSignature = errors.New("plugin artifact signature does not verify")

// PublicKey is a key trusted to sign plugin artifacts.
type PublicKey struct {
	key crypto.PublicKey
	// Fingerprint is "sha256:" and the hex SHA-256 of the key's PKIX DER.
	Fingerprint string
}

// PrivateKey signs plugin artifacts.
type PrivateKey struct{ signer crypto.Signer }

// Public returns the private key's public key.
func (k PrivateKey) Public() (PublicKey, error) { return newPublicKey(k.signer.Public()) }

func newPublicKey(k crypto.PublicKey) (PublicKey, error) {
	der, err := x509.MarshalPKIXPublicKey(k)
	if err != nil {
		return PublicKey{}, err
	}
	sum := sha256.Sum256(der)
	return PublicKey{key: k, Fingerprint: "sha256:" + hex.EncodeToString(sum[:])}, nil
}

// GenerateKey returns a new ECDSA P-256 key pair as PEM: the PKCS#8
// private key and the PKIX public key.
func GenerateKey() (private, public []byte, err error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(k.Public())
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), nil
}

// ParsePrivateKey reads a PEM private key: PKCS#8 ("PRIVATE KEY") or SEC 1
// ("EC PRIVATE KEY"), ECDSA P-256 or Ed25519.
func ParsePrivateKey(data []byte) (PrivateKey, error) {
	b, _ := pem.Decode(data)
	if b == nil {
		return PrivateKey{}, errors.New("parse private key: no PEM block")
	}
	var k any
	var err error
	switch b.Type {
	case "PRIVATE KEY":
		k, err = x509.ParsePKCS8PrivateKey(b.Bytes)
	case "EC PRIVATE KEY":
		k, err = x509.ParseECPrivateKey(b.Bytes)
	default:
		return PrivateKey{}, fmt.Errorf("parse private key: PEM block %q: want an unencrypted PRIVATE KEY or EC PRIVATE KEY", b.Type)
	}
	if err != nil {
		return PrivateKey{}, fmt.Errorf("parse private key: %w", err)
	}
	switch k := k.(type) {
	case *ecdsa.PrivateKey:
		if k.Curve != elliptic.P256() {
			return PrivateKey{}, errors.New("parse private key: ECDSA keys must use P-256")
		}
		return PrivateKey{signer: k}, nil
	case ed25519.PrivateKey:
		return PrivateKey{signer: k}, nil
	}
	return PrivateKey{}, fmt.Errorf("parse private key: %T is neither ECDSA P-256 nor Ed25519", k)
}

// ParsePublicKeys reads every PEM "PUBLIC KEY" block in data.
func ParsePublicKeys(data []byte) ([]PublicKey, error) {
	var keys []PublicKey
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			break
		}
		if b.Type != "PUBLIC KEY" {
			continue
		}
		k, err := x509.ParsePKIXPublicKey(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parse public key: %w", err)
		}
		switch k.(type) {
		case *ecdsa.PublicKey, ed25519.PublicKey:
		default:
			return nil, fmt.Errorf("parse public key: %T is neither ECDSA nor Ed25519", k)
		}
		pk, err := newPublicKey(k)
		if err != nil {
			return nil, fmt.Errorf("parse public key: %w", err)
		}
		keys = append(keys, pk)
	}
	if len(keys) == 0 {
		return nil, errors.New("parse public keys: no PEM PUBLIC KEY block")
	}
	return keys, nil
}

// simpleSigning is cosign's signed payload.
type simpleSigning struct {
	Critical struct {
		Identity struct {
			DockerReference string `json:"docker-reference"`
		} `json:"identity"`
		Image struct {
			DockerManifestDigest string `json:"docker-manifest-digest"`
		} `json:"image"`
		Type string `json:"type"`
	} `json:"critical"`
	Optional map[string]any `json:"optional"`
}

func signatureTag(d digest.Digest) string {
	return d.Algorithm().String() + "-" + d.Encoded() + ".sig"
}

// sign pushes a signature of index, tagged sha256-HEX.sig, to dst.
func sign(ctx context.Context, dst oras.Target, repo string, index ocispec.Descriptor, key PrivateKey) error {
	var p simpleSigning
	p.Critical.Identity.DockerReference = repo
	p.Critical.Image.DockerManifestDigest = index.Digest.String()
	p.Critical.Type = simpleSigningType
	payload, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("sign: %w", err)
	}
	var sig []byte
	switch k := key.signer.(type) {
	case ed25519.PrivateKey:
		sig = ed25519.Sign(k, payload)
	case *ecdsa.PrivateKey:
		sum := sha256.Sum256(payload)
		if sig, err = ecdsa.SignASN1(rand.Reader, k, sum[:]); err != nil {
			return fmt.Errorf("sign: %w", err)
		}
	default:
		return fmt.Errorf("sign: unsupported key %T", k)
	}
	layer := content.NewDescriptorFromBytes(simpleSigningMediaType, payload)
	if err := pushBlob(ctx, dst, layer, strings.NewReader(string(payload))); err != nil {
		return fmt.Errorf("sign: %w", err)
	}
	layer.Annotations = map[string]string{signatureAnnotation: base64.StdEncoding.EncodeToString(sig)}
	m, err := oras.PackManifest(ctx, dst, oras.PackManifestVersion1_1, simpleSigningMediaType, oras.PackManifestOptions{
		Layers:              []ocispec.Descriptor{layer},
		ManifestAnnotations: map[string]string{ocispec.AnnotationCreated: "1970-01-01T00:00:00Z"},
	})
	if err != nil {
		return fmt.Errorf("sign: %w", err)
	}
	if err := dst.Tag(ctx, m, signatureTag(index.Digest)); err != nil {
		return fmt.Errorf("sign: tag: %w", err)
	}
	return nil
}

// verifySignature checks that a signature of index, at its .sig tag in
// src, verifies with one of keys and names index's digest.
func verifySignature(ctx context.Context, src oras.ReadOnlyTarget, index ocispec.Descriptor, keys []PublicKey) error {
	tag := signatureTag(index.Digest)
	desc, err := src.Resolve(ctx, tag)
	if errors.Is(err, errdef.ErrNotFound) {
		return fmt.Errorf("%w: no signature of index %s (tag %s); pass --insecure-skip-verify to install it anyway", ErrUnsigned, index.Digest, tag)
	}
	if err != nil {
		return fmt.Errorf("signature of index %s: %w", index.Digest, err)
	}
	if len(keys) == 0 {
		return fmt.Errorf("%w: index %s is signed but no key is trusted: pass --verify-key or write the plugin directory's %s file", ErrSignature, index.Digest, TrustedKeysFile)
	}
	data, err := content.FetchAll(ctx, src, desc)
	if err != nil {
		return fmt.Errorf("signature of index %s: %w", index.Digest, contentError(err))
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return fmt.Errorf("signature of index %s: %w", index.Digest, err)
	}
	var problems []string
	for _, l := range m.Layers {
		b64, ok := l.Annotations[signatureAnnotation]
		if l.MediaType != simpleSigningMediaType || !ok {
			continue
		}
		sig, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			problems = append(problems, "a signature is not base64")
			continue
		}
		payload, err := content.FetchAll(ctx, src, l)
		if err != nil {
			return fmt.Errorf("signature of index %s: payload: %w", index.Digest, contentError(err))
		}
		var p simpleSigning
		if err := json.Unmarshal(payload, &p); err != nil {
			problems = append(problems, "a payload is not JSON")
			continue
		}
		for _, k := range keys {
			if !verifyPayload(k, payload, sig) {
				continue
			}
			if p.Critical.Image.DockerManifestDigest != index.Digest.String() {
				problems = append(problems, fmt.Sprintf("key %s signed index %s, not this index", k.Fingerprint, p.Critical.Image.DockerManifestDigest))
				continue
			}
			return nil
		}
	}
	var fps []string
	for _, k := range keys {
		fps = append(fps, k.Fingerprint)
	}
	detail := ""
	if len(problems) > 0 {
		detail = "; " + strings.Join(problems, "; ")
	}
	return fmt.Errorf("%w: index %s: no signature verifies with the trusted keys %s%s", ErrSignature, index.Digest, strings.Join(fps, ", "), detail)
}

func verifyPayload(k PublicKey, payload, sig []byte) bool {
	switch pub := k.key.(type) {
	case *ecdsa.PublicKey:
		sum := sha256.Sum256(payload)
		return ecdsa.VerifyASN1(pub, sum[:], sig)
	case ed25519.PublicKey:
		return ed25519.Verify(pub, payload, sig)
	}
	return false
}
