package redis

import (
	"strings"
	"testing"

	"github.com/meshrelay/meshrelay/core/store/storetest"
)

func TestDecodeIsBounded(t *testing.T) {
	var c codec
	snap := storetest.Snap(t, 1, strings.Repeat("x", 4096), 64)
	data, err := c.encode(snap)
	if err != nil {
		t.Fatal(err)
	}
	h := snap.Hash()
	if _, err := c.decode(data, "1", h[:]); err != nil {
		t.Fatalf("decode within the default bound: %v", err)
	}
	small := codec{maxDecoded: 1024}
	if _, err := small.decode(data, "1", h[:]); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("decode of %d compressed bytes with a 1 KiB bound: err = %v, want the limit named", len(data), err)
	}
}
