package redis_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/meshrelay/meshrelay/core/store"
	"github.com/meshrelay/meshrelay/core/store/memory"
	"github.com/meshrelay/meshrelay/core/store/storetest"
	"github.com/meshrelay/meshrelay/internal/testenv"
	"github.com/meshrelay/meshrelay/internal/testutil"
)

// failoverClusters is how many clusters' inputs the writer of a failover
// test cycles through.
const failoverClusters = 8

// writer puts inputs in a loop, version i to cluster c<i mod
// failoverClusters>, and remembers the newest version acknowledged per
// cluster and the first acknowledgement after a kill.
type writer struct {
	put func(ctx context.Context, cluster string, v uint64) error

	mu          sync.Mutex
	acked       map[string]uint64
	n           int       // acknowledged writes
	killedAt    time.Time // zero until kill is called
	recoveredAt time.Time // the first acknowledgement after killedAt
	lastErr     error
}

func (w *writer) run(ctx context.Context) {
	for v := uint64(1); ctx.Err() == nil; v++ {
		cluster := fmt.Sprintf("c%d", v%failoverClusters)
		callCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := w.put(callCtx, cluster, v)
		cancel()
		now := time.Now()
		w.mu.Lock()
		if err != nil {
			w.lastErr = err
		} else {
			w.acked[cluster] = v
			w.n++
			if !w.killedAt.IsZero() && w.recoveredAt.IsZero() {
				w.recoveredAt = now
			}
		}
		w.mu.Unlock()
	}
}

func (w *writer) kill(stop func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	stop()
	w.killedAt = time.Now()
}

// recovered reports the time from the kill to the first write acknowledged
// after it, once there is one.
func (w *writer) recovered() (time.Duration, bool, string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.recoveredAt.IsZero() {
		return 0, false, fmt.Sprintf("no write acknowledged since the kill; last error: %v", w.lastErr)
	}
	return w.recoveredAt.Sub(w.killedAt), true, ""
}

func (w *writer) written() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

// failover starts w, kills the Sentinel set's primary with SIGKILL once w
// has had some writes acknowledged, waits until w's writes succeed again
// and stops w. It returns the time from the kill to the first write
// acknowledged after it.
func failover(t *testing.T, s *testenv.RedisSentinel, w *writer) time.Duration {
	t.Helper()
	ctx := t.Context()
	old, err := s.Primary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { w.run(runCtx) })
	defer func() { stop(); wg.Wait() }()

	testutil.Eventually(t, "50 writes before the kill", func() bool { return w.written() >= 50 })
	w.kill(old.Stop)
	var took time.Duration
	testutil.EventuallyWhy(t, "a write acknowledged after the kill", func() (bool, string) {
		d, ok, why := w.recovered()
		took = d
		return ok, why
	})
	before := w.written()
	testutil.Eventually(t, "50 more writes after the failover", func() bool { return w.written() >= before+50 })
	stop()
	wg.Wait()

	now := waitPromoted(t, s, old)
	t.Logf("primary %s killed; %s promoted; writes acknowledged again %v after the kill",
		old.Addr(), now.Addr(), took.Round(time.Millisecond))
	return took
}

// waitPromoted waits until the first running Sentinel names a server other
// than old as the primary (each Sentinel learns of a switch on its own),
// and returns it.
func waitPromoted(t *testing.T, s *testenv.RedisSentinel, old *testenv.Redis) *testenv.Redis {
	t.Helper()
	var now *testenv.Redis
	testutil.EventuallyWhy(t, "a Sentinel naming a new primary", func() (bool, string) {
		p, err := s.Primary(t.Context())
		if err != nil {
			return false, err.Error()
		}
		now = p
		return p != old, "the Sentinel names " + p.Addr()
	})
	return now
}

// resyncs records when a watcher got EventResync.
type resyncs struct {
	mu    sync.Mutex
	times []time.Time
}

// follow drains events until the channel closes, recording each Resync.
func (r *resyncs) follow(events <-chan store.Event) {
	for e := range events {
		if e.Kind == store.EventResync {
			r.mu.Lock()
			r.times = append(r.times, time.Now())
			r.mu.Unlock()
		}
	}
}

// first returns the time of the first Resync after t, or the zero time.
func (r *resyncs) first(t time.Time) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, at := range r.times {
		if at.After(t) {
			return at
		}
	}
	return time.Time{}
}

// since reports whether a Resync came after t.
func (r *resyncs) since(t time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.times) > 0 && r.times[len(r.times)-1].After(t)
}

// TestSentinelFailover kills the primary with SIGKILL while a store writes
// through the Sentinels: the store's writes reach the promoted replica
// without a new store, another store's watcher gets a Resync (the events
// published meanwhile may be lost), and the newest write acknowledged for
// each cluster, made after the failover, is what every store reads.
func TestSentinelFailover(t *testing.T) {
	s := testenv.StartRedisSentinel(t)
	a := newStoreURL(t, s.URL(), "f:", "a")
	b := newStoreURL(t, s.URL(), "f:", "b")
	events, err := b.Watch(t.Context())
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	var rs resyncs
	go rs.follow(events)

	w := &writer{acked: map[string]uint64{}, put: func(ctx context.Context, cluster string, v uint64) error {
		return a.PutInput(ctx, cluster, storetest.Snap(t, v, "x", 1))
	}}
	failover(t, s, w)
	testutil.Eventually(t, "a Resync after the kill", func() bool { return rs.since(w.killedAt) })

	for cluster, v := range w.acked {
		got, err := b.GetInput(t.Context(), cluster)
		if err != nil {
			t.Fatalf("GetInput(%s): %v", cluster, err)
		}
		if got.Version() != v {
			t.Errorf("%s: version %d stored, want %d, the newest acknowledged", cluster, got.Version(), v)
		}
	}
}

// TestSentinelFailoverWriteThrough kills the primary while a server's
// write-through store (memory in front of Redis) takes writes, and stops
// writing right after the kill, so that the last writes are the ones a
// failover can drop: those the dead primary acknowledged before its
// replicas had them. The write-through store must put them back once its
// change feed resyncs on the promoted replica: in the end Redis holds the
// newest acknowledged version of every cluster.
func TestSentinelFailoverWriteThrough(t *testing.T) {
	s := testenv.StartRedisSentinel(t)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	wt := store.NewWriteThrough(memory.New(), newStoreURL(t, s.URL(), "w:", "a"),
		store.WriteThroughOptions{Logger: logger, MaxBackoff: 500 * time.Millisecond})
	t.Cleanup(func() { wt.Close() })
	if _, err := wt.Load(t.Context()); err != nil {
		t.Fatalf("Load: %v", err)
	}
	go wt.Run(t.Context())
	reader := newStoreURL(t, s.URL(), "w:", "reader")

	ctx := t.Context()
	old, err := s.Primary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	acked := map[string]uint64{}
	v := uint64(0)
	put := func() {
		v++
		cluster := fmt.Sprintf("c%d", v%failoverClusters)
		if err := wt.PutInput(ctx, cluster, storetest.Snap(t, v, "x", 1)); err != nil {
			t.Fatalf("PutInput(%s, %d): %v", cluster, v, err)
		}
		acked[cluster] = v
	}
	// Writes reach Redis while the primary lives...
	for range 200 {
		put()
		time.Sleep(time.Millisecond)
	}
	old.Stop()
	killed := time.Now()
	// ...and a few more are taken while it is dead.
	for range failoverClusters {
		put()
	}

	testutil.EventuallyWhy(t, "Redis holding every acknowledged write", func() (bool, string) {
		for cluster, want := range acked {
			got, err := reader.GetInput(ctx, cluster)
			if err != nil {
				return false, fmt.Sprintf("GetInput(%s): %v", cluster, err)
			}
			if got.Version() != want {
				return false, fmt.Sprintf("%s: version %d in Redis, want %d", cluster, got.Version(), want)
			}
		}
		return true, ""
	})
	t.Logf("every write in Redis again %v after the kill", time.Since(killed).Round(time.Millisecond))
	waitPromoted(t, s, old)
}

// TestSentinelManualFailoverResyncs asks the Sentinels to fail over while
// the old primary lives on (SENTINEL FAILOVER). The store's commands move
// to the new primary at the switch, but its subscription stays on the old
// one until the Sentinels make it a replica, dropping what it took after
// the promotion, and close its clients: the watcher must get a Resync then,
// as after a crash.
func TestSentinelManualFailoverResyncs(t *testing.T) {
	ctx := t.Context()
	s := testenv.StartRedisSentinel(t)
	a := newStoreURL(t, s.URL(), "m:", "a")
	b := newStoreURL(t, s.URL(), "m:", "b")
	events, err := a.Watch(ctx)
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	var rs resyncs
	go rs.follow(events)
	old, err := s.Primary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sc := goredis.NewSentinelClient(&goredis.Options{Addr: s.Sentinels()[0].Addr()})
	defer sc.Close()
	start := time.Now()
	if err := sc.Failover(ctx, testenv.SentinelMaster).Err(); err != nil {
		t.Fatalf("SENTINEL FAILOVER: %v", err)
	}
	waitPromoted(t, s, old)
	testutil.Eventually(t, "a Resync after the failover", func() bool { return rs.since(start) })
	t.Logf("Resync %v after SENTINEL FAILOVER", rs.first(start).Sub(start).Round(time.Millisecond))
	testutil.EventuallyWhy(t, "PutInput after the failover", func() (bool, string) {
		err := b.PutInput(ctx, "east", storetest.Snap(t, 1, "x", 1))
		return err == nil, fmt.Sprint(err)
	})
}
