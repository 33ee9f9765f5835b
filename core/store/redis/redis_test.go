package redis_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/store"
	"github.com/meshrelay/meshrelay/core/store/redis"
	"github.com/meshrelay/meshrelay/core/store/storetest"
	"github.com/meshrelay/meshrelay/internal/testenv"
	"github.com/meshrelay/meshrelay/internal/testutil"
)

// newStore connects a store to server with the given replica ID and closes
// it when the test ends.
func newStore(t testing.TB, server *testenv.Redis, prefix, replica string) *redis.Store {
	t.Helper()
	o, err := redis.ParseURL(server.URL())
	if err != nil {
		t.Fatalf("ParseURL(%q): %v", server.URL(), err)
	}
	o.Prefix, o.Replica = prefix, replica
	o.Logger = slog.New(slog.NewTextHandler(t.Output(), nil))
	s, err := redis.New(t.Context(), o)
	if err != nil {
		t.Fatalf("redis.New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	server := testenv.StartRedis(t)
	// One server for the suite; each subtest has its own key prefix.
	storetest.Run(t, storetest.Shared(
		func(t *testing.T) string { return "test:" + t.Name() + ":" },
		func(t *testing.T, prefix, replica string) store.Store { return newStore(t, server, prefix, replica) },
	))
}

// TestWatchResyncAfterRestart kills the real redis-server under a watcher:
// events published while it is down are lost, so the watcher must get a
// Resync once the subscription is back, and then further events.
func TestWatchResyncAfterRestart(t *testing.T) {
	ctx := t.Context()
	server := testenv.StartRedis(t)
	a := newStore(t, server, "r:", "a")
	b := newStore(t, server, "r:", "b")
	events, err := a.Watch(ctx)
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	server.Stop()
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, events, func(e store.Event) bool { return e.Kind == store.EventResync })
	// b's connection pool recovers by itself; retry its write until Redis
	// accepts it.
	testutil.EventuallyWhy(t, "PutInput after restart", func() (bool, string) {
		err := b.PutInput(ctx, "east", storetest.Snap(t, 1, "x", 1))
		return err == nil, fmt.Sprint(err)
	})
	waitFor(t, events, func(e store.Event) bool {
		return e.Kind == store.EventInput && e.Cluster == "east" && e.Replica == "b"
	})
}

func waitFor(t *testing.T, events <-chan store.Event, match func(store.Event) bool) {
	t.Helper()
	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	for {
		select {
		case e, ok := <-events:
			if !ok {
				t.Fatal("Watch channel closed")
			}
			if match(e) {
				return
			}
		case <-timer.C:
			t.Fatal("no matching event within 30s")
		}
	}
}

// TestVersionsBeyondFloatPrecision checks that the version rule holds for
// versions Lua numbers cannot tell apart.
func TestVersionsBeyondFloatPrecision(t *testing.T) {
	ctx := t.Context()
	s := newStore(t, testenv.StartRedis(t), "v:", "a")
	const big = uint64(1) << 60
	newer := storetest.Snap(t, big+1, "newer", 1)
	if err := s.PutInput(ctx, "c", newer); err != nil {
		t.Fatal(err)
	}
	if err := s.PutInput(ctx, "c", storetest.Snap(t, big, "older", 1)); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetInput(ctx, "c")
	if err != nil || got.Version() != big+1 || got.Hash() != newer.Hash() {
		t.Fatalf("GetInput = %v, %v; want version %d", got, err, big+1)
	}
}

// TestCorruptData checks that damaged stored data is an error, not a
// panic or a wrong snapshot.
func TestCorruptData(t *testing.T) {
	ctx := t.Context()
	server := testenv.StartRedis(t)
	s := newStore(t, server, "x:", "a")
	if err := s.PutInput(ctx, "c", storetest.Snap(t, 1, "x", 3)); err != nil {
		t.Fatal(err)
	}
	raw := goredis.NewClient(&goredis.Options{Addr: server.Addr()})
	defer raw.Close()
	for name, value := range map[string]string{
		"unknown format": "zzz",
		"bad gzip":       "g\x00\x01",
	} {
		if err := raw.HSet(ctx, "x:input:c", "d", value).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := s.GetInput(ctx, "c"); err == nil || errors.Is(err, store.ErrNotFound) {
			t.Errorf("GetInput with %s: err = %v, want a decode error", name, err)
		}
		if _, err := s.ListInputs(ctx); err == nil {
			t.Errorf("ListInputs with %s: err = nil, want a decode error", name)
		}
	}
	// Data from another snapshot under this one's hash.
	other := storetest.Snap(t, 1, "other", 3)
	if err := s.PutInput(ctx, "d", other); err != nil {
		t.Fatal(err)
	}
	d, _ := raw.HGet(ctx, "x:input:d", "d").Result()
	if err := raw.HSet(ctx, "x:input:c", "d", d).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetInput(ctx, "c"); err == nil {
		t.Error("GetInput with another snapshot's data: err = nil, want a hash mismatch")
	}
}

// TestGetClusters reads many registry records in one call: those stored
// by name, none for a name not stored, and a damaged record an error.
func TestGetClusters(t *testing.T) {
	ctx := t.Context()
	server := testenv.StartRedis(t)
	s := newStore(t, server, "g:", "a")
	stored, err := s.CompareAndPutClusters(ctx, []store.Cluster{{Name: "east", Replica: "a"}, {Name: "west", Labels: map[string]string{"env": "prod"}}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.GetClusters(ctx, []string{"west", "nowhere", "east"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["east"].Version != stored[0].Version || got["east"].Replica != "a" || got["west"].Labels["env"] != "prod" {
		t.Errorf("GetClusters = %+v; want east and west as stored, nothing for nowhere", got)
	}
	if none, err := s.GetClusters(ctx, nil); err != nil || len(none) != 0 {
		t.Errorf("GetClusters(nil) = %v, %v; want an empty map", none, err)
	}
	raw := goredis.NewClient(&goredis.Options{Addr: server.Addr()})
	defer raw.Close()
	if err := raw.HSet(ctx, "g:clusters", "west", "{not json").Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetClusters(ctx, []string{"east", "west"}); err == nil || !strings.Contains(err.Error(), `"west"`) {
		t.Errorf("GetClusters with west damaged = %+v, %v; want an error naming west", got, err)
	}
}

// TestPutUnlessRevoked writes inputs and outputs through the forms that
// check the cluster's registry record in the same step: written while the
// record is absent or live, refused once it is revoked, the stored ones
// left as they were and no event published for the refusals.
func TestPutUnlessRevoked(t *testing.T) {
	ctx := t.Context()
	server := testenv.StartRedis(t)
	s := newStore(t, server, "u:", "a")
	events, err := newStore(t, server, "u:", "watcher").Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	put := func(version uint64) (in, out bool) {
		t.Helper()
		snap := storetest.Snap(t, version, "east", 2)
		in, err := s.PutInputUnlessRevoked(ctx, "east", nil, snap)
		if err != nil {
			t.Fatal(err)
		}
		out, err = s.PutOutputUnlessRevoked(ctx, "east", "istio", snap)
		if err != nil {
			t.Fatal(err)
		}
		return in, out
	}
	if in, out := put(1); in || out {
		t.Fatalf("writes of a cluster without a record reported revoked: %v, %v", in, out)
	}
	rec, err := s.CompareAndPutCluster(ctx, store.Cluster{Name: "east"})
	if err != nil {
		t.Fatal(err)
	}
	if in, out := put(2); in || out {
		t.Fatalf("writes of a live cluster reported revoked: %v, %v", in, out)
	}
	rec.Revoked = true
	if _, err := s.CompareAndPutCluster(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if in, out := put(3); !in || !out {
		t.Fatalf("writes of a revoked cluster reported revoked %v, %v; want both refused", in, out)
	}
	got, err := s.GetInput(ctx, "east")
	if err != nil || got.Version() != 2 {
		t.Errorf("input after the refused write = %v, %v; want version 2", got, err)
	}
	if got, err := s.GetOutput(ctx, "east", "istio"); err != nil || got.Version() != 2 {
		t.Errorf("output after the refused write = %v, %v; want version 2", got, err)
	}
	// A refused input of a cluster whose input is gone leaves no index
	// entry behind.
	if _, err := s.CompareAndPutCluster(ctx, store.Cluster{Name: "gone", Revoked: true}); err != nil {
		t.Fatal(err)
	}
	if revoked, err := s.PutInputUnlessRevoked(ctx, "gone", nil, storetest.Snap(t, 1, "gone", 1)); err != nil || !revoked {
		t.Fatalf("PutInputUnlessRevoked(gone) = %v, %v; want refused", revoked, err)
	}
	raw := goredis.NewClient(&goredis.Options{Addr: server.Addr()})
	defer raw.Close()
	if in, err := raw.SIsMember(ctx, "u:inputs", "gone").Result(); err != nil || in {
		t.Errorf("the index holds the refused input of gone: %v, %v", in, err)
	}
	// Two writes of each kind and the records' three: nothing for the
	// refused writes, so the next event is west's input.
	for range 7 {
		nextEvent(t, events)
	}
	if err := s.PutInput(ctx, "west", storetest.Snap(t, 1, "west", 1)); err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, events); ev.Kind != store.EventInput || ev.Cluster != "west" {
		t.Errorf("event %+v after the refused writes; want west's input next", ev)
	}
}

// nextEvent returns the next event other than a resync.
func nextEvent(t *testing.T, events <-chan store.Event) store.Event {
	t.Helper()
	for {
		select {
		case ev := <-events:
			if ev.Kind != store.EventResync {
				return ev
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no event within 10s")
		}
	}
}

// TestPutInputEventCarriesDelta writes a cluster's input as a replica's
// write queue does, naming the input each write replaces: its event
// carries the delta from that input only when it is the one stored and
// the delta is small, and the delta leads from it to the stored input.
func TestPutInputEventCarriesDelta(t *testing.T) {
	ctx := t.Context()
	server := testenv.StartRedis(t)
	s := newStore(t, server, "x:", "a")
	events, err := newStore(t, server, "x:", "watcher").Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	put := func(base, snap *snapshot.Snapshot) store.Event {
		t.Helper()
		if revoked, err := s.PutInputUnlessRevoked(ctx, "east", base, snap); err != nil || revoked {
			t.Fatalf("PutInputUnlessRevoked(version %d) = %v, %v", snap.Version(), revoked, err)
		}
		ev := nextEvent(t, events)
		if ev.Kind != store.EventInput || ev.Cluster != "east" || ev.Version != snap.Version() {
			t.Fatalf("event %+v; want east's input at version %d", ev, snap.Version())
		}
		return ev
	}
	v1 := storetest.Snap(t, 1, "a", 3)
	if ev := put(nil, v1); ev.Delta != nil {
		t.Errorf("the first input's event carries a delta: %+v", ev.Delta)
	}
	v2 := storetest.Snap(t, 2, "a", 4) // v1 and one ConfigMap more
	ev := put(v1, v2)
	if ev.Delta == nil {
		t.Fatal("the event of an input written over the one it names carries no delta")
	}
	if ev.Delta.BaseHash != v1.Hash() || len(ev.Delta.Upserts) != 1 || len(ev.Delta.Deletes) != 0 {
		t.Errorf("delta from %s with %d upserts and %d deletes; want from %s with the one ConfigMap added",
			ev.Delta.BaseHash.Short(), len(ev.Delta.Upserts), len(ev.Delta.Deletes), v1.Hash().Short())
	}
	if got, err := snapshot.Apply(v1, ev.Delta.Delta); err != nil || got.Hash() != v2.Hash() || got.Version() != 2 {
		t.Errorf("the delta applied to the input it names = %v, %v; want version 2 hashing %s", got, err, v2.Hash().Short())
	}
	v3 := storetest.Snap(t, 3, "a", 5)
	if ev := put(v1, v3); ev.Delta != nil {
		t.Errorf("a write naming an input that is not the stored one carries a delta")
	}
	v4 := storetest.Snap(t, 4, strings.Repeat("b", 200), 300) // every body changed, about 90 KB
	if ev := put(v3, v4); ev.Delta != nil {
		t.Errorf("a change of %d bytes carries a delta; the bound is far below", snapshot.Diff(v3, v4).Size())
	}
	if err := s.PutInput(ctx, "east", storetest.Snap(t, 5, strings.Repeat("b", 200), 301)); err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, events); ev.Delta != nil {
		t.Errorf("PutInput, which names no input, published a delta")
	}
	// A delta that does not decode, or leads elsewhere, is left out of an
	// event that still says the input changed.
	raw := goredis.NewClient(&goredis.Options{Addr: server.Addr()})
	defer raw.Close()
	for _, msg := range []string{
		`{"k":1,"c":"east","v":6,"r":"c","x":"bm90IGEgZGVsdGE=","bh":"AAAA"}`,
		`{"k":1,"c":"east","v":7,"r":"c","x":"","bh":""}`,
		`{"k":1,"c":"east","v":8,"r":"c","x":"` + base64.StdEncoding.EncodeToString(make([]byte, 1<<17)) + `","bh":"AAAA"}`,
	} {
		if err := raw.Publish(ctx, "x:events", msg).Err(); err != nil {
			t.Fatal(err)
		}
		if ev := nextEvent(t, events); ev.Kind != store.EventInput || ev.Cluster != "east" || ev.Delta != nil {
			t.Errorf("event of %s = %+v; want east's input without a delta", msg, ev)
		}
	}
}

// TestListSkipsStaleIndex checks that an index entry without its input (a
// crash between the two writes) is skipped.
func TestListSkipsStaleIndex(t *testing.T) {
	ctx := t.Context()
	server := testenv.StartRedis(t)
	s := newStore(t, server, "i:", "a")
	if err := s.PutInput(ctx, "real", storetest.Snap(t, 1, "x", 1)); err != nil {
		t.Fatal(err)
	}
	raw := goredis.NewClient(&goredis.Options{Addr: server.Addr()})
	defer raw.Close()
	if err := raw.SAdd(ctx, "i:inputs", "ghost").Err(); err != nil {
		t.Fatal(err)
	}
	got, err := s.ListInputs(ctx)
	if err != nil || len(got) != 1 || got["real"] == nil {
		t.Fatalf("ListInputs = %v, %v; want only \"real\"", got, err)
	}
}

func TestNewFailsWithoutServer(t *testing.T) {
	server := testenv.StartRedis(t)
	server.Stop()
	o, err := redis.ParseURL(server.URL())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if s, err := redis.New(ctx, o); err == nil {
		s.Close()
		t.Fatal("New with redis-server stopped succeeded")
	}
}

func newRawClient(server *testenv.Redis) *goredis.Client {
	return goredis.NewClient(&goredis.Options{Addr: server.Addr()})
}
