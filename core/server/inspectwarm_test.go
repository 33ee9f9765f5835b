package server

import (
	"fmt"
	"testing"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/engine"
	"github.com/meshrelay/meshrelay/core/store"
	"github.com/meshrelay/meshrelay/core/store/memory"
	"github.com/meshrelay/meshrelay/internal/testutil"
)

// putServiceInput stores an input of one Service for cluster, as its
// agent's stream would, and tells the server.
func putServiceInput(t *testing.T, ts *testServer, st store.Store, cluster, service string) {
	t.Helper()
	ctx := t.Context()
	if _, err := store.UpdateCluster(ctx, st, cluster, func(*store.Cluster, bool) error { return nil }); err != nil {
		t.Fatal(err)
	}
	svc, err := snapshot.FromJSON(fmt.Appendf(nil, `{"apiVersion":"v1","kind":"Service","metadata":{"name":%q,"namespace":"default"},"spec":{"ports":[{"port":80}]}}`, service))
	if err != nil {
		t.Fatal(err)
	}
	in, err := snapshot.New(1, []snapshot.Resource{svc})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.PutInput(ctx, cluster, in); err != nil {
		t.Fatal(err)
	}
	ts.handleStoreEvent(ctx, store.Event{Kind: store.EventInput, Cluster: cluster, Replica: "b"})
}

// The discovery objects are derived as inputs arrive, not when someone
// first lists them: at a thousand clusters deriving them all takes
// seconds, which the first List would wait.
func TestCatalogDerivedBeforeAnyList(t *testing.T) {
	shared := memory.New()
	ts := startServer(t, shared.Replica("a"), "", withID("a"), func(o *Options) { o.Targets = TargetsAll })
	other := shared.Replica("b")
	for _, c := range []string{"east", "west"} {
		putServiceInput(t, ts, other, c, "web")
	}
	testutil.Eventually(t, "both clusters' discovery objects derived", func() bool { return ts.catalog.Derived() == 2 })
}

// Delivery indexes each output it writes, so that the status and the
// descriptions that follow find it decoded.
func TestDeliveredOutputsAreIndexed(t *testing.T) {
	shared := memory.New()
	ts := startServer(t, shared.Replica("a"), "", withID("a"), func(o *Options) { o.Targets = TargetsAll })
	other := shared.Replica("b")
	putServiceInput(t, ts, other, "west", "web")
	testutil.Eventually(t, "west's output indexed as delivered", func() bool {
		out, err := other.GetOutput(t.Context(), "west", "test")
		if err != nil {
			return false
		}
		ts.outputIndex.mu.Lock()
		defer ts.outputIndex.mu.Unlock()
		o := ts.outputIndex.outputs[engine.OutputKey{Cluster: "west", Backend: "test"}]
		return o != nil && o.set.Hash() == out.Hash() && len(o.resources) == 1
	})
}
