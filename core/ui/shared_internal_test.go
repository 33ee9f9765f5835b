package ui

import (
	"context"
	"fmt"
	"testing"
)

// The shared cache holds at most its bound of bytes: computing a value
// past it drops the oldest idle values, never the one just computed.
func TestSharedCacheBoundedByBytes(t *testing.T) {
	c := &sharedCache{maxBytes: 100}
	ctx := context.Background()
	for i := range 10 {
		key := fmt.Sprintf("k%d", i)
		if _, _, err := c.get(ctx, key, func(context.Context) (any, int, error) { return key, 30, nil }); err != nil {
			t.Fatal(err)
		}
		c.mu.Lock()
		n, bytes := len(c.entries), c.bytes
		_, held := c.entries[key]
		c.mu.Unlock()
		if bytes > 100 || !held || bytes != 30*n {
			t.Fatalf("after %s: %d entries of %d bytes, %s held: %t; want at most 100 bytes, each entry's counted, %s held", key, n, bytes, key, held, key)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, key := range []string{"k7", "k8", "k9"} {
		if c.entries[key] == nil {
			t.Errorf("%s was dropped, want the newest kept", key)
		}
	}
	// A value larger than the bound is kept alone.
	c.mu.Unlock()
	if _, _, err := c.get(ctx, "big", func(context.Context) (any, int, error) { return "big", 1000, nil }); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	if len(c.entries) != 1 || c.entries["big"] == nil || c.bytes != 1000 {
		t.Errorf("after a value of 1000 bytes: %d entries, %d bytes; want it alone", len(c.entries), c.bytes)
	}
}
