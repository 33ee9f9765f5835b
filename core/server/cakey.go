package server

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/meshrelay/meshrelay/core/pki"
)

// encryptedKeyType is the PEM block type of a CA private key encrypted for
// the store.
const encryptedKeyType = "MESHRELAY ENCRYPTED CA KEY"

// CAKeyEncryptionKeyEnv holds the secret that encrypts the CA key in the
// store when no file is given.
const CAKeyEncryptionKeyEnv = "MESHRELAY_CA_KEY_ENCRYPTION_KEY"

// caKeyEncryptionKeyName is the file in the data directory holding the
// secret the server generates when none is given.
const caKeyEncryptionKeyName = "ca-key-encryption-key"

// sealKey is the secret that seals CA keys (the relay CA's, the mesh
// roots') in the store. Earlier releases sealed them, by default, with a
// secret derived from the admin token; legacy is that secret, which opens
// what they sealed and never seals anything.
type sealKey struct {
	secret []byte
	// configured is set when the secret was given (option, file or
	// environment) rather than generated in the data directory.
	configured bool
	legacy     []byte
}

// caKeySecret returns the secret the CA key is encrypted with in the store:
// from the option, the file, else the environment, else
// DATA-DIR/ca-key-encryption-key, generated on first use. None of them is
// in the store, and none is the admin token, which administrators hold.
func (s *Server) caKeySecret() (sealKey, error) {
	k := sealKey{configured: true, legacy: s.adminHash}
	switch {
	case s.opts.CAKeyEncryptionKey != "":
		k.secret = []byte(s.opts.CAKeyEncryptionKey)
	case s.opts.CAKeyEncryptionKeyFile != "":
		data, err := os.ReadFile(s.opts.CAKeyEncryptionKeyFile)
		if err != nil {
			return sealKey{}, fmt.Errorf("read CA key encryption key: %w", err)
		}
		secret := strings.TrimSpace(string(data))
		if len(secret) < 16 {
			return sealKey{}, fmt.Errorf("CA key encryption key in %s is shorter than 16 characters", s.opts.CAKeyEncryptionKeyFile)
		}
		k.secret = []byte(secret)
	case os.Getenv(CAKeyEncryptionKeyEnv) != "":
		k.secret = []byte(os.Getenv(CAKeyEncryptionKeyEnv))
	default:
		secret, err := loadOrCreateSecret(s.caKeyEncryptionKeyPath())
		if err != nil {
			return sealKey{}, err
		}
		k.secret, k.configured = secret, false
	}
	return k, nil
}

// caKeyEncryptionKeyPath is where the server keeps the secret it generates.
func (s *Server) caKeyEncryptionKeyPath() string {
	return filepath.Join(s.opts.DataDir, caKeyEncryptionKeyName)
}

// loadOrCreateSecret reads the secret in path, writing 32 random bytes
// there (base64url, mode 0600) when the file does not exist.
func loadOrCreateSecret(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err == nil {
		secret := bytes.TrimSpace(data)
		if len(secret) < 16 {
			return nil, fmt.Errorf("CA key encryption key in %s is shorter than 16 characters", path)
		}
		return secret, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read CA key encryption key: %w", err)
	}
	raw := make([]byte, 32)
	_, _ = rand.Read(raw) // never fails (crypto/rand)
	secret := []byte(base64.RawURLEncoding.EncodeToString(raw))
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("write CA key encryption key: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return loadOrCreateSecret(path) // another process wrote it first
	}
	if err != nil {
		return nil, fmt.Errorf("write CA key encryption key: %w", err)
	}
	_, err = f.Write(append(secret, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("write CA key encryption key: %w", err)
	}
	return secret, nil
}

// caKeyAEAD derives the AES-256-GCM cipher of the CA key from the secret.
func caKeyAEAD(secret []byte) (cipher.AEAD, error) {
	key, err := hkdf.Key(sha256.New, secret, nil, "meshrelay CA key in the store", 32)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// sealCAKey encrypts a PEM private key for the store, bound to the CA
// certificate it belongs to.
func sealCAKey(k sealKey, certPEM, keyPEM []byte) ([]byte, error) {
	aead, err := caKeyAEAD(k.secret)
	if err != nil {
		return nil, fmt.Errorf("encrypt CA key: %w", err)
	}
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("encrypt CA key: %w", err)
	}
	sealed := aead.Seal(nonce, nonce, keyPEM, certPEM)
	return pem.EncodeToMemory(&pem.Block{Type: encryptedKeyType, Bytes: sealed}), nil
}

// sealCA returns ca's certificates and its key sealed with k.
func sealCA(k sealKey, ca *pki.CA) (certPEM, sealedKey []byte, err error) {
	pemData, err := ca.MarshalPEM()
	if err != nil {
		return nil, nil, fmt.Errorf("encode CA: %w", err)
	}
	certPEM, keyPEM := splitPEM(pemData)
	sealedKey, err = sealCAKey(k, certPEM, keyPEM)
	if err != nil {
		return nil, nil, err
	}
	return certPEM, sealedKey, nil
}

// openCA returns the CA of certPEM whose key k opens, and reports whether
// the legacy secret opened it.
func openCA(k sealKey, certPEM, sealedKey []byte) (*pki.CA, bool, error) {
	keyPEM, legacy, err := k.open(certPEM, sealedKey)
	if err != nil {
		return nil, false, err
	}
	ca, err := pki.ParsePEM(append(append([]byte{}, certPEM...), keyPEM...))
	return ca, legacy, err
}

// errPlainCAKey reports a CA key stored in plain text by an older release,
// or by anyone who can write the store: nothing says it is the CA's.
var errPlainCAKey = errors.New("the CA key is stored in plain text")

// errWrongCAKeySecret reports a sealed CA key that neither the secret nor
// the legacy one opens.
var errWrongCAKeySecret = errors.New("decrypt CA key: wrong key; every replica sharing a store needs the same --ca-key-encryption-key-file (or " +
	CAKeyEncryptionKeyEnv + ", or the DATA-DIR/" + caKeyEncryptionKeyName + " of the replica that stored the CA)")

// openCAKey decrypts a CA key read from the store, with the secret or else
// the legacy one. A key stored in plain text is refused with errPlainCAKey.
func openCAKey(k sealKey, certPEM, stored []byte) ([]byte, error) {
	keyPEM, _, err := k.open(certPEM, stored)
	return keyPEM, err
}

// open is openCAKey, and reports whether the legacy secret opened the key.
func (k sealKey) open(certPEM, stored []byte) (keyPEM []byte, legacy bool, err error) {
	block, _ := pem.Decode(stored)
	if block == nil {
		return nil, false, errors.New("decrypt CA key: not PEM")
	}
	if block.Type != encryptedKeyType {
		return nil, false, errPlainCAKey
	}
	for i, secret := range [][]byte{k.secret, k.legacy} {
		if secret == nil {
			continue
		}
		aead, err := caKeyAEAD(secret)
		if err != nil {
			return nil, false, fmt.Errorf("decrypt CA key: %w", err)
		}
		if len(block.Bytes) < aead.NonceSize() {
			return nil, false, errors.New("decrypt CA key: too short")
		}
		nonce, sealed := block.Bytes[:aead.NonceSize()], block.Bytes[aead.NonceSize():]
		if keyPEM, err := aead.Open(nil, nonce, sealed, certPEM); err == nil {
			return keyPEM, i == 1, nil
		}
	}
	return nil, false, errWrongCAKeySecret
}
