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

// Readers typing filters ask for a filtered value per filter: those are
// held at most sharedMaxFiltered and never push out an unfiltered value,
// however many are asked for.
func TestSharedCacheFilteredKeepUnfiltered(t *testing.T) {
	c := &sharedCache{}
	ctx := context.Background()
	value := func(v string) func(context.Context) (any, int, error) {
		return func(context.Context) (any, int, error) { return v, 10, nil }
	}
	if _, _, err := c.get(ctx, "page", value("page")); err != nil {
		t.Fatal(err)
	}
	for i := range 4 * sharedMax {
		key := fmt.Sprintf("page %q", fmt.Sprint(i))
		if _, _, err := c.getFiltered(ctx, key, value(key)); err != nil {
			t.Fatal(err)
		}
	}
	c.mu.Lock()
	filtered := 0
	for _, e := range c.entries {
		if e.filtered {
			filtered++
		}
	}
	_, kept := c.entries["page"]
	c.mu.Unlock()
	if !kept {
		t.Errorf("after %d filtered values, the unfiltered one was dropped", 4*sharedMax)
	}
	if filtered > sharedMaxFiltered {
		t.Errorf("%d filtered values held, want at most %d", filtered, sharedMaxFiltered)
	}
	v, stale, err := c.get(ctx, "page", value("again"))
	if err != nil || v != "page" || stale {
		t.Errorf(`get("page") = %v, stale %t, %v; want the value held, not computed again`, v, stale, err)
	}
	// When the cache is full of unfiltered values, the filtered ones go
	// first.
	for i := range sharedMax {
		key := fmt.Sprintf("policy %d", i)
		if _, _, err := c.get(ctx, key, value(key)); err != nil {
			t.Fatal(err)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, e := range c.entries {
		if e.filtered {
			t.Errorf("the full cache still holds the filtered %s", k)
		}
	}
	if len(c.entries) > sharedMax {
		t.Errorf("the cache holds %d values, want at most %d", len(c.entries), sharedMax)
	}
}
