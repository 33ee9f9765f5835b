package redis_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/store"
	"github.com/meshrelay/meshrelay/core/store/memory"
	"github.com/meshrelay/meshrelay/core/store/redis"
	"github.com/meshrelay/meshrelay/core/store/storetest"
	"github.com/meshrelay/meshrelay/internal/testenv"
	"github.com/meshrelay/meshrelay/internal/testutil"
)

// outputHashes returns each cluster's outputs as version and hash, by
// backend, for comparison.
func outputHashes(all map[string]map[string]*snapshot.Snapshot) map[string]map[string]string {
	out := make(map[string]map[string]string, len(all))
	for cluster, byBackend := range all {
		out[cluster] = map[string]string{}
		for backend, s := range byBackend {
			out[cluster][backend] = fmt.Sprintf("%d/%s", s.Version(), s.Hash().Short())
		}
	}
	return out
}

// TestListOutputsOf checks on a real redis-server that the pipelined read
// of many clusters' outputs equals ListOutputs cluster by cluster: clusters
// with one output, several, none, and one that is not stored at all.
func TestListOutputsOf(t *testing.T) {
	ctx := t.Context()
	s := newStore(t, testenv.StartRedis(t), "bulk:", "a")
	var clusters []string
	for i := range 40 {
		name := fmt.Sprintf("c%02d", i)
		clusters = append(clusters, name)
		for b := range i % 4 { // c00, c04, … have no outputs
			if err := s.PutOutput(ctx, name, fmt.Sprintf("backend-%d", b), storetest.Snap(t, uint64(i+b+1), name, b+1)); err != nil {
				t.Fatalf("PutOutput: %v", err)
			}
		}
	}
	if err := s.DeleteOutputs(ctx, "c05"); err != nil {
		t.Fatal(err)
	}
	clusters = append(clusters, "never-stored")

	encoded, err := s.ListOutputsOf(ctx, clusters)
	if err != nil {
		t.Fatalf("ListOutputsOf: %v", err)
	}
	got := map[string]map[string]*snapshot.Snapshot{}
	for name, byBackend := range encoded {
		got[name] = map[string]*snapshot.Snapshot{}
		for backend, e := range byBackend {
			if got[name][backend], err = e.Snapshot(); err != nil {
				t.Fatalf("ListOutputsOf: %s/%s: %v", name, backend, err)
			}
		}
	}
	want := map[string]map[string]*snapshot.Snapshot{}
	for _, name := range clusters {
		if want[name], err = s.ListOutputs(ctx, name); err != nil {
			t.Fatalf("ListOutputs(%q): %v", name, err)
		}
	}
	if g, w := outputHashes(got), outputHashes(want); !maps.EqualFunc(g, w, maps.Equal) {
		t.Errorf("ListOutputsOf = %v, want (ListOutputs one by one) %v", g, w)
	}
	if n := len(got["c03"]); n != 3 {
		t.Errorf("ListOutputsOf: c03 has %d outputs, want 3", n)
	}
}

// TestLoadReadsEveryOutput loads more clusters than one batch of the
// pipelined output read from a real redis-server into a WriteThrough, and
// checks that memory then holds exactly the outputs Redis holds.
func TestLoadReadsEveryOutput(t *testing.T) {
	ctx := t.Context()
	server := testenv.StartRedis(t)
	writer := newStore(t, server, "load:", "writer")
	const clusters = 600 // more than two batches
	for i := range clusters {
		name := fmt.Sprintf("cluster-%04d", i)
		if err := writer.PutInput(ctx, name, storetest.Snap(t, 1, name, 1)); err != nil {
			t.Fatal(err)
		}
		for _, backend := range []string{"istio", "cilium"}[:1+i%2] {
			if err := writer.PutOutput(ctx, name, backend, storetest.Snap(t, uint64(i+1), backend+name, 2)); err != nil {
				t.Fatal(err)
			}
		}
	}
	wt := store.NewWriteThrough(memory.New(), newStore(t, server, "load:", "loader"), store.WriteThroughOptions{})
	defer wt.Close()
	stats, err := wt.Load(ctx)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if want := clusters + clusters/2; stats.Outputs != want || stats.Queued != 0 {
		t.Errorf("Load read %d outputs and queued %d, want %d and 0", stats.Outputs, stats.Queued, want)
	}
	for i := range clusters {
		name := fmt.Sprintf("cluster-%04d", i)
		got, err := wt.ListOutputs(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		want, err := writer.ListOutputs(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		g, w := outputHashes(map[string]map[string]*snapshot.Snapshot{name: got}), outputHashes(map[string]map[string]*snapshot.Snapshot{name: want})
		if !maps.EqualFunc(g, w, maps.Equal) {
			t.Fatalf("after Load, memory holds %v of %s, Redis %v", g[name], name, w[name])
		}
	}
}

// TestLoadKeepsSnapshotsEncoded loads clusters from a real redis-server
// into a WriteThrough over memory and counts the snapshots the loading
// store decodes: the Load decodes none, inputs and outputs stay encoded
// until read, and a snapshot read from many goroutines at once is decoded
// once and is exactly the stored one.
func TestLoadKeepsSnapshotsEncoded(t *testing.T) {
	ctx := t.Context()
	server := testenv.StartRedis(t)
	writer := newStore(t, server, "lazy:", "writer")
	const clusters = 300 // more than one batch of the pipelined read
	for i := range clusters {
		name := fmt.Sprintf("cluster-%04d", i)
		if err := writer.PutInput(ctx, name, storetest.Snap(t, 1, name, 1)); err != nil {
			t.Fatal(err)
		}
		for _, backend := range []string{"istio", "cilium"} {
			if err := writer.PutOutput(ctx, name, backend, storetest.Snap(t, uint64(i+1), backend+name, 3)); err != nil {
				t.Fatal(err)
			}
		}
	}
	loader := newStore(t, server, "lazy:", "loader")
	wt := store.NewWriteThrough(memory.New(), loader, store.WriteThroughOptions{})
	defer wt.Close()
	stats, err := wt.Load(ctx)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if stats.Outputs != 2*clusters {
		t.Fatalf("Load read %d outputs, want %d", stats.Outputs, 2*clusters)
	}
	if n := redis.Decodes(loader); n != 0 {
		t.Errorf("Load decoded %d snapshots, want none", n)
	}
	wantIn, err := writer.GetInput(ctx, "cluster-0042")
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if in, err := wt.GetInput(ctx, "cluster-0042"); err != nil || in.Version() != wantIn.Version() || in.Hash() != wantIn.Hash() {
			t.Fatalf("GetInput after Load = %v, %v; want the stored version %d hash %s", in, err, wantIn.Version(), wantIn.Hash().Short())
		}
	}
	if n := redis.Decodes(loader); n != 1 {
		t.Errorf("two reads of one input decoded %d snapshots, want 1", n)
	}

	want, err := writer.GetOutput(ctx, "cluster-0042", "cilium")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	got := make([]*snapshot.Snapshot, 8)
	errs := make([]error, len(got))
	for i := range got {
		wg.Go(func() { got[i], errs[i] = wt.GetOutput(ctx, "cluster-0042", "cilium") })
	}
	wg.Wait()
	for i := range got {
		if errs[i] != nil {
			t.Fatalf("GetOutput after Load: %v", errs[i])
		}
		if got[i].Version() != want.Version() || got[i].Hash() != want.Hash() || got[i].Len() != want.Len() || got[i] != got[0] {
			t.Fatalf("GetOutput after Load = version %d hash %s (%d objects), want the stored version %d hash %s (%d), the same snapshot for every reader",
				got[i].Version(), got[i].Hash().Short(), got[i].Len(), want.Version(), want.Hash().Short(), want.Len())
		}
	}
	if n := redis.Decodes(loader); n != 2 {
		t.Errorf("8 concurrent reads of one output decoded %d snapshots, want 1", n-1)
	}
}

// TestLoadCorruptOutputFoundOnUse damages one cluster's stored output in a
// real redis-server in the ways TestCorruptData does and loads the fleet:
// the Load, which no longer decodes outputs, succeeds; reading that output
// is an error naming its cluster and backend, every time, never "not
// found" or an empty set; every other output reads back as stored.
func TestLoadCorruptOutputFoundOnUse(t *testing.T) {
	ctx := t.Context()
	server := testenv.StartRedis(t)
	raw := goredis.NewClient(&goredis.Options{Addr: server.Addr()})
	defer raw.Close()
	for name, corrupt := range map[string]func(t *testing.T, prefix string){
		"unknown format": func(t *testing.T, prefix string) { hset(t, raw, prefix+"output:b", "d:istio", "zzz") },
		"bad gzip":       func(t *testing.T, prefix string) { hset(t, raw, prefix+"output:b", "d:istio", "g\x00\x01") },
		"another output's data": func(t *testing.T, prefix string) {
			d, err := raw.HGet(ctx, prefix+"output:a", "d:istio").Result()
			if err != nil {
				t.Fatal(err)
			}
			hset(t, raw, prefix+"output:b", "d:istio", d)
		},
	} {
		t.Run(name, func(t *testing.T) {
			prefix := strings.ReplaceAll(name, " ", "-") + ":"
			writer := newStore(t, server, prefix, "writer")
			stored := map[string]*snapshot.Snapshot{}
			for i, c := range []string{"a", "b", "c"} {
				if err := writer.PutInput(ctx, c, storetest.Snap(t, 1, c, 1)); err != nil {
					t.Fatal(err)
				}
				for _, backend := range []string{"istio", "cilium"} {
					s := storetest.Snap(t, uint64(i+1), backend+c, 2)
					if err := writer.PutOutput(ctx, c, backend, s); err != nil {
						t.Fatal(err)
					}
					stored[c+"/"+backend] = s
				}
			}
			corrupt(t, prefix)
			wt := store.NewWriteThrough(memory.New(), newStore(t, server, prefix, "loader"), store.WriteThroughOptions{})
			defer wt.Close()
			if _, err := wt.Load(ctx); err != nil {
				t.Fatalf("Load with b/istio damaged: %v, want the other outputs loaded", err)
			}
			if s, err := writer.GetOutput(ctx, "b", "istio"); err == nil || !strings.Contains(err.Error(), `"b"/"istio"`) || strings.Count(err.Error(), "redis:") != 1 {
				t.Fatalf("the store's own GetOutput(b, istio) = %v, %v; want a decode error naming the output, from redis once", s, err)
			}
			for range 2 {
				if s, err := wt.GetOutput(ctx, "b", "istio"); err == nil || errors.Is(err, store.ErrNotFound) ||
					!strings.Contains(err.Error(), `"b"`) || !strings.Contains(err.Error(), `"istio"`) {
					t.Fatalf("GetOutput(b, istio) = %v, %v; want a decode error naming the cluster and backend", s, err)
				}
				if all, err := wt.ListOutputs(ctx, "b"); err == nil {
					t.Fatalf("ListOutputs(b) = %d outputs, nil; want the decode error", len(all))
				}
			}
			for key, want := range stored {
				if key == "b/istio" {
					continue
				}
				c, backend, _ := strings.Cut(key, "/")
				got, err := wt.GetOutput(ctx, c, backend)
				if err != nil || got.Version() != want.Version() || got.Hash() != want.Hash() {
					t.Errorf("GetOutput(%s) = %v, %v; want version %d hash %s", key, got, err, want.Version(), want.Hash().Short())
				}
			}
		})
	}
}

// TestLoadCorruptInputFoundOnUse damages one cluster's stored input in a
// real redis-server in the ways TestCorruptData does and loads the fleet:
// the Load, which keeps inputs encoded, succeeds where it failed whole
// before; reading that input is an error naming its cluster, every time,
// never "not found" or an empty input; every other input reads back as
// stored, and the damaged one's version and hash are known without it.
func TestLoadCorruptInputFoundOnUse(t *testing.T) {
	ctx := t.Context()
	server := testenv.StartRedis(t)
	raw := goredis.NewClient(&goredis.Options{Addr: server.Addr()})
	defer raw.Close()
	for name, corrupt := range map[string]func(t *testing.T, prefix string){
		"unknown format": func(t *testing.T, prefix string) { hset(t, raw, prefix+"input:b", "d", "zzz") },
		"bad gzip":       func(t *testing.T, prefix string) { hset(t, raw, prefix+"input:b", "d", "g\x00\x01") },
		"another input's data": func(t *testing.T, prefix string) {
			d, err := raw.HGet(ctx, prefix+"input:a", "d").Result()
			if err != nil {
				t.Fatal(err)
			}
			hset(t, raw, prefix+"input:b", "d", d)
		},
	} {
		t.Run(name, func(t *testing.T) {
			prefix := strings.ReplaceAll(name, " ", "-") + ":"
			writer := newStore(t, server, prefix, "writer")
			stored := map[string]*snapshot.Snapshot{}
			for i, c := range []string{"a", "b", "c"} {
				s := storetest.Snap(t, uint64(i+1), c, 2)
				if err := writer.PutInput(ctx, c, s); err != nil {
					t.Fatal(err)
				}
				stored[c] = s
			}
			corrupt(t, prefix)
			wt := store.NewWriteThrough(memory.New(), newStore(t, server, prefix, "loader"), store.WriteThroughOptions{})
			defer wt.Close()
			if _, err := wt.Load(ctx); err != nil {
				t.Fatalf("Load with b's input damaged: %v, want the other inputs loaded", err)
			}
			all, err := store.ListEncodedInputs(ctx, wt)
			if err != nil || len(all) != 3 || all["b"].Version() != stored["b"].Version() || all["b"].Hash() != stored["b"].Hash() {
				t.Fatalf("ListEncodedInputs after Load = %v, %v; want a, b and c, b with its stored version and hash", all, err)
			}
			for range 2 {
				if s, err := wt.GetInput(ctx, "b"); err == nil || errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), `"b"`) {
					t.Fatalf("GetInput(b) = %v, %v; want a decode error naming the cluster", s, err)
				}
			}
			for _, c := range []string{"a", "c"} {
				got, err := wt.GetInput(ctx, c)
				if err != nil || got.Version() != stored[c].Version() || got.Hash() != stored[c].Hash() {
					t.Errorf("GetInput(%s) = %v, %v; want version %d hash %s", c, got, err, stored[c].Version(), stored[c].Hash().Short())
				}
			}
		})
	}
}

func hset(t *testing.T, raw *goredis.Client, key, field, value string) {
	t.Helper()
	if err := raw.HSet(t.Context(), key, field, value).Err(); err != nil {
		t.Fatal(err)
	}
}

// TestFollowKeepsOtherReplicasOutputsEncoded has a replica follow another
// one's output writes through a real redis-server: it copies each output
// as stored, decoding none, until a read asks for it, which decodes it
// once and finds exactly the writer's snapshot.
func TestFollowKeepsOtherReplicasOutputsEncoded(t *testing.T) {
	ctx := t.Context()
	server := testenv.StartRedis(t)
	writer := newStore(t, server, "follow:", "writer")
	follower := newStore(t, server, "follow:", "follower")
	mem := memory.New()
	wt := store.NewWriteThrough(mem, follower, store.WriteThroughOptions{})
	if _, err := wt.Load(ctx); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- wt.Run(runCtx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		wt.Close()
	}()

	want := storetest.Snap(t, 7, "out", 5)
	if err := writer.PutOutput(ctx, "east", "istio", want); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the writer's output copied", func() bool {
		all, err := mem.ListEncodedOutputs(ctx, "east")
		return err == nil && all["istio"] != nil && all["istio"].Version() == want.Version() && all["istio"].Hash() == want.Hash()
	})
	if n := redis.Decodes(follower); n != 0 {
		t.Errorf("copying the output decoded %d snapshots, want none", n)
	}
	got, err := wt.GetOutput(ctx, "east", "istio")
	if err != nil || got.Hash() != want.Hash() || got.Len() != want.Len() {
		t.Fatalf("GetOutput = %v, %v; want the writer's output", got, err)
	}
	if n := redis.Decodes(follower); n != 1 {
		t.Errorf("reading the copied output decoded %d snapshots, want 1", n)
	}
}
