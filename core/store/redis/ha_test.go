package redis_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/store"
	"github.com/meshrelay/meshrelay/core/store/memory"
	"github.com/meshrelay/meshrelay/core/store/redis"
	"github.com/meshrelay/meshrelay/core/store/storetest"
	"github.com/meshrelay/meshrelay/internal/testenv"
	"github.com/meshrelay/meshrelay/internal/testutil"
)

// newStoreURL connects a store to the Redis at url with the given prefix
// and replica ID and closes it when the test ends.
func newStoreURL(t testing.TB, url, prefix, replica string) *redis.Store {
	t.Helper()
	o, err := redis.ParseURL(url)
	if err != nil {
		t.Fatalf("ParseURL(%q): %v", url, err)
	}
	o.Prefix, o.Replica = prefix, replica
	o.Logger = slog.New(slog.NewTextHandler(t.Output(), nil))
	s, err := redis.New(t.Context(), o)
	if err != nil {
		t.Fatalf("redis.New(%q): %v", url, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestConformanceSentinel runs the conformance suite through three real
// Sentinels to the primary they name.
func TestConformanceSentinel(t *testing.T) {
	url := testenv.StartRedisSentinel(t).URL()
	storetest.Run(t, storetest.Shared(
		func(t *testing.T) string { return "test:" + t.Name() + ":" },
		func(t *testing.T, prefix, replica string) store.Store { return newStoreURL(t, url, prefix, replica) },
	))
}

// TestConformanceCluster runs the conformance suite on a real three-primary
// Redis Cluster, whose nodes each hold a third of the slots.
func TestConformanceCluster(t *testing.T) {
	url := testenv.StartRedisCluster(t).URL()
	storetest.Run(t, storetest.Shared(
		func(t *testing.T) string { return "test:" + t.Name() + ":" },
		func(t *testing.T, prefix, replica string) store.Store { return newStoreURL(t, url, prefix, replica) },
	))
}

// TestClusterWatchResyncAfterNodeRestart kills the Redis Cluster node that
// holds the change feed's subscription (the primary of the channel's slot)
// and restarts it empty: the watcher must get a Resync once the cluster is
// whole again, and then other replicas' events.
func TestClusterWatchResyncAfterNodeRestart(t *testing.T) {
	ctx := t.Context()
	c := testenv.StartRedisCluster(t)
	a := newStoreURL(t, c.URL(), "r:", "a")
	b := newStoreURL(t, c.URL(), "r:", "b")
	events, err := a.Watch(ctx)
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}

	var addrs []string
	for _, n := range c.Nodes() {
		addrs = append(addrs, n.Addr())
	}
	cc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: addrs})
	defer cc.Close()
	owner, err := cc.MasterForKey(ctx, "{r}:events") // the prefix "r:" with its hash tag
	if err != nil {
		t.Fatalf("MasterForKey: %v", err)
	}
	var node *testenv.Redis
	for _, n := range c.Nodes() {
		if n.Addr() == owner.Options().Addr {
			node = n
		}
	}
	if node == nil {
		t.Fatalf("no node at %s", owner.Options().Addr)
	}
	node.Stop()
	if err := node.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, events, func(e store.Event) bool { return e.Kind == store.EventResync })
	testutil.EventuallyWhy(t, "PutInput after the node restart", func() (bool, string) {
		err := b.PutInput(ctx, "east", storetest.Snap(t, 1, "x", 1))
		return err == nil, fmt.Sprint(err)
	})
	waitFor(t, events, func(e store.Event) bool {
		return e.Kind == store.EventInput && e.Cluster == "east" && e.Replica == "b"
	})
}

// TestClusterNodeRestartRefilled restarts each Redis Cluster node in turn,
// empty, under a server's write-through store: after each restart Redis
// holds every input again. Keys on a node that restarted empty are only
// refilled if the store's change feed broke with it and resynced, so every
// key must live on the node that carries the subscription.
func TestClusterNodeRestartRefilled(t *testing.T) {
	ctx := t.Context()
	c := testenv.StartRedisCluster(t)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	wt := store.NewWriteThrough(memory.New(), newStoreURL(t, c.URL(), "n:", "a"),
		store.WriteThroughOptions{Logger: logger, MaxBackoff: 500 * time.Millisecond})
	t.Cleanup(func() { wt.Close() })
	if _, err := wt.Load(ctx); err != nil {
		t.Fatalf("Load: %v", err)
	}
	go wt.Run(ctx)
	reader := newStoreURL(t, c.URL(), "n:", "reader")

	allThere := putInputs(t, wt, reader, 16)
	for i, node := range c.Nodes() {
		node.Stop()
		if err := node.Start(); err != nil {
			t.Fatal(err)
		}
		testutil.EventuallyWhy(t, fmt.Sprintf("every input in Redis after node %d restarted empty", i), allThere)
	}
}

// TestClusterReshardLosesNothing moves every slot of the node holding the
// store's keys to another node with redis-cli --cluster reshard while a
// server's write-through store keeps writing inputs: afterwards Redis, and
// another replica following the change feed, hold the last input of every
// cluster.
func TestClusterReshardLosesNothing(t *testing.T) {
	ctx := t.Context()
	c := testenv.StartRedisCluster(t)
	logger := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	replica := func(name string) *store.WriteThrough {
		wt := store.NewWriteThrough(memory.New(), newStoreURL(t, c.URL(), "r:", name),
			store.WriteThroughOptions{Logger: logger, MaxBackoff: 200 * time.Millisecond})
		t.Cleanup(func() { wt.Close() })
		if _, err := wt.Load(ctx); err != nil {
			t.Fatalf("Load: %v", err)
		}
		go wt.Run(ctx)
		return wt
	}
	writer, follower := replica("a"), replica("b")
	reader := newStoreURL(t, c.URL(), "r:", "reader")

	const clusters = 16
	var (
		mu      sync.Mutex
		last    = map[string]*snapshot.Snapshot{}
		written atomic.Int64
	)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			name := fmt.Sprintf("c%d", i%clusters)
			s := storetest.Snap(t, uint64(i), fmt.Sprint(i), 2)
			if err := writer.PutInput(ctx, name, s); err != nil {
				t.Errorf("PutInput(%s): %v", name, err)
				return
			}
			mu.Lock()
			last[name] = s
			mu.Unlock()
			written.Add(1)
		}
	}()
	testutil.Eventually(t, "writes under way", func() bool { return written.Load() >= 200 })
	from, to, took := c.Reshard(t, "{r}:input:c0")
	t.Logf("moved the store's slot with every slot of %s to %s in %v, %d writes so far", from.Addr(), to.Addr(), took, written.Load())
	after := written.Load()
	testutil.Eventually(t, "writes after the reshard", func() bool { return written.Load() >= after+200 })
	close(stop)
	<-done

	mu.Lock()
	defer mu.Unlock()
	holds := func(what string, s store.InputReader) func() (bool, string) {
		return func() (bool, string) {
			for name, want := range last {
				callCtx, cancel := context.WithTimeout(ctx, time.Second)
				got, err := s.GetInput(callCtx, name)
				cancel()
				if err != nil || got.Hash() != want.Hash() {
					return false, fmt.Sprintf("%s: %s: got %v (err %v), want version %d", what, name, got, err, want.Version())
				}
			}
			return true, ""
		}
	}
	testutil.EventuallyWhy(t, "Redis to hold every last input", holds("redis", reader))
	testutil.EventuallyWhy(t, "the following replica to hold every last input", holds("follower", follower))
}

// TestClusterWatchFollowsSlotMove moves the store's slot to another Redis
// Cluster primary and then restarts that primary empty, under a server's
// write-through store: the change feed must move to the new primary, so
// that the restart breaks it, every watcher resyncs, and the write-through
// store writes back every input the restart dropped. A feed left on the
// old primary would still carry events (PUBLISH reaches every node) but
// never break, and the dropped inputs would stay lost.
func TestClusterWatchFollowsSlotMove(t *testing.T) {
	ctx := t.Context()
	c := testenv.StartRedisCluster(t)
	logger := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	wt := store.NewWriteThrough(memory.New(), newStoreURL(t, c.URL(), "m:", "a"),
		store.WriteThroughOptions{Logger: logger, MaxBackoff: 500 * time.Millisecond})
	t.Cleanup(func() { wt.Close() })
	if _, err := wt.Load(ctx); err != nil {
		t.Fatalf("Load: %v", err)
	}
	go wt.Run(ctx)
	watcher := newStoreURL(t, c.URL(), "m:", "w")
	events, err := watcher.Watch(ctx)
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	reader := newStoreURL(t, c.URL(), "m:", "reader")

	allThere := putInputs(t, wt, reader, 16)

	const channel = "{m}:events" // the prefix "m:" with its hash tag
	from, to, _ := c.Reshard(t, channel)
	t.Logf("moved the store's slot from %s to %s", from.Addr(), to.Addr())
	// PUBSUB NUMSUB counts the subscribers connected to the node asked.
	numsub := goredis.NewClient(&goredis.Options{Addr: to.Addr()})
	defer numsub.Close()
	testutil.EventuallyWhy(t, "both change feeds subscribed on the slot's new primary", func() (bool, string) {
		n, err := numsub.PubSubNumSub(ctx, channel).Result()
		return err == nil && n[channel] == 2, fmt.Sprintf("PUBSUB NUMSUB on %s: %v (err %v)", to.Addr(), n, err)
	})
	for len(events) > 0 {
		<-events // the Resync of the move, and any before it
	}

	to.Stop()
	if err := to.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, events, func(e store.Event) bool { return e.Kind == store.EventResync })
	testutil.EventuallyWhy(t, "every input in Redis after the slot's new primary restarted empty", allThere)
}

// putInputs writes n clusters' inputs through wt and waits until reader
// finds them all in Redis; the check it returns looks again.
func putInputs(t *testing.T, wt, reader store.Store, n int) (allThere func() (bool, string)) {
	t.Helper()
	ctx := t.Context()
	for i := range n {
		if err := wt.PutInput(ctx, fmt.Sprintf("c%d", i), storetest.Snap(t, 1, "x", 1)); err != nil {
			t.Fatal(err)
		}
	}
	allThere = func() (bool, string) {
		for i := range n {
			callCtx, cancel := context.WithTimeout(ctx, time.Second)
			_, err := reader.GetInput(callCtx, fmt.Sprintf("c%d", i))
			cancel()
			if err != nil {
				return false, fmt.Sprintf("GetInput(c%d): %v", i, err)
			}
		}
		return true, ""
	}
	testutil.EventuallyWhy(t, "every input in Redis", allThere)
	return allThere
}
