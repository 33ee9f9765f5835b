package server

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/agent"
	"github.com/meshrelay/meshrelay/core/store"
	"github.com/meshrelay/meshrelay/core/store/memory"
	"github.com/meshrelay/meshrelay/core/store/redis"
	"github.com/meshrelay/meshrelay/internal/testenv"
	"github.com/meshrelay/meshrelay/internal/testutil"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
)

// The tests in this file are the failure table of docs/architecture.md, with real
// redis-server processes and real server replicas.

// redisStore is a replica's write-through store over a real Redis.
func redisStore(t *testing.T, r *testenv.Redis, replica string) *store.WriteThrough {
	t.Helper()
	ropts, err := redis.ParseURL(r.URL())
	if err != nil {
		t.Fatal(err)
	}
	ropts.Replica = replica
	backing, err := redis.New(context.Background(), ropts)
	if err != nil {
		t.Fatal(err)
	}
	wt := store.NewWriteThrough(memory.New().Replica(replica), backing, store.WriteThroughOptions{
		MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, PingInterval: 50 * time.Millisecond,
	})
	if _, err := wt.Load(context.Background()); err != nil {
		t.Fatalf("load from redis: %v", err)
	}
	t.Cleanup(func() { wt.Close() })
	return wt
}

// rawRedis reads Redis directly, as another replica would.
func rawRedis(t *testing.T, r *testenv.Redis) *redis.Store {
	t.Helper()
	ropts, err := redis.ParseURL(r.URL())
	if err != nil {
		t.Fatal(err)
	}
	ropts.Replica = "observer"
	s, err := redis.New(context.Background(), ropts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func readyz(t *testing.T, ts *testServer) string {
	t.Helper()
	resp, err := http.Get("http://" + ts.AdminAddr() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("readyz = %d, want 200 (degraded is still ready)", resp.StatusCode)
	}
	return string(body)
}

func withID(id string) serverOption { return func(o *Options) { o.ServerID = id } }

// Redis unavailable: translation and delivery continue from memory; writes
// are caught up when Redis returns; readiness says degraded.
func TestRedisDownKeepsServing(t *testing.T) {
	r := testenv.StartRedis(t)
	ts := startServer(t, redisStore(t, r, "r1"), "", withID("r1"))
	east := startAgent(t, ts, "east", ts.register("east"))
	east.src.set(t, "a", "b")
	testutil.Eventually(t, "east's outputs", func() bool { return len(east.sink.names()) == 2 })

	r.Stop()
	east.src.set(t, "a", "b", "c")
	testutil.Eventually(t, "outputs while Redis is down", func() bool { return len(east.sink.names()) == 3 })
	testutil.Eventually(t, "readiness to say degraded", func() bool { return strings.Contains(readyz(t, ts), "degraded") })

	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	raw := rawRedis(t, r)
	testutil.Eventually(t, "the input written while Redis was down to reach Redis", func() bool {
		s, err := raw.GetInput(context.Background(), "east")
		return err == nil && s.Len() == 3
	})
	testutil.Eventually(t, "readiness to recover", func() bool { return strings.HasPrefix(readyz(t, ts), "ok") })
	if _, deletes := east.sink.counts(); deletes != 0 {
		t.Errorf("the Redis outage caused %d deletes", deletes)
	}
}

// Server replica lost: its agents reconnect to another replica, which has
// their inputs from Redis, and resume without a full resend or churn.
func TestReplicaLostAgentsResume(t *testing.T) {
	r := testenv.StartRedis(t)
	raw := rawRedis(t, r)
	ts1 := startServer(t, redisStore(t, r, "r1"), "", withID("r1"))
	testutil.Eventually(t, "the CA to reach Redis", func() bool {
		_, _, err := raw.GetCA(context.Background())
		return err == nil
	})
	ts2 := startServer(t, redisStore(t, r, "r2"), "", withID("r2"))

	eastTok, westTok := ts1.register("east"), ts1.register("west")
	testutil.Eventually(t, "replica 2 to learn the registrations", func() bool {
		_, e := ts2.store.GetCluster(context.Background(), "east")
		_, w := ts2.store.GetCluster(context.Background(), "west")
		return e == nil && w == nil
	})
	both := func(first, second *testServer) func(*agent.Options) {
		return func(o *agent.Options) { o.Server = first.Addr() + "," + second.Addr() }
	}
	east := startAgent(t, ts1, "east", eastTok, both(ts1, ts2))
	west := startAgent(t, ts1, "west", westTok, both(ts2, ts1))
	east.src.set(t, "e1", "e2")
	west.src.set(t, "w1")
	// Each replica translates with the whole fleet: east (on r1) learns of
	// west (on r2) through Redis.
	testutil.Eventually(t, "outputs with the whole fleet", func() bool {
		return cmp.Equal(east.sink.peers(), []string{"peer-west"}) && cmp.Equal(west.sink.peers(), []string{"peer-east"}) &&
			len(east.sink.names()) == 2 && len(west.sink.names()) == 1
	})
	// Replicas divide the work: each computes only its own agents' outputs.
	if got := ts1.Engine().Marks("west"); len(got) != 0 {
		t.Errorf("replica 1 computed outputs for west, whose agent is on replica 2: %v", slices.Collect(maps.Keys(got)))
	}
	if got := ts2.Engine().Marks("east"); len(got) != 0 {
		t.Errorf("replica 2 computed outputs for east, whose agent is on replica 1: %v", slices.Collect(maps.Keys(got)))
	}
	eastCreates, _ := east.sink.counts()
	fullBefore := east.Stats.FullInputs.Load()

	ts1.Stop() // dies without goodbyes
	testutil.Eventually(t, "east to reconnect to replica 2", func() bool {
		ts2.mu.Lock()
		defer ts2.mu.Unlock()
		return ts2.streams["east"] != nil
	})
	east.src.set(t, "e1", "e2", "e3")
	testutil.Eventually(t, "east's change through replica 2", func() bool { return len(east.sink.names()) == 3 })

	if got := ts2.Engine().Marks("east"); len(got) == 0 {
		t.Error("replica 2 does not compute east's outputs after east moved to it")
	}
	if n := east.Stats.FullInputs.Load(); n != fullBefore {
		t.Errorf("east sent %d full inputs after failover, want none", n-fullBefore)
	}
	creates, deletes := east.sink.counts()
	if deletes != 0 || creates != eastCreates+1 {
		t.Errorf("failover: %d creates and %d deletes in east, want exactly 1 create (e3) and 0 deletes", creates-eastCreates, deletes)
	}
	if _, deletes := west.sink.counts(); deletes != 0 {
		t.Errorf("failover caused %d deletes in west", deletes)
	}
}

// Redis and server restart together with a partial store: safe mode
// delivers nothing that would prune until every registered cluster has sent
// a fresh snapshot.
func TestColdStartSafeMode(t *testing.T) {
	r := testenv.StartRedis(t, testenv.RedisPersistence())
	dir := t.TempDir()
	ts := startServer(t, redisStore(t, r, "r1"), dir, withID("r1"))
	addr := ts.Addr()
	east := startAgent(t, ts, "east", ts.register("east"))
	westTok := ts.register("west")
	west := startAgent(t, ts, "west", westTok)
	east.src.set(t, "e1")
	west.src.set(t, "w1")
	testutil.Eventually(t, "outputs with the whole fleet", func() bool { return cmp.Equal(east.sink.peers(), []string{"peer-west"}) })
	raw := rawRedis(t, r)
	testutil.Eventually(t, "inputs in Redis", func() bool {
		_, e := raw.GetInput(context.Background(), "east")
		_, w := raw.GetInput(context.Background(), "west")
		return e == nil && w == nil
	})

	// Everything stops; west's input is lost from the store.
	west.cancel()
	<-west.done
	west.done <- nil
	ts.stop()
	if err := raw.DeleteInput(context.Background(), "west"); err != nil {
		t.Fatal(err)
	}
	r.Stop()
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}

	ts2 := startServer(t, redisStore(t, r, "r1b"), dir, withID("r1b"), func(o *Options) { o.ListenAddr = addr })
	testutil.Eventually(t, "east to reconnect", func() bool {
		ts2.mu.Lock()
		defer ts2.mu.Unlock()
		return ts2.streams["east"] != nil
	})
	st, err := ts2.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !st.GetSafeMode() || !cmp.Equal(st.GetWaitingFor(), []string{"west"}) {
		t.Fatalf("status after cold start: safe mode %v waiting for %v, want safe mode waiting for [west]", st.GetSafeMode(), st.GetWaitingFor())
	}
	// East's new output lacks west (the view is partial) but must not prune.
	east.src.set(t, "e1", "e2")
	testutil.Eventually(t, "east's output from the partial view", func() bool { return len(east.sink.names()) == 2 })
	if _, deletes := east.sink.counts(); deletes != 0 || !cmp.Equal(east.sink.peers(), []string{"peer-west"}) {
		t.Fatalf("safe mode pruned: %d deletes, peers %v", deletes, east.sink.peers())
	}

	// Tokens are single-use: the new agent of west gets a new one.
	west2 := startAgent(t, ts2, "west", ts2.register("west"))
	west2.src.set(t, "w1")
	testutil.Eventually(t, "safe mode to end", func() bool { return ts2.pruneAllowed() })
	testutil.Eventually(t, "east to get an output allowed to prune", func() bool {
		east.sink.mu.Lock()
		defer east.sink.mu.Unlock()
		return len(east.sink.prunes) > 0 && east.sink.prunes[len(east.sink.prunes)-1]
	})
	if _, deletes := east.sink.counts(); deletes != 0 {
		t.Errorf("after safe mode, %d deletes in east; want 0 (west's peer is back in the view)", deletes)
	}
}

func TestSafeStartWindowEnds(t *testing.T) {
	st := memory.New()
	dir := t.TempDir()
	ts := startServer(t, st, dir)
	ts.register("east")
	ts.register("west")
	ts.stop()
	// A restart where neither cluster reports: the window ends safe mode.
	ts2 := startServer(t, st, dir, func(o *Options) { o.SafeStartWindow = 300 * time.Millisecond })
	if ts2.pruneAllowed() {
		t.Fatal("a cold start with registered clusters and no inputs must start in safe mode")
	}
	testutil.Eventually(t, "the safe-start window to end", func() bool { return ts2.pruneAllowed() })
}

// Agent disconnects: its last input stays in the view, marked stale; other
// clusters' outputs stay correct.
func TestAgentDisconnectKeepsItsInputs(t *testing.T) {
	ts := startServer(t, nil, "")
	east := startAgent(t, ts, "east", ts.register("east"))
	west := startAgent(t, ts, "west", ts.register("west"))
	east.src.set(t, "e1")
	west.src.set(t, "w1")
	testutil.Eventually(t, "outputs", func() bool { return cmp.Equal(east.sink.peers(), []string{"peer-west"}) })
	before, _ := ts.Engine().Mark(engineKey("east"))

	west.cancel()
	testutil.Eventually(t, "west to be stale", func() bool {
		for _, c := range ts.Engine().Clusters() {
			if c.Name == "west" {
				return c.Stale
			}
		}
		return false
	})
	east.src.set(t, "e1", "e2")
	testutil.Eventually(t, "east's change", func() bool { return len(east.sink.names()) == 2 })
	if !cmp.Equal(east.sink.peers(), []string{"peer-west"}) {
		t.Errorf("east lost west's peer when west disconnected: %v", east.sink.peers())
	}
	after, _ := ts.Engine().Mark(engineKey("east"))
	if after.Hash == before.Hash {
		t.Error("east's output did not change with its own input")
	}
	cs, err := relayv1.NewAdminClient(ts.dial(nil)).ListClusters(ts.adminCtx(), &relayv1.ListClustersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs.GetClusters() {
		if c.GetName() == "west" && (c.GetConnected() || !c.GetStale() || c.GetInputResources() == 0) {
			t.Errorf("west after disconnect = %v, want disconnected, stale, inputs kept", c)
		}
	}
}

// An input stored with a version above the agent's own (another replica
// numbered it from its stored version, or the agent restarted) does not
// hide the agent's newer inputs: when the agent moves to another replica,
// it numbers what it sends above the stored version, and the fleet
// translates its input, not the stored one.
func TestAgentInputNumberedAboveTheStoredOne(t *testing.T) {
	st := memory.New()
	ts1 := startServer(t, st, "", withID("r1"))
	ts2 := startServer(t, st.Replica("r2"), "", withID("r2"))
	east := startAgent(t, ts1, "east", ts1.register("east"), func(o *agent.Options) { o.Server = ts1.Addr() + "," + ts2.Addr() })
	east.src.set(t, "a")
	testutil.Eventually(t, "east's output", func() bool { return slices.Equal(east.sink.names(), []string{"a"}) })

	// Another replica stores an older input of east, numbered far above.
	old, err := snapshot.FromJSON([]byte(`{"apiVersion":"v1","kind":"Service","metadata":{"name":"old","namespace":"default"},"spec":{"ports":[{"port":80}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	stale, err := snapshot.New(1<<60, []snapshot.Resource{old})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Replica("other").PutInput(t.Context(), "east", stale); err != nil {
		t.Fatal(err)
	}
	createsBefore, deletesBefore := east.sink.counts()
	ts1.Stop() // east moves to r2, which holds the older input
	// r2 translates east once it takes the agent's input, numbered above
	// the stored one; the agent, which holds "a" already, never gets the
	// older input's outputs.
	testutil.EventuallyWhy(t, "east's own input taken and translated by r2", func() (bool, string) {
		ts2.mu.Lock()
		_, here := ts2.streams["east"]
		ts2.mu.Unlock()
		in, err := st.GetInput(t.Context(), "east")
		var version uint64
		if err == nil {
			version = in.Version()
		}
		_, translated := ts2.Engine().Mark(engineKey("east"))
		got := east.sink.names()
		return here && version > stale.Version() && translated && slices.Equal(got, []string{"a"}),
			fmt.Sprintf("on r2: %v, stored input version %d (err %v), translated %v, outputs %v", here, version, err, translated, got)
	})
	if creates, deletes := east.sink.counts(); creates != createsBefore || deletes != deletesBefore {
		t.Errorf("the agent created %d and deleted %d objects after the move, want none: it got the older input's outputs",
			creates-createsBefore, deletes-deletesBefore)
	}
}
