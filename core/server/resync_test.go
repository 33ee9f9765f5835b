package server

import (
	"testing"

	"github.com/meshrelay/meshrelay/core/store"
	"github.com/meshrelay/meshrelay/core/store/memory"
	"github.com/meshrelay/meshrelay/core/store/storetest"
)

// TestResyncOfOwnFeedReloads stores another cluster's input without an
// event reaching the server, as when the server's store was cut off from
// Redis while another replica wrote it, then delivers the resync the store
// announces once its feed is back, with this replica's own ID: the server
// must reload the input, not skip the resync as one of its own writes.
func TestResyncOfOwnFeedReloads(t *testing.T) {
	shared := memory.New()
	ts := startServer(t, shared.Replica("a"), "", func(o *Options) { o.ServerID = "a" })
	ctx := t.Context()
	// Written through a store of the same replica ID: no event reaches the
	// server, as none did while its feed was down.
	own := shared.Replica("a")
	if _, err := store.UpdateCluster(ctx, own, "east", func(*store.Cluster, bool) error { return nil }); err != nil {
		t.Fatal(err)
	}
	want := storetest.Snap(t, 7, "east", 3)
	if err := own.PutInput(ctx, "east", want); err != nil {
		t.Fatal(err)
	}
	if hasInput(ts, "east") {
		t.Fatal("the server saw the input before the resync; the test no longer models a missed event")
	}
	ts.handleStoreEvent(ctx, store.Event{Kind: store.EventResync, Replica: "a"})
	if !hasInput(ts, "east") {
		t.Fatal("after its store's own resync the server did not reload east's input")
	}
}

func hasInput(ts *testServer, cluster string) bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	_, ok := ts.fleet[cluster]
	return ok
}
