package redis_test

import (
	"fmt"
	"maps"
	"testing"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/store"
	"github.com/meshrelay/meshrelay/core/store/memory"
	"github.com/meshrelay/meshrelay/core/store/storetest"
	"github.com/meshrelay/meshrelay/internal/testenv"
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

	got, err := s.ListOutputsOf(ctx, clusters)
	if err != nil {
		t.Fatalf("ListOutputsOf: %v", err)
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
