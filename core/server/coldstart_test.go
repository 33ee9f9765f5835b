package server

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/meshrelay/meshrelay/core/store/redis"
	"github.com/meshrelay/meshrelay/internal/testenv"
	"github.com/meshrelay/meshrelay/internal/testutil"
)

// TestRestartFromRedisResumesStoredOutputs restarts a server on Redis
// while its agent runs. The new server's store keeps the outputs it loads
// encoded until first read (store.Encoded); the agent resumes from the
// stored output, exactly the one it holds, and a change after it arrives
// as a delta from that output: a decoded output that differed from the
// stored one would not apply to what the agent holds.
func TestRestartFromRedisResumesStoredOutputs(t *testing.T) {
	r := testenv.StartRedis(t)
	dir := t.TempDir()
	ts := startServer(t, redisStore(t, r, "r1"), dir, withID("r1"))
	addr := ts.Addr()
	east := startAgent(t, ts, "east", ts.register("east"))
	east.src.set(t, "a", "b")
	raw := rawRedis(t, r)
	storedIsApplied(t, east, raw, "east")
	ts.stop()

	ts2 := startServer(t, redisStore(t, r, "r2"), dir, withID("r2"), func(o *Options) { o.ListenAddr = addr })
	testutil.Eventually(t, "east to reconnect", func() bool { return east.Stats.Connects.Load() >= 2 })
	east.src.set(t, "a", "b", "c")
	testutil.Eventually(t, "east's change through the restarted server", func() bool { return len(east.sink.names()) == 3 })
	storedIsApplied(t, east, raw, "east")
	if _, deletes := east.sink.counts(); deletes != 0 {
		t.Errorf("the restart caused %d deletes", deletes)
	}
	_ = ts2
}

// TestRestartFromRedisCorruptOutput damages a cluster's stored output in
// Redis before a server restarts on it. The load, which keeps outputs
// encoded, succeeds; the damage is found when the output is first read,
// logged with the cluster and the decode error, and the cluster's output
// is computed again in its place: the server neither stops nor sends the
// agent an empty set, and the other clusters resume as before.
func TestRestartFromRedisCorruptOutput(t *testing.T) {
	r := testenv.StartRedis(t)
	dir := t.TempDir()
	ts := startServer(t, redisStore(t, r, "r1"), dir, withID("r1"))
	addr := ts.Addr()
	east := startAgent(t, ts, "east", ts.register("east"))
	west := startAgent(t, ts, "west", ts.register("west"))
	east.src.set(t, "e1", "e2")
	west.src.set(t, "w1")
	raw := rawRedis(t, r)
	storedIsApplied(t, east, raw, "east")
	storedIsApplied(t, west, raw, "west")
	ts.stop()
	client := goredis.NewClient(&goredis.Options{Addr: r.Addr()})
	defer client.Close()
	if err := client.HSet(context.Background(), "meshrelay:output:east", "d:test", "g\x00\x01").Err(); err != nil {
		t.Fatal(err)
	}

	var logs lockedBuffer
	ts2 := startServerDeps(t, redisStore(t, r, "r2"), dir, func(d *Deps) { d.Logger = slog.New(slog.NewJSONHandler(&logs, nil)) },
		withID("r2"), func(o *Options) { o.ListenAddr = addr })
	testutil.Eventually(t, "both agents to reconnect", func() bool {
		return east.Stats.Connects.Load() >= 2 && west.Stats.Connects.Load() >= 2
	})
	testutil.Eventually(t, "the damaged output logged for east", func() bool {
		for l := range strings.Lines(logs.String()) {
			if strings.Contains(l, `"cluster":"east"`) && strings.Contains(l, "decompress snapshot") {
				return true
			}
		}
		return false
	})
	testutil.Eventually(t, "east's output computed again in place of the damaged one", func() bool {
		got, err := ts2.store.GetOutput(context.Background(), "east", "test")
		east.sink.mu.Lock()
		defer east.sink.mu.Unlock()
		return err == nil && got.Hash() == east.sink.last.Hash()
	})
	east.src.set(t, "e1", "e2", "e3")
	west.src.set(t, "w1", "w2")
	testutil.Eventually(t, "changes after the restart", func() bool {
		return len(east.sink.names()) == 3 && len(west.sink.names()) == 2
	})
	for name, a := range map[string]*testAgent{"east": east, "west": west} {
		if _, deletes := a.sink.counts(); deletes != 0 {
			t.Errorf("%s: the restart on a damaged store caused %d deletes", name, deletes)
		}
	}
	// Redis holds the damaged copy until the output changes: a write of
	// the same version and hash changes nothing there.
	storedIsApplied(t, east, raw, "east")
	storedIsApplied(t, west, raw, "west")
}

// TestRestartFromRedisCorruptInput damages a cluster's stored input in
// Redis before a server restarts on it. The load, which keeps inputs
// encoded, succeeds: before, it failed whole and the server started on an
// empty memory. The server logs the damaged input with its cluster and
// leaves that cluster out of the fleet until its agent sends an input,
// never translating it from an empty one; the other clusters load from the
// store, and both agents then work as before, with no deletes.
func TestRestartFromRedisCorruptInput(t *testing.T) {
	r := testenv.StartRedis(t)
	dir := t.TempDir()
	ts := startServer(t, redisStore(t, r, "r1"), dir, withID("r1"))
	addr := ts.Addr()
	east := startAgent(t, ts, "east", ts.register("east"))
	west := startAgent(t, ts, "west", ts.register("west"))
	east.src.set(t, "e1", "e2")
	west.src.set(t, "w1")
	raw := rawRedis(t, r)
	storedIsApplied(t, east, raw, "east")
	storedIsApplied(t, west, raw, "west")
	held, err := ts.store.GetInput(context.Background(), "west")
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "west's input in Redis", func() bool {
		stored, err := raw.GetInput(context.Background(), "west")
		return err == nil && stored.Hash() == held.Hash()
	})
	ts.stop()
	client := goredis.NewClient(&goredis.Options{Addr: r.Addr()})
	defer client.Close()
	if err := client.HSet(context.Background(), "meshrelay:input:east", "d", "g\x00\x01").Err(); err != nil {
		t.Fatal(err)
	}

	st := redisStore(t, r, "r2") // fails the test if the Load fails
	if in, err := st.GetInput(context.Background(), "west"); err != nil || in.Hash() != held.Hash() {
		t.Fatalf("west's input after the Load = %v, %v; want the stored one", in, err)
	}
	var logs lockedBuffer
	ts2 := startServerDeps(t, st, dir, func(d *Deps) { d.Logger = slog.New(slog.NewJSONHandler(&logs, nil)) },
		withID("r2"), func(o *Options) { o.ListenAddr = addr })
	if !strings.Contains(logs.String(), `"cluster":"east"`) || !strings.Contains(logs.String(), "stored input cannot be read") {
		t.Errorf("the server's start did not log east's damaged input:\n%s", logs.String())
	}
	testutil.Eventually(t, "both agents to reconnect", func() bool {
		return east.Stats.Connects.Load() >= 2 && west.Stats.Connects.Load() >= 2
	})
	testutil.Eventually(t, "east's input from its agent in place of the damaged one", func() bool {
		_, err := ts2.store.GetInput(context.Background(), "east")
		return err == nil
	})
	east.src.set(t, "e1", "e2", "e3")
	west.src.set(t, "w1", "w2")
	testutil.Eventually(t, "changes after the restart", func() bool {
		return len(east.sink.names()) == 3 && len(west.sink.names()) == 2
	})
	for name, a := range map[string]*testAgent{"east": east, "west": west} {
		if _, deletes := a.sink.counts(); deletes != 0 {
			t.Errorf("%s: the restart on a damaged input caused %d deletes", name, deletes)
		}
	}
}

// storedIsApplied waits until the output Redis holds for cluster is the
// one its agent a applied last.
func storedIsApplied(t *testing.T, a *testAgent, raw *redis.Store, cluster string) {
	t.Helper()
	testutil.Eventually(t, cluster+"'s applied output in Redis", func() bool {
		stored, err := raw.GetOutput(context.Background(), cluster, "test")
		a.sink.mu.Lock()
		defer a.sink.mu.Unlock()
		return err == nil && a.sink.last != nil && stored.Hash() == a.sink.last.Hash()
	})
}
