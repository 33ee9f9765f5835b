package redis_test

import (
	"strings"
	"testing"
	"time"

	"github.com/meshrelay/meshrelay/core/store"
	"github.com/meshrelay/meshrelay/core/store/storetest"
	"github.com/meshrelay/meshrelay/internal/testenv"
)

// A Batch writes what the Store methods of the same name write, with the
// same rules (an older input is ignored) and the same change-feed events,
// even when Redis has forgotten the scripts; a write that fails its checks
// is reported and the others are still written.
func TestBatchWritesAsTheMethodsDo(t *testing.T) {
	ctx := t.Context()
	server := testenv.StartRedis(t)
	s := newStore(t, server, "b:", "filler")
	watcher := newStore(t, server, "b:", "watcher")
	events, err := watcher.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	raw := newRawClient(server)
	defer raw.Close()
	if err := raw.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	in, older, out := storetest.Snap(t, 2, "in", 3), storetest.Snap(t, 1, "older", 3), storetest.Snap(t, 4, "out", 2)
	seen := time.Unix(1700000000, 0).UTC()
	b := s.Batch()
	b.PutCluster(store.Cluster{Name: "east", Registered: seen, LastSeen: seen, Replica: "gone", Version: 1})
	b.PutInput("east", in)
	b.PutInput("east", older)
	b.PutOutput("east", "istio", out)
	b.PutOutput("", "istio", out)
	err = b.Exec(ctx)
	if err == nil || !strings.Contains(err.Error(), "empty cluster") {
		t.Fatalf("Exec() = %v, want the output without a cluster name refused", err)
	}

	c, err := s.GetCluster(ctx, "east")
	if err != nil || c.Replica != "gone" || !c.LastSeen.Equal(seen) || c.Version != 1 {
		t.Fatalf("GetCluster(east) = %+v, %v; want the record the batch wrote", c, err)
	}
	gotIn, err := s.GetInput(ctx, "east")
	if err != nil || gotIn.Version() != 2 || gotIn.Hash() != in.Hash() {
		t.Fatalf("GetInput(east) = %v, %v; want version 2 (the older write ignored)", gotIn, err)
	}
	inputs, err := s.ListInputs(ctx)
	if err != nil || len(inputs) != 1 {
		t.Fatalf("ListInputs() = %d inputs, %v; want east indexed", len(inputs), err)
	}
	gotOut, err := s.GetOutput(ctx, "east", "istio")
	if err != nil || gotOut.Version() != 4 || gotOut.Hash() != out.Hash() {
		t.Fatalf("GetOutput(east, istio) = %v, %v; want version 4", gotOut, err)
	}
	for _, kind := range []store.EventKind{store.EventCluster, store.EventInput, store.EventOutput} {
		waitFor(t, events, func(e store.Event) bool { return e.Kind == kind && e.Cluster == "east" && e.Replica == "filler" })
	}
}
