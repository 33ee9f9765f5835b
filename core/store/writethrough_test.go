package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/store"
	"github.com/meshrelay/meshrelay/core/store/memory"
	"github.com/meshrelay/meshrelay/core/store/redis"
	"github.com/meshrelay/meshrelay/core/store/storetest"
	"github.com/meshrelay/meshrelay/internal/tcpproxy"
	"github.com/meshrelay/meshrelay/internal/testenv"
	"github.com/meshrelay/meshrelay/internal/testutil"
)

// waitTimeout bounds every wait for a condition in these tests.
const waitTimeout = 30 * time.Second

// startWriteThrough loads and runs a WriteThrough over a fresh memory store
// and backing, stopping it when the test ends.
func startWriteThrough(t *testing.T, backing store.Store) *store.WriteThrough {
	t.Helper()
	wt := store.NewWriteThrough(memory.New(), backing, store.WriteThroughOptions{
		Logger:       testLogger(t),
		MinBackoff:   10 * time.Millisecond,
		MaxBackoff:   200 * time.Millisecond,
		PingInterval: 50 * time.Millisecond,
		OpTimeout:    2 * time.Second,
	})
	if _, err := wt.Load(t.Context()); err != nil {
		t.Fatalf("Load: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- wt.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		wt.Close()
	})
	return wt
}

func newRedis(t testing.TB, server *testenv.Redis, prefix, replica string) *redis.Store {
	t.Helper()
	return newRedisAt(t, server.URL(), prefix, replica)
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), nil))
}

func TestWriteThroughConformanceMemory(t *testing.T) {
	storetest.Run(t, storetest.Shared(
		func(t *testing.T) *memory.Store { return memory.New() },
		func(t *testing.T, shared *memory.Store, replica string) store.Store {
			return startWriteThrough(t, shared.Replica(replica))
		},
	))
}

func TestWriteThroughConformanceRedis(t *testing.T) {
	server := testenv.StartRedis(t)
	storetest.Run(t, storetest.Shared(
		func(t *testing.T) string { return "wt:" + t.Name() + ":" },
		func(t *testing.T, prefix, replica string) store.Store {
			return startWriteThrough(t, newRedis(t, server, prefix, replica))
		},
	))
}

// countingStore counts the writes that reach a store.
type countingStore struct {
	store.Store
	putInputs atomic.Int64
}

func (c *countingStore) PutInput(ctx context.Context, cluster string, s *snapshot.Snapshot) error {
	c.putInputs.Add(1)
	return c.Store.PutInput(ctx, cluster, s)
}

func TestWriteThroughCoalesces(t *testing.T) {
	ctx := t.Context()
	backing := &countingStore{Store: memory.New()}
	wt := store.NewWriteThrough(memory.New(), backing, store.WriteThroughOptions{})
	defer wt.Close()
	for v := uint64(1); v <= 50; v++ {
		if err := wt.PutInput(ctx, "east", storetest.Snap(t, v, fmt.Sprint(v), 2)); err != nil {
			t.Fatalf("PutInput(v%d): %v", v, err)
		}
	}
	if err := wt.PutOutput(ctx, "east", "istio", storetest.Snap(t, 1, "out", 1)); err != nil {
		t.Fatalf("PutOutput: %v", err)
	}
	if err := wt.DeleteOutputs(ctx, "east"); err != nil {
		t.Fatalf("DeleteOutputs: %v", err)
	}
	if got := wt.QueueLen(); got != 2 {
		t.Fatalf("QueueLen() = %d after 50 Puts of one input and a deleted output, want 2", got)
	}
	if err := wt.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if got := backing.putInputs.Load(); got != 1 {
		t.Errorf("backing store received %d PutInput calls, want 1", got)
	}
	got, err := backing.GetInput(ctx, "east")
	if err != nil || got.Version() != 50 {
		t.Fatalf("backing GetInput = %v, %v; want version 50", got, err)
	}
	if _, err := backing.GetOutput(ctx, "east", "istio"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("backing GetOutput after a queued delete: err = %v, want ErrNotFound", err)
	}
	if got := wt.QueueLen(); got != 0 {
		t.Errorf("QueueLen() after Flush = %d, want 0", got)
	}
}

func TestWriteThroughLoad(t *testing.T) {
	ctx := t.Context()
	backing := memory.New()
	for i := range 30 {
		name := fmt.Sprintf("c%02d", i)
		must(t, backing.PutInput(ctx, name, storetest.Snap(t, 5, name, 3)))
		must(t, backing.PutOutput(ctx, name, "envoy", storetest.Snap(t, 2, name, 1)))
		must(t, backing.PutCluster(ctx, store.Cluster{Name: name}))
	}
	must(t, backing.PutCA(ctx, []byte("cert"), []byte("key")))
	primary := memory.New()
	// Memory already holds a newer input for c00 and one Redis lacks.
	must(t, primary.PutInput(ctx, "c00", storetest.Snap(t, 9, "newer", 1)))
	must(t, primary.PutInput(ctx, "local", storetest.Snap(t, 1, "local", 1)))
	wt := store.NewWriteThrough(primary, backing.Replica("wt"), store.WriteThroughOptions{})
	defer wt.Close()

	stats, err := wt.Load(ctx)
	must(t, err)
	if stats.Inputs != 30 || stats.Outputs != 30 || stats.Clusters != 30 || stats.Queued != 2 || stats.Duration <= 0 {
		t.Fatalf("Load() = %+v, want 30 inputs, outputs and clusters, 2 queued and a duration", stats)
	}
	inputs, err := wt.ListInputs(ctx)
	must(t, err)
	if len(inputs) != 31 || inputs["c00"].Version() != 9 {
		t.Fatalf("after Load: %d inputs, c00 at version %d; want 31 and 9", len(inputs), inputs["c00"].Version())
	}
	if _, _, err := wt.GetCA(ctx); err != nil {
		t.Fatalf("GetCA after Load: %v", err)
	}
	must(t, wt.Flush(ctx))
	for name, want := range map[string]uint64{"c00": 9, "local": 1} {
		got, err := backing.GetInput(ctx, name)
		if err != nil || got.Version() != want {
			t.Errorf("backing GetInput(%q) after Flush = %v, %v; want version %d", name, got, err, want)
		}
	}
}

// TestWriteThroughPutClusterReplaces: PutCluster replaces a record as
// given, also when the backing store already holds the record's version.
// The flush of the replacement writes it, and does not copy the backing
// store's older content of the same version back into memory.
func TestWriteThroughPutClusterReplaces(t *testing.T) {
	ctx := t.Context()
	backing := memory.New()
	wt := store.NewWriteThrough(memory.New(), backing.Replica("wt"), store.WriteThroughOptions{})
	defer wt.Close()
	first := store.Cluster{Name: "east", Revoked: true, Serials: []string{"1a"}}
	must(t, wt.PutCluster(ctx, first))
	must(t, wt.Flush(ctx))
	replaced := store.Cluster{Name: "east", Serials: []string{"2b"}}
	must(t, wt.PutCluster(ctx, replaced))
	must(t, wt.Flush(ctx))
	for name, s := range map[string]store.Store{"write-through": wt, "backing": backing} {
		got, err := s.GetCluster(ctx, "east")
		if err != nil || got.Revoked || !slices.Equal(got.Serials, replaced.Serials) {
			t.Errorf("%s GetCluster(east) after the replacement = %+v, %v; want %+v", name, got, err, replaced)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestWriteThroughRedisDown is the failure contract's "Redis unavailable" (docs/architecture.md): with the
// real redis-server killed, writes are accepted and reads served from
// memory, health is degraded, and when Redis returns everything reaches it
// again and health is ok. A second replica ends up with the inputs written
// during the outage. Redis comes back either empty (it kept nothing on
// disk) or with what it had before the kill (append-only file).
func TestWriteThroughRedisDown(t *testing.T) {
	tests := map[string][]testenv.RedisOption{
		"restarts empty":         nil,
		"restarts with its data": {testenv.RedisPersistence()},
	}
	for name, opts := range tests {
		t.Run(name, func(t *testing.T) { testRedisDown(t, opts) })
	}
}

func testRedisDown(t *testing.T, opts []testenv.RedisOption) {
	ctx := t.Context()
	server := testenv.StartRedis(t, opts...)
	const prefix = "fault:"
	a := startWriteThrough(t, newRedis(t, server, prefix, "a"))
	b := startWriteThrough(t, newRedis(t, server, prefix, "b"))
	observer := newRedis(t, server, prefix, "observer")

	want := map[string]*snapshot.Snapshot{}
	put := func(name string, version uint64) {
		t.Helper()
		s := storetest.Snap(t, version, fmt.Sprintf("%s-%d", name, version), 5)
		if err := a.PutInput(ctx, name, s); err != nil {
			t.Fatalf("PutInput(%q) while Redis is %v: %v", name, map[bool]string{true: "up", false: "down"}[server.Running()], err)
		}
		want[name] = s
	}
	inRedis := func(st store.Store) func() (bool, string) {
		return func() (bool, string) {
			got, err := st.ListInputs(ctx)
			if err != nil {
				return false, err.Error()
			}
			for name, w := range want {
				g, ok := got[name]
				if !ok {
					return false, fmt.Sprintf("input %q missing", name)
				}
				if g.Version() != w.Version() || g.Hash() != w.Hash() {
					return false, fmt.Sprintf("input %q at version %d, want %d", name, g.Version(), w.Version())
				}
			}
			if len(got) != len(want) {
				return false, fmt.Sprintf("%d inputs, want %d", len(got), len(want))
			}
			return true, ""
		}
	}
	for i := range 10 {
		put(fmt.Sprintf("before-%d", i), 1)
	}
	must(t, a.PutCluster(ctx, store.Cluster{Name: "before-0", Replica: "a"}))
	testutil.EventuallyWhy(t, "inputs reach Redis", inRedis(observer))

	server.Stop()
	for i := range 10 {
		put(fmt.Sprintf("during-%d", i), 1)
	}
	put("before-3", 2) // a newer version of an input Redis had
	must(t, a.PutCluster(ctx, store.Cluster{Name: "during-0", Replica: "a"}))

	// Reads are served from memory while Redis is down.
	for name, w := range want {
		got, err := a.GetInput(ctx, name)
		if err != nil || got.Hash() != w.Hash() {
			t.Fatalf("GetInput(%q) while Redis is down = %v, %v; want version %d", name, got, err, w.Version())
		}
	}
	list, err := a.ListInputs(ctx)
	if err != nil || len(list) != len(want) {
		t.Fatalf("ListInputs while Redis is down = %d inputs, %v; want %d", len(list), err, len(want))
	}
	testutil.EventuallyWhy(t, "health degraded while Redis is down", func() (bool, string) {
		state, err := a.Health()
		return state == store.HealthDegraded && err != nil, fmt.Sprintf("Health() = %q, %v", state, err)
	})
	if n := a.QueueLen(); n == 0 {
		t.Errorf("QueueLen() = 0 while Redis is down with writes pending")
	}
	if err := a.Ping(ctx); err != nil {
		t.Errorf("Ping while Redis is down = %v, want nil (memory serves)", err)
	}

	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWhy(t, "every input back in Redis", inRedis(observer))
	testutil.EventuallyWhy(t, "health ok after Redis returns", func() (bool, string) {
		state, err := a.Health()
		return state == store.HealthOK && a.QueueLen() == 0, fmt.Sprintf("Health() = %q, %v; QueueLen() = %d", state, err, a.QueueLen())
	})
	testutil.EventuallyWhy(t, "registry back in Redis", func() (bool, string) {
		cs, err := observer.ListClusters(ctx)
		return err == nil && len(cs) == 2, fmt.Sprintf("ListClusters() = %v, %v", cs, err)
	})
	testutil.EventuallyWhy(t, "replica b has every input", inRedis(b))
}

// TestWriteThroughFollowsOtherReplica checks that b serves a's writes from
// memory after a's write reached Redis, and passes the event on.
func TestWriteThroughFollowsOtherReplica(t *testing.T) {
	ctx := t.Context()
	server := testenv.StartRedis(t)
	a := startWriteThrough(t, newRedis(t, server, "p:", "a"))
	b := startWriteThrough(t, newRedis(t, server, "p:", "b"))
	events, err := b.Watch(ctx)
	must(t, err)
	want := storetest.Snap(t, 3, "x", 4)
	must(t, a.PutInput(ctx, "east", want))
	timer := time.NewTimer(waitTimeout)
	defer timer.Stop()
	for {
		select {
		case e := <-events:
			if e.Kind != store.EventInput {
				continue
			}
			if e.Cluster != "east" || e.Version != 3 || e.Replica != "a" {
				t.Fatalf("event = %+v, want input east version 3 from a", e)
			}
			got, err := b.GetInput(ctx, "east")
			if err != nil || got.Hash() != want.Hash() {
				t.Fatalf("b.GetInput after the event = %v, %v; want a's snapshot", got, err)
			}
			return
		case <-timer.C:
			t.Fatal("b saw no event for a's write")
		}
	}
}

// countingReads is a real Redis backing store that counts its reads of
// registry records, one record's or many, and of whole inputs.
type countingReads struct {
	*redis.Store
	records, inputs atomic.Int64
}

func (c *countingReads) GetCluster(ctx context.Context, name string) (store.Cluster, error) {
	c.records.Add(1)
	return c.Store.GetCluster(ctx, name)
}

func (c *countingReads) GetClusters(ctx context.Context, names []string) (map[string]store.Cluster, error) {
	c.records.Add(1)
	return c.Store.GetClusters(ctx, names)
}

func (c *countingReads) GetInput(ctx context.Context, cluster string) (*snapshot.Snapshot, error) {
	c.inputs.Add(1)
	return c.Store.GetInput(ctx, cluster)
}

// startFollowing starts replicas a and b on server under prefix, b's
// reads counted, and returns b's events.
func startFollowing(t *testing.T, server *testenv.Redis, prefix string) (a, b *store.WriteThrough, backing *countingReads, events <-chan store.Event) {
	t.Helper()
	a = startWriteThrough(t, newRedis(t, server, prefix, "a"))
	backing = &countingReads{Store: newRedis(t, server, prefix, "b")}
	b = startWriteThrough(t, backing)
	events, err := b.Watch(t.Context())
	must(t, err)
	return a, b, backing, events
}

// TestWriteThroughFollowsAHeartbeatInFewReads has replica a register 300
// clusters and touch them all at once, as a server's heartbeat does
// (CompareAndPutClusters), then deregister two: b holds every record as
// a wrote it last, the two gone, passes on an event for each write, and
// reads the records from Redis in runs, far fewer reads than records.
func TestWriteThroughFollowsAHeartbeatInFewReads(t *testing.T) {
	ctx := t.Context()
	a, b, backing, events := startFollowing(t, testenv.StartRedis(t), "hb:")

	const n = 300
	records := make([]store.Cluster, n)
	for i := range records {
		records[i] = store.Cluster{Name: fmt.Sprintf("c%03d", i), Replica: "a"}
	}
	stored, err := a.CompareAndPutClusters(ctx, records)
	must(t, err)
	seen := time.Now().UTC().Truncate(time.Second)
	for i := range stored {
		stored[i].LastSeen = seen
	}
	touched, err := a.CompareAndPutClusters(ctx, stored)
	must(t, err)
	if len(touched) != n {
		t.Fatalf("the touch stored %d records, want %d", len(touched), n)
	}
	must(t, a.DeleteCluster(ctx, "c007"))
	must(t, a.DeleteCluster(ctx, "c123"))

	got := 0
	timer := time.NewTimer(waitTimeout)
	defer timer.Stop()
	for got < 2*n+2 {
		select {
		case e := <-events:
			if e.Kind == store.EventCluster && e.Replica == "a" {
				got++
			}
		case <-timer.C:
			t.Fatalf("b passed on %d of a's %d registry events", got, 2*n+2)
		}
	}
	for _, want := range touched {
		c, err := b.GetCluster(ctx, want.Name)
		switch {
		case want.Name == "c007" || want.Name == "c123":
			if !errors.Is(err, store.ErrNotFound) {
				t.Errorf("b.GetCluster(%s) after its deregistration = %+v, %v; want not found", want.Name, c, err)
			}
		case err != nil || c.Version != want.Version || !c.LastSeen.Equal(seen):
			t.Fatalf("b.GetCluster(%s) = version %d last seen %s, %v; want version %d last seen %s",
				want.Name, c.Version, c.LastSeen, err, want.Version, seen)
		}
	}
	if reads := backing.records.Load(); reads > (2*n+2)/4 {
		t.Errorf("b read registry records %d times for %d events, want runs of them read at once", reads, 2*n+2)
	}
}

// TestWriteThroughFollowsAnInputByItsDelta has replica a write a
// cluster's input, then change one resource of it: b reads the first
// whole and applies the change from its event, reading nothing. An event
// whose delta starts from an input b does not hold is read whole.
func TestWriteThroughFollowsAnInputByItsDelta(t *testing.T) {
	ctx := t.Context()
	server := testenv.StartRedis(t)
	a, b, backing, events := startFollowing(t, server, "dl:")
	holds := func(want *snapshot.Snapshot) {
		t.Helper()
		for {
			select {
			case e := <-events:
				if e.Kind != store.EventInput || e.Version != want.Version() {
					continue
				}
				got, err := b.GetInput(ctx, "east")
				if err != nil || got.Hash() != want.Hash() {
					t.Fatalf("b holds %v, %v after the event of version %d; want hash %s", got, err, want.Version(), want.Hash().Short())
				}
				return
			case <-time.After(waitTimeout):
				t.Fatalf("b passed on no event of east's input at version %d", want.Version())
			}
		}
	}

	v1 := storetest.Snap(t, 1, "a", 50)
	must(t, a.PutInput(ctx, "east", v1))
	holds(v1)
	if n := backing.inputs.Load(); n != 1 {
		t.Fatalf("b read east's first input %d times, want once", n)
	}
	v2, err := snapshot.Apply(v1, snapshot.Delta{BaseVersion: 1, Version: 2, Upserts: storetest.Snap(t, 2, "changed", 1).Resources()})
	must(t, err)
	must(t, a.PutInput(ctx, "east", v2))
	holds(v2)
	if n := backing.inputs.Load(); n != 1 {
		t.Errorf("b read east's input %d times, want only the first: the change came with its event", n)
	}

	// The delta from v1 to v3, announced while b holds v2: not applied,
	// v3 read whole.
	c := newRedis(t, server, "dl:", "c")
	v3 := storetest.Snap(t, 3, "third", 50)
	must(t, c.PutInput(ctx, "east", v3))
	holds(v3)
	reads := backing.inputs.Load()
	bh := v1.Hash()
	delta, err := proto.Marshal(snapshot.DeltaToProto(snapshot.Diff(v1, v3), false))
	must(t, err)
	msg, err := json.Marshal(map[string]any{"k": store.EventInput, "c": "east", "v": 3, "r": "c", "x": delta, "bh": bh[:]})
	must(t, err)
	raw := goredis.NewClient(&goredis.Options{Addr: server.Addr()})
	defer raw.Close()
	must(t, raw.Publish(ctx, "dl:events", msg).Err())
	holds(v3)
	if n := backing.inputs.Load(); n != reads+1 {
		t.Errorf("b read east's input %d times for a delta from an input it does not hold, want once", n-reads)
	}
}

// TestWriteThroughCutOffKeepsDeregistration cuts replica a off from Redis
// while replica b deregisters a cluster (revokes its record, deletes its
// input and outputs) and a, whose agent is still connected, keeps writing
// the cluster's input and outputs. Once a reaches Redis again the
// deregistration stands: nothing of the cluster is back in Redis nor in
// a's memory, and b's registry record is not overwritten.
func TestWriteThroughCutOffKeepsDeregistration(t *testing.T) {
	ctx := t.Context()
	server := testenv.StartRedis(t)
	proxy, err := tcpproxy.Start(server.Addr())
	must(t, err)
	t.Cleanup(func() { proxy.Close() })
	const prefix = "cut:"
	a := startWriteThrough(t, newRedisAt(t, "redis://"+proxy.Addr()+"/0", prefix, "a"))
	b := startWriteThrough(t, newRedis(t, server, prefix, "b"))
	observer := newRedis(t, server, prefix, "observer")

	_, err = store.UpdateCluster(ctx, b, "east", func(c *store.Cluster, _ bool) error { return nil })
	must(t, err)
	must(t, a.PutInput(ctx, "east", storetest.Snap(t, 1, "east-1", 3)))
	must(t, a.PutOutput(ctx, "east", "istio", storetest.Snap(t, 1, "out-1", 3)))
	testutil.EventuallyWhy(t, "east's input in Redis", func() (bool, string) {
		_, err := observer.GetInput(ctx, "east")
		return err == nil, fmt.Sprint(err)
	})
	testutil.EventuallyWhy(t, "a knows east's record", func() (bool, string) {
		_, err := a.GetCluster(ctx, "east")
		return err == nil, fmt.Sprint(err)
	})

	proxy.Cut()
	testutil.EventuallyWhy(t, "a degraded", func() (bool, string) {
		state, _ := a.Health()
		return state == store.HealthDegraded, state
	})
	_, err = store.UpdateCluster(ctx, b, "east", func(c *store.Cluster, _ bool) error {
		c.Revoked = true
		return nil
	})
	must(t, err)
	must(t, b.DeleteInput(ctx, "east"))
	must(t, b.DeleteOutputs(ctx, "east"))
	testutil.EventuallyWhy(t, "the deregistration in Redis", func() (bool, string) {
		_, err := observer.GetInput(ctx, "east")
		return errors.Is(err, store.ErrNotFound), fmt.Sprint(err)
	})
	must(t, a.PutInput(ctx, "east", storetest.Snap(t, 2, "east-2", 3)))
	must(t, a.PutOutput(ctx, "east", "istio", storetest.Snap(t, 2, "out-2", 3)))

	proxy.Restore()
	testutil.EventuallyWhy(t, "a healthy with nothing queued", func() (bool, string) {
		state, _ := a.Health()
		return state == store.HealthOK && a.QueueLen() == 0, fmt.Sprintf("%s, %d queued", state, a.QueueLen())
	})
	testutil.EventuallyWhy(t, "a dropped east from memory", func() (bool, string) {
		_, ierr := a.GetInput(ctx, "east")
		outs, oerr := a.ListOutputs(ctx, "east")
		return errors.Is(ierr, store.ErrNotFound) && oerr == nil && len(outs) == 0, fmt.Sprintf("input: %v; outputs %d, %v", ierr, len(outs), oerr)
	})
	if s, err := observer.GetInput(ctx, "east"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("east's input is back in Redis after a reconnected: version %d, %v", s.Version(), err)
	}
	if outs, err := observer.ListOutputs(ctx, "east"); err != nil || len(outs) != 0 {
		t.Errorf("east's outputs in Redis after a reconnected: %d, %v; want none", len(outs), err)
	}
	if c, err := observer.GetCluster(ctx, "east"); err != nil || !c.Revoked {
		t.Errorf("east's record in Redis = %+v, %v; want revoked", c, err)
	}
}

func newRedisAt(t testing.TB, url, prefix, replica string) *redis.Store {
	t.Helper()
	o, err := redis.ParseURL(url)
	if err != nil {
		t.Fatalf("ParseURL: %v", err)
	}
	o.Prefix, o.Replica, o.Logger = prefix, replica, testLogger(t)
	s, err := redis.New(t.Context(), o)
	if err != nil {
		t.Fatalf("redis.New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// After the backing store lost an output (a Redis restart), a replica
// writes back only the outputs it wrote itself: a copy of another
// replica's, older than what that replica now holds, would overwrite the
// newer one in the backing store, then in every replica's memory.
func TestWriteThroughWritesBackOnlyItsOwnOutputs(t *testing.T) {
	ctx := t.Context()
	backing := memory.New()
	replica := func(name string) *store.WriteThrough { return loadedReplica(t, backing, name) }
	older, newer := storetest.Snap(t, 1, "older", 2), storetest.Snap(t, 2, "newer", 2)
	writer := replica("writer")
	must(t, writer.PutInput(ctx, "east", storetest.Snap(t, 1, "input", 1)))
	must(t, writer.PutOutput(ctx, "east", "istio", older))
	must(t, writer.Flush(ctx))
	other := replica("other") // copies the older output, and follows no feed after
	must(t, writer.PutOutput(ctx, "east", "istio", newer))
	must(t, writer.Flush(ctx))

	// The backing store loses the output; both replicas reload, and the
	// other one's writes reach it last.
	must(t, backing.Replica("restart").DeleteOutputs(ctx, "east"))
	if _, err := other.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := writer.Load(ctx); err != nil {
		t.Fatal(err)
	}
	must(t, writer.Flush(ctx))
	must(t, other.Flush(ctx))
	got, err := backing.GetOutput(ctx, "east", "istio")
	if err != nil {
		t.Fatal(err)
	}
	if got.Hash() != newer.Hash() {
		t.Fatalf("the backing store holds the output of version %d, want the writer's newer one (version %d)", got.Version(), newer.Version())
	}
}

// A replica that no longer serves a cluster may still hold its own, older
// output of it, having missed the newer one (cut off meanwhile). When the
// backing store loses its data and both replicas write back what they own,
// the older write may land last; the newer writer keeps its output, writes
// it back again, and the older one gives way.
func TestWriteThroughOlderOwnOutputGivesWay(t *testing.T) {
	ctx := t.Context()
	backing := memory.New()
	replica := func(name string) *store.WriteThrough { return loadedReplica(t, backing, name) }
	older, newer := storetest.Snap(t, 1, "older", 2), storetest.Snap(t, 2, "newer", 2)
	before := replica("before") // served east first, then missed its move
	must(t, before.PutInput(ctx, "east", storetest.Snap(t, 1, "input", 1)))
	must(t, before.PutOutput(ctx, "east", "istio", older))
	must(t, before.Flush(ctx))
	now := replica("now") // serves east now, the next version
	must(t, now.PutOutput(ctx, "east", "istio", newer))
	must(t, now.Flush(ctx))

	// The backing store loses the output; both write back what they own,
	// the older last.
	must(t, backing.Replica("restart").DeleteOutputs(ctx, "east"))
	for _, wt := range []*store.WriteThrough{now, before} {
		if _, err := wt.Load(ctx); err != nil {
			t.Fatal(err)
		}
	}
	must(t, now.Flush(ctx))
	must(t, before.Flush(ctx))

	// Each reads the backing store again, as its change feed makes it.
	for _, wt := range []*store.WriteThrough{now, before, now} {
		if _, err := wt.Load(ctx); err != nil {
			t.Fatal(err)
		}
		must(t, wt.Flush(ctx))
	}
	for name, s := range map[string]store.Outputs{"the backing store": backing, "the serving replica": now, "the other replica": before} {
		got, err := s.GetOutput(ctx, "east", "istio")
		if err != nil {
			t.Fatal(err)
		}
		if got.Hash() != newer.Hash() {
			t.Errorf("%s holds the output of version %d, want the newer one (version %d)", name, got.Version(), newer.Version())
		}
	}
}

// loadedReplica is a replica's write-through store over backing, loaded,
// which follows no change feed: the test copies with Load.
func loadedReplica(t *testing.T, backing *memory.Store, name string) *store.WriteThrough {
	t.Helper()
	wt := store.NewWriteThrough(memory.New(), backing.Replica(name), store.WriteThroughOptions{Logger: testLogger(t)})
	t.Cleanup(func() { wt.Close() })
	if _, err := wt.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	return wt
}
