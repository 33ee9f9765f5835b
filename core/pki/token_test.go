package pki

import (
	"errors"
	"strings"
	"testing"
)

func TestToken(t *testing.T) {
	tok, err := NewToken()
	if err != nil {
		t.Fatalf("NewToken = %v", err)
	}
	if !strings.HasPrefix(tok, TokenPrefix) || len(tok) != len(TokenPrefix)+43 {
		t.Errorf("NewToken = %q, want %s followed by 43 base64url characters", tok, TokenPrefix)
	}
	if err := ValidateToken(tok); err != nil {
		t.Errorf("ValidateToken(NewToken()) = %v", err)
	}
	other, err := NewToken()
	if err != nil {
		t.Fatal(err)
	}
	if other == tok {
		t.Fatalf("NewToken returned %q twice", tok)
	}
	hash := HashToken(tok)
	for name, tc := range map[string]struct {
		hash  []byte
		token string
		want  bool
	}{
		"same token":       {hash: hash, token: tok, want: true},
		"other token":      {hash: hash, token: other},
		"one char changed": {hash: hash, token: tok[:10] + flip(tok[10]) + tok[11:]},
		"prefix only":      {hash: hash, token: TokenPrefix},
		"empty token":      {hash: hash, token: ""},
		"truncated hash":   {hash: hash[:16], token: tok},
		"nil hash":         {hash: nil, token: tok},
		"hash of empty":    {hash: HashToken(""), token: ""},
		"malformed token":  {hash: HashToken("mrt_x"), token: "mrt_x"},
	} {
		t.Run(name, func(t *testing.T) {
			if got := TokenMatches(tc.hash, tc.token); got != tc.want {
				t.Errorf("TokenMatches(%x, %q) = %v, want %v", tc.hash, tc.token, got, tc.want)
			}
		})
	}
	for _, bad := range []string{"", "mrt_", "mrt_abc", "xyz_" + tok[4:], tok + "A", tok[:len(tok)-1] + "=", strings.ToUpper(tok[:4]) + tok[4:]} {
		if err := ValidateToken(bad); !errors.Is(err, ErrInvalidToken) {
			t.Errorf("ValidateToken(%q) = %v, want ErrInvalidToken", bad, err)
		}
	}
}

// flip returns a different base64url character than c.
func flip(c byte) string {
	if c == 'A' {
		return "B"
	}
	return "A"
}
