package server

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"
)

// encryptedKeyType is the PEM block type of a CA private key encrypted for
// the store.
const encryptedKeyType = "MESHRELAY ENCRYPTED CA KEY"

// CAKeyEncryptionKeyEnv holds the secret that encrypts the CA key in the
// store when no file is given.
const CAKeyEncryptionKeyEnv = "MESHRELAY_CA_KEY_ENCRYPTION_KEY"

// caKeySecret returns the secret the CA key is encrypted with in the store:
// from the file, else the environment, else the admin token. None of them
// is in the store.
func (s *Server) caKeySecret() ([]byte, error) {
	switch {
	case s.opts.CAKeyEncryptionKey != "":
		return []byte(s.opts.CAKeyEncryptionKey), nil
	case s.opts.CAKeyEncryptionKeyFile != "":
		data, err := os.ReadFile(s.opts.CAKeyEncryptionKeyFile)
		if err != nil {
			return nil, fmt.Errorf("read CA key encryption key: %w", err)
		}
		secret := strings.TrimSpace(string(data))
		if len(secret) < 16 {
			return nil, fmt.Errorf("CA key encryption key in %s is shorter than 16 characters", s.opts.CAKeyEncryptionKeyFile)
		}
		return []byte(secret), nil
	case os.Getenv(CAKeyEncryptionKeyEnv) != "":
		return []byte(os.Getenv(CAKeyEncryptionKeyEnv)), nil
	}
	return s.adminHash, nil
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
func sealCAKey(secret, certPEM, keyPEM []byte) ([]byte, error) {
	aead, err := caKeyAEAD(secret)
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

// errPlainCAKey reports a CA key stored in plain text by an older release.
var errPlainCAKey = errors.New("the CA key is stored in plain text")

// openCAKey decrypts a CA key read from the store. A key an older release
// stored in plain text is returned with errPlainCAKey, so that the caller
// can store it again encrypted.
func openCAKey(secret, certPEM, stored []byte) ([]byte, error) {
	block, _ := pem.Decode(stored)
	if block == nil {
		return nil, errors.New("decrypt CA key: not PEM")
	}
	if block.Type != encryptedKeyType {
		return stored, errPlainCAKey
	}
	aead, err := caKeyAEAD(secret)
	if err != nil {
		return nil, fmt.Errorf("decrypt CA key: %w", err)
	}
	if len(block.Bytes) < aead.NonceSize() {
		return nil, errors.New("decrypt CA key: too short")
	}
	nonce, sealed := block.Bytes[:aead.NonceSize()], block.Bytes[aead.NonceSize():]
	keyPEM, err := aead.Open(nil, nonce, sealed, certPEM)
	if err != nil {
		return nil, errors.New("decrypt CA key: wrong key; every replica needs the same --ca-key-encryption-key-file (or " + CAKeyEncryptionKeyEnv + ", or else the same --admin-token-file)")
	}
	return keyPEM, nil
}
