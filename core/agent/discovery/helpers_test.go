package discovery

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/meshrelay/meshrelay/api/snapshot"
)

// waitTimeout bounds every wait for a condition.
const waitTimeout = 60 * time.Second

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// collector records what a source publishes.
type collector struct {
	mu    sync.Mutex
	snaps []*snapshot.Snapshot
	ch    chan struct{}
}

func newCollector() *collector { return &collector{ch: make(chan struct{}, 1)} }

func (c *collector) publish(s *snapshot.Snapshot) {
	c.mu.Lock()
	c.snaps = append(c.snaps, s)
	c.mu.Unlock()
	select {
	case c.ch <- struct{}{}:
	default:
	}
}

// count returns how many snapshots were published.
func (c *collector) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.snaps)
}

// last returns the latest snapshot, or nil.
func (c *collector) last() *snapshot.Snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.snaps) == 0 {
		return nil
	}
	return c.snaps[len(c.snaps)-1]
}

// waitFor waits until the latest snapshot satisfies cond, failing the test
// at the deadline.
func (c *collector) waitFor(t *testing.T, what string, cond func(*snapshot.Snapshot) bool) *snapshot.Snapshot {
	t.Helper()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	for {
		if s := c.last(); s != nil && cond(s) {
			return s
		}
		select {
		case <-c.ch:
		case <-deadline.C:
			s := c.last()
			n := -1
			if s != nil {
				n = s.Len()
			}
			t.Fatalf("no snapshot where %s after %v (last has %d resources)", what, waitTimeout, n)
		}
	}
}

// runSource runs src until the test ends.
func runSource(t *testing.T, src interface {
	Run(context.Context, func(*snapshot.Snapshot)) error
}) *collector {
	t.Helper()
	c := newCollector()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, c.publish) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run() = %v, want nil", err)
		}
	})
	return c
}

// count returns the resources of s with group and kind in namespace ns
// (any namespace when ns is "*").
func countKind(s *snapshot.Snapshot, group, kind, ns string) int {
	n := 0
	for r := range s.All() {
		if r.ID.Group == group && r.ID.Kind == kind && (ns == "*" || r.ID.Namespace == ns) {
			n++
		}
	}
	return n
}

func has(s *snapshot.Snapshot, id snapshot.ID) bool {
	_, ok := s.Get(id)
	return ok
}
