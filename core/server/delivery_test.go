package server

import (
	"testing"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/store"
	"github.com/meshrelay/meshrelay/core/store/memory"
	"github.com/meshrelay/meshrelay/internal/testutil"
)

// TestOutputsReachTheStoreWithoutTheirAgent: the delivery step writes every
// output the engine computed to the store, also for a cluster whose agent
// is connected to no stream here (its input came from another replica).
func TestOutputsReachTheStoreWithoutTheirAgent(t *testing.T) {
	shared := memory.New()
	ts := startServer(t, shared.Replica("a"), "", withID("a"), func(o *Options) { o.Targets = TargetsAll })
	ctx := t.Context()
	other := shared.Replica("b")
	if _, err := store.UpdateCluster(ctx, other, "west", func(*store.Cluster, bool) error { return nil }); err != nil {
		t.Fatal(err)
	}
	svc, err := snapshot.FromJSON([]byte(`{"apiVersion":"v1","kind":"Service","metadata":{"name":"web","namespace":"default"}}`))
	if err != nil {
		t.Fatal(err)
	}
	in, err := snapshot.New(1, []snapshot.Resource{svc})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.PutInput(ctx, "west", in); err != nil {
		t.Fatal(err)
	}
	// The write's event, delivered here: the server's watch may subscribe
	// after the write.
	ts.handleStoreEvent(ctx, store.Event{Kind: store.EventInput, Cluster: "west", Replica: "b"})
	testutil.Eventually(t, "west's output in the store", func() bool {
		out, err := other.GetOutput(ctx, "west", "test")
		return err == nil && out.Len() == 1
	})
	if _, ok := ts.Engine().Output(engineKey("west")); !ok {
		t.Error("the engine holds no output for west")
	}
}
