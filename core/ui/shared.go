package ui

import (
	"cmp"
	"context"
	"sync"
	"time"
)

// Bounds of the shared cache: how long a value is served as current, how
// long one computation may take, and how many values are kept, in all, of
// them filtered (getFiltered), and in bytes. The largest values are a
// 1,000-cluster fleet's graph (about 4 MB) and a policy's page of its most
// outputs (maxPolicyOutputs, about 4 MB at a thousand clusters).
const (
	sharedMaxAge      = 5 * time.Second
	sharedTimeout     = 2 * time.Minute
	sharedMax         = 32
	sharedMaxFiltered = 8
	sharedMaxBytes    = 64 << 20
)

// sharedCache shares what the UI computes from the admin API among its
// viewers, by key: the fleet graph, a policy's description. At a thousand
// clusters each takes seconds, and every viewer asks again at each live
// update. A key is computed at most once at a time; a value younger than
// sharedMaxAge is served as it is, and an older one is served as stale
// while it is computed again in the background. Only a key's first value
// is waited for. Callers check the caller's token first: the cache serves
// whoever asks.
//
// A filtered value (a policy's page of the clusters a reader's filter
// keeps) is cheap to compute from its unfiltered one and is asked for
// once per filter typed: filtered values are held at most
// sharedMaxFiltered, and dropped before any unfiltered one, so that
// readers typing filters never push out the pages everyone shares.
type sharedCache struct {
	mu      sync.Mutex
	entries map[string]*sharedEntry
	// bytes is the sum of the entries' sizes.
	bytes int
	// maxBytes bounds bytes; sharedMaxBytes when zero.
	maxBytes int
}

type sharedEntry struct {
	v    any
	size int // about how many bytes v holds, as its computation said
	err  error
	at   time.Time // when v was computed; zero before
	// filtered says the entry came from getFiltered.
	filtered bool
	// running is closed when the computation under way ends; nil when
	// none is.
	running chan struct{}
}

// get returns key's value, computing it with compute when it has none or
// an old one; stale says a newer one is being computed. compute returns
// the value and about how many bytes it holds. The computation outlives
// the request that started it, bounded by sharedTimeout, and keeps the
// request's token.
func (c *sharedCache) get(ctx context.Context, key string, compute func(context.Context) (any, int, error)) (v any, stale bool, err error) {
	return c.lookup(ctx, key, false, compute)
}

// getFiltered is get of a filtered value: at most sharedMaxFiltered of
// them are kept, and they are dropped first.
func (c *sharedCache) getFiltered(ctx context.Context, key string, compute func(context.Context) (any, int, error)) (v any, stale bool, err error) {
	return c.lookup(ctx, key, true, compute)
}

func (c *sharedCache) lookup(ctx context.Context, key string, filtered bool, compute func(context.Context) (any, int, error)) (v any, stale bool, err error) {
	c.mu.Lock()
	if c.entries == nil {
		c.entries = map[string]*sharedEntry{}
	}
	e := c.entries[key]
	if e == nil {
		c.evict(nil, filtered)
		e = &sharedEntry{filtered: filtered}
		c.entries[key] = e
	}
	if !e.at.IsZero() && time.Since(e.at) < sharedMaxAge {
		defer c.mu.Unlock()
		return e.v, false, nil
	}
	if e.running == nil {
		e.running = make(chan struct{})
		go c.compute(context.WithoutCancel(ctx), e, compute)
	}
	running := e.running
	if !e.at.IsZero() {
		defer c.mu.Unlock()
		return e.v, true, nil
	}
	c.mu.Unlock()
	select {
	case <-running:
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.at.IsZero() {
		return nil, false, e.err
	}
	return e.v, false, nil
}

func (c *sharedCache) compute(ctx context.Context, e *sharedEntry, compute func(context.Context) (any, int, error)) {
	ctx, cancel := context.WithTimeout(ctx, sharedTimeout)
	defer cancel()
	v, size, err := compute(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		c.bytes += size - e.size
		e.v, e.size, e.at = v, size, time.Now()
	}
	e.err = err
	close(e.running)
	e.running = nil
	c.evict(e, false)
}

// evict drops idle entries but keep, the oldest filtered ones first, while
// the cache holds more than sharedMaxBytes or sharedMax entries or more;
// and, before a filtered entry is added (adding), while it holds
// sharedMaxFiltered filtered entries or more. Callers hold c.mu.
func (c *sharedCache) evict(keep *sharedEntry, adding bool) {
	maxBytes := cmp.Or(c.maxBytes, sharedMaxBytes)
	for {
		filtered := 0
		for _, e := range c.entries {
			if e.filtered {
				filtered++
			}
		}
		full := len(c.entries) >= sharedMax || c.bytes > maxBytes
		if !full && (!adding || filtered < sharedMaxFiltered) {
			return
		}
		// The oldest idle entry, a filtered one when there is one.
		var oldest string
		for k, e := range c.entries {
			if e == keep || e.running != nil {
				continue
			}
			if o := c.entries[oldest]; oldest == "" || e.filtered && !o.filtered || e.filtered == o.filtered && e.at.Before(o.at) {
				oldest = k
			}
		}
		if oldest == "" || !full && !c.entries[oldest].filtered {
			return
		}
		c.bytes -= c.entries[oldest].size
		delete(c.entries, oldest)
	}
}
