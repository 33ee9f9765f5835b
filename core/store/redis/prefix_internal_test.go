package redis

import "testing"

func TestClusterPrefix(t *testing.T) {
	tests := map[string]string{
		"meshrelay:": "{meshrelay}:",
		"test:a/b:":  "{test:a/b}:",
		"plain":      "{plain}:",
		"{fleet}:":   "{fleet}:",
		"x:{fleet}:": "x:{fleet}:",
		"{}:":        "{{}}:", // an empty tag is no tag: Redis hashes the whole key
		"open{:":     "{open{}:",
	}
	for in, want := range tests {
		if got := clusterPrefix(in); got != want {
			t.Errorf("clusterPrefix(%q) = %q, want %q", in, got, want)
		}
	}
}
