package pki

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// TokenPrefix starts every relay identity token, so that a leaked token is
// recognisable by secret scanners and in logs.
const TokenPrefix = "mrt_"

// tokenBytes is the number of random bytes in a token: 256 bits.
const tokenBytes = 32

// ErrInvalidToken reports a string that is not shaped like a relay identity
// token.
var ErrInvalidToken = errors.New("invalid relay identity token")

// NewToken returns a new relay identity token: TokenPrefix followed by 256
// random bits in unpadded base64url. Show it to the user once and store only
// HashToken of it.
func NewToken() (string, error) {
	b := make([]byte, tokenBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("new token: %w", err)
	}
	return TokenPrefix + base64.RawURLEncoding.EncodeToString(b), nil
}

// ValidateToken returns an error wrapping ErrInvalidToken unless token has
// the shape NewToken produces. It says nothing about whether the token is
// registered.
func ValidateToken(token string) error {
	body, ok := strings.CutPrefix(token, TokenPrefix)
	if !ok {
		return fmt.Errorf("token lacks the %q prefix: %w", TokenPrefix, ErrInvalidToken)
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(body)
	if err != nil || len(b) != tokenBytes {
		return fmt.Errorf("token body is not %d bytes of unpadded base64url: %w", tokenBytes, ErrInvalidToken)
	}
	return nil
}

// HashToken returns the SHA-256 digest of token, the form in which tokens are
// stored. A plain fast hash is enough here, unlike for passwords: a token
// holds 256 random bits, so no dictionary or brute-force search against a
// stolen hash is feasible, and a slow or salted hash would only cost CPU on
// every registration.
func HashToken(token string) []byte {
	sum := sha256.Sum256([]byte(token))
	return sum[:]
}

// TokenMatches reports whether token is well-formed (see ValidateToken) and
// hashes to hash. The hashes are compared in constant time, so the comparison
// leaks nothing about how much of the stored hash matched; the shape check
// depends only on the presented token.
func TokenMatches(hash []byte, token string) bool {
	if len(hash) != sha256.Size || ValidateToken(token) != nil {
		return false
	}
	return subtle.ConstantTimeCompare(hash, HashToken(token)) == 1
}
