package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
)

// NewKey generates an ECDSA P-256 private key, the key type agents use for
// their cluster certificate.
func NewKey() (*ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	return key, nil
}

// NewCSR returns a DER certificate signing request for cluster signed by key.
// It names the cluster as common name and URI SAN only for readability: the
// CA decides the identity itself.
func NewCSR(key crypto.Signer, cluster string) ([]byte, error) {
	if err := ValidateClusterName(cluster); err != nil {
		return nil, fmt.Errorf("create CSR: %w", err)
	}
	u, err := url.Parse(ClusterURI(cluster))
	if err != nil {
		return nil, fmt.Errorf("create CSR for cluster %q: %w", cluster, err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: cluster},
		URIs:    []*url.URL{u},
	}, key)
	if err != nil {
		return nil, fmt.Errorf("create CSR for cluster %q: %w", cluster, err)
	}
	return der, nil
}

// KeyPEM encodes key as a PKCS #8 "PRIVATE KEY" PEM block.
func KeyPEM(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("marshal private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: pemPrivateKey, Bytes: der}), nil
}

// ParseKeyPEM returns the first private key in data, a PKCS #8
// ("PRIVATE KEY"), SEC 1 ("EC PRIVATE KEY") or PKCS #1 ("RSA PRIVATE KEY")
// PEM block; other blocks are skipped.
func ParseKeyPEM(data []byte) (crypto.Signer, error) {
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil, errors.New("parse private key: no private key PEM block")
		}
		switch block.Type {
		case pemPrivateKey, "EC PRIVATE KEY", "RSA PRIVATE KEY":
			return parseKeyDER(block.Type, block.Bytes)
		}
	}
}

// parseKeyDER parses the DER of a PEM block of type typ as a private key.
func parseKeyDER(typ string, der []byte) (crypto.Signer, error) {
	var (
		key any
		err error
	)
	switch typ {
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(der)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(der)
	default:
		key, err = x509.ParsePKCS8PrivateKey(der)
	}
	if err != nil {
		return nil, fmt.Errorf("parse private key: %w", err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("parse private key: %T cannot sign", key)
	}
	return signer, nil
}
