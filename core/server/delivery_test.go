package server

import (
	"errors"
	"testing"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/engine"
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
	if _, ok := ts.Engine().Mark(engineKey("west")); !ok {
		t.Error("the engine holds no mark of west's output")
	}
}

// TestLateOutputOfAnAgentThatLeftIsNotStored: with connected targets, an
// output computed while a cluster's agent was here but delivered after it
// left is not written: the replica the agent went to computes the
// cluster's outputs now, and this older one must not overwrite theirs.
// Delivery hands it back to the engine (see engine.Engine.Advance), which
// hands it on again should the agent come back here first.
func TestLateOutputOfAnAgentThatLeftIsNotStored(t *testing.T) {
	ts := startServer(t, nil, "")
	in, err := snapshot.New(1, nil)
	if err != nil {
		t.Fatal(err)
	}
	ts.join("west", in, true)
	out, err := snapshot.New(1, []snapshot.Resource{configMapNamed(t, "late")})
	if err != nil {
		t.Fatal(err)
	}
	if ts.deliverOutput(t.Context(), engine.Output{Key: engineKey("west"), Snapshot: out}) {
		t.Error("delivery reports the late output written; the engine must have it back to hand on again")
	}
	if _, err := ts.store.GetOutput(t.Context(), "west", "test"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the late output of an agent that left was stored (err %v)", err)
	}
}

func configMapNamed(t *testing.T, name string) snapshot.Resource {
	r, err := snapshot.FromJSON([]byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"` + name + `","namespace":"default"}}`))
	if err != nil {
		t.Fatal(err)
	}
	return r
}
