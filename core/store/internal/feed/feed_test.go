package feed_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/meshrelay/meshrelay/core/store/internal/feed"
	"github.com/meshrelay/meshrelay/internal/testutil"
)

var errClosed = errors.New("closed")

func recv(t *testing.T, ch <-chan int) (int, bool) {
	t.Helper()
	select {
	case v, ok := <-ch:
		return v, ok
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s")
		return 0, false
	}
}

// TestInOrder checks that events arrive in the order published, and that a
// burst of them waits in the watcher's channel, where a watcher can take it
// as one batch, instead of being handed over one at a time.
func TestInOrder(t *testing.T) {
	h := feed.New(-1, errClosed)
	defer h.Close()
	ch, err := h.Watch(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		h.Publish(i)
	}
	testutil.Eventually(t, "the burst in the channel", func() bool { return len(ch) == 100 })
	for i := range 100 {
		if got, _ := recv(t, ch); got != i {
			t.Fatalf("event %d = %d, want %d", i, got, i)
		}
	}
}

// TestSlowWatcherGetsResync checks that a watcher that does not read is
// never a reason for Publish to block, and gets a Resync instead of the
// events it could not hold.
func TestSlowWatcherGetsResync(t *testing.T) {
	h := feed.New(-1, errClosed)
	defer h.Close()
	ch, err := h.Watch(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	const n = 100000 // far more than a watcher's queue holds
	for i := range n {
		h.Publish(i)
	}
	h.Publish(n)
	sawResync := false
	for !sawResync {
		v, ok := recv(t, ch)
		if !ok {
			t.Fatal("channel closed")
		}
		sawResync = v == -1
	}
	// An event published now is delivered, or covered by a Resync still
	// queued from the flood; either way the watcher does not hang.
	h.Publish(n + 1)
	for {
		v, ok := recv(t, ch)
		if !ok {
			t.Fatal("channel closed")
		}
		if v == n+1 || v == -1 {
			break
		}
	}
	// Once the flood is over, events flow one by one again. The flood is
	// over when its last Resync is delivered: until then an event is
	// dropped, and the Resync that comes after it covers it (the watcher
	// reloads after it). So a Resync that comes before the event asks for
	// another event, a few dozen times at most: the flood queued at most
	// one Resync for every 4,096 of its events (queueLimit).
	next := n + 2
	h.Publish(next)
	for resyncs := 0; ; {
		v, ok := recv(t, ch)
		switch {
		case !ok:
			t.Fatal("channel closed")
		case v == next:
			return
		case v == -1:
			if resyncs++; resyncs > 64 {
				t.Fatalf("a Resync again after %d events published one by one", resyncs)
			}
			next++
			h.Publish(next)
		case v > next:
			t.Fatalf("event %d, want %d", v, next)
		}
		// Anything else is a leftover of the flood, or an event published
		// here before a Resync that covered it.
	}
}

func TestCloseAndContext(t *testing.T) {
	h := feed.New(-1, errClosed)
	ctx, cancel := context.WithCancel(t.Context())
	a, err := h.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := h.Watch(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, ok := recv(t, a); ok {
		t.Fatal("channel open after its context ended")
	}
	h.Close()
	if _, ok := recv(t, b); ok {
		t.Fatal("channel open after Close")
	}
	if _, err := h.Watch(t.Context()); !errors.Is(err, errClosed) {
		t.Fatalf("Watch after Close: err = %v, want %v", err, errClosed)
	}
}
