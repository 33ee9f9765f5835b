package testutil

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/meshrelay/meshrelay/api/snapshot"
)

// Source is what discovery sources and manifest readers are: Run publishes
// snapshots until ctx ends.
type Source interface {
	Run(ctx context.Context, publish func(*snapshot.Snapshot)) error
}

// Collector records what a source publishes.
type Collector struct {
	mu    sync.Mutex
	snaps []*snapshot.Snapshot
	ch    chan struct{}
}

// NewCollector returns an empty collector; pass its Publish to a source.
func NewCollector() *Collector { return &Collector{ch: make(chan struct{}, 1)} }

// RunSource runs src with a new collector until the test ends, and fails
// the test if Run returns an error.
func RunSource(t testing.TB, src Source) *Collector {
	t.Helper()
	c := NewCollector()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, c.Publish) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run() = %v, want nil", err)
		}
	})
	return c
}

// Publish records a snapshot.
func (c *Collector) Publish(s *snapshot.Snapshot) {
	c.mu.Lock()
	c.snaps = append(c.snaps, s)
	c.mu.Unlock()
	select {
	case c.ch <- struct{}{}:
	default:
	}
}

// Count returns how many snapshots were published.
func (c *Collector) Count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.snaps)
}

// Last returns the latest snapshot, or nil.
func (c *Collector) Last() *snapshot.Snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.snaps) == 0 {
		return nil
	}
	return c.snaps[len(c.snaps)-1]
}

// WaitFor waits until the latest snapshot satisfies cond and returns it,
// failing the test after [Timeout].
func (c *Collector) WaitFor(t testing.TB, what string, cond func(*snapshot.Snapshot) bool) *snapshot.Snapshot {
	t.Helper()
	deadline := time.NewTimer(Timeout)
	defer deadline.Stop()
	for {
		if s := c.Last(); s != nil && cond(s) {
			return s
		}
		select {
		case <-c.ch:
		case <-deadline.C:
			n := -1
			if s := c.Last(); s != nil {
				n = s.Len()
			}
			t.Fatalf("no snapshot where %s after %v (last has %d resources)", what, Timeout, n)
		}
	}
}
