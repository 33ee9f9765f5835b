package server

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/meshrelay/meshrelay/core/store"
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
	f := startStoredFleet(t)
	east, west, raw := f.east, f.west, f.raw
	f.ts.stop()
	f.damage(t, "meshrelay:output:east", "d:test")

	var logs lockedBuffer
	ts2 := f.restart(t, redisStore(t, f.r, "r2"), &logs)
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
	f.changesGoThrough(t)
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
	f := startStoredFleet(t)
	held, err := f.ts.store.GetInput(context.Background(), "west")
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "west's input in Redis", func() bool {
		stored, err := f.raw.GetInput(context.Background(), "west")
		return err == nil && stored.Hash() == held.Hash()
	})
	f.ts.stop()
	f.damage(t, "meshrelay:input:east", "d")

	st := redisStore(t, f.r, "r2") // fails the test if the Load fails
	if in, err := st.GetInput(context.Background(), "west"); err != nil || in.Hash() != held.Hash() {
		t.Fatalf("west's input after the Load = %v, %v; want the stored one", in, err)
	}
	var logs lockedBuffer
	ts2 := f.restart(t, st, &logs)
	if !strings.Contains(logs.String(), `"cluster":"east"`) || !strings.Contains(logs.String(), "stored input cannot be read") {
		t.Errorf("the server's start did not log east's damaged input:\n%s", logs.String())
	}
	testutil.Eventually(t, "east's input from its agent in place of the damaged one", func() bool {
		_, err := ts2.store.GetInput(context.Background(), "east")
		return err == nil
	})
	f.changesGoThrough(t)
}

// storedFleet is a server on Redis with two agents, east and west, whose
// outputs Redis holds as they applied them.
type storedFleet struct {
	r          *testenv.Redis
	dir, addr  string
	ts         *testServer
	east, west *testAgent
	raw        *redis.Store
}

func startStoredFleet(t *testing.T) storedFleet {
	t.Helper()
	f := storedFleet{r: testenv.StartRedis(t), dir: t.TempDir()}
	f.ts = startServer(t, redisStore(t, f.r, "r1"), f.dir, withID("r1"))
	f.addr = f.ts.Addr()
	f.east = startAgent(t, f.ts, "east", f.ts.register("east"))
	f.west = startAgent(t, f.ts, "west", f.ts.register("west"))
	f.east.src.set(t, "e1", "e2")
	f.west.src.set(t, "w1")
	f.raw = rawRedis(t, f.r)
	storedIsApplied(t, f.east, f.raw, "east")
	storedIsApplied(t, f.west, f.raw, "west")
	return f
}

// damage writes data that is no stored snapshot into a field of Redis.
func (f storedFleet) damage(t *testing.T, key, field string) {
	t.Helper()
	client := goredis.NewClient(&goredis.Options{Addr: f.r.Addr()})
	defer client.Close()
	if err := client.HSet(context.Background(), key, field, "g\x00\x01").Err(); err != nil {
		t.Fatal(err)
	}
}

// restart starts the fleet's next server on st, at the first one's data
// directory and address, logging JSON to logs, and waits for both agents
// to reconnect.
func (f storedFleet) restart(t *testing.T, st store.Store, logs *lockedBuffer) *testServer {
	t.Helper()
	ts := startServerDeps(t, st, f.dir, func(d *Deps) { d.Logger = slog.New(slog.NewJSONHandler(logs, nil)) },
		withID("r2"), func(o *Options) { o.ListenAddr = f.addr })
	testutil.Eventually(t, "both agents to reconnect", func() bool {
		return f.east.Stats.Connects.Load() >= 2 && f.west.Stats.Connects.Load() >= 2
	})
	return ts
}

// changesGoThrough changes both agents' inputs and waits for their
// outputs; neither agent may have deleted anything since it started.
func (f storedFleet) changesGoThrough(t *testing.T) {
	t.Helper()
	f.east.src.set(t, "e1", "e2", "e3")
	f.west.src.set(t, "w1", "w2")
	testutil.Eventually(t, "changes after the restart", func() bool {
		return len(f.east.sink.names()) == 3 && len(f.west.sink.names()) == 2
	})
	for name, a := range map[string]*testAgent{"east": f.east, "west": f.west} {
		if _, deletes := a.sink.counts(); deletes != 0 {
			t.Errorf("%s: the restart on a damaged store caused %d deletes", name, deletes)
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
