package pki

import "testing"

func TestIsLoopbackAddr(t *testing.T) {
	tests := map[string]bool{
		"127.0.0.1:9900":                  true,
		"localhost:9900":                  true,
		"[::1]:9900":                      true,
		"127.0.0.1:1,localhost:2":         true,
		"10.0.0.1:9900":                   false,
		"meshrelay.example.com:9900":      false,
		"127.0.0.1:1,meshrelay.example:2": false,
		"127.0.0.1":                       false,
		"":                                false,
		"localhost.evil.example:9900":     false,
	}
	for addr, want := range tests {
		if got := IsLoopbackAddr(addr); got != want {
			t.Errorf("IsLoopbackAddr(%q) = %v, want %v", addr, got, want)
		}
	}
}
