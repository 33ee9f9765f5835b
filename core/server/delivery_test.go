package server

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/engine"
	"github.com/meshrelay/meshrelay/core/store"
	"github.com/meshrelay/meshrelay/core/store/memory"
	"github.com/meshrelay/meshrelay/internal/testutil"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
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
	ts.join("west", in.Hash(), true)
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

// TestStoredOutputReachesAnAgentThatMissedIt: another replica stored a
// cluster's output, then died before its agent got it. The agent comes
// here holding an older one. The stream cannot tell at its start that the
// stored copy is not older than the agent's, but once the engine's answer
// equals it, it is current and the agent gets it, though the engine hands
// nothing on (nothing changed since it was delivered).
func TestStoredOutputReachesAnAgentThatMissedIt(t *testing.T) {
	shared := memory.New()
	ts := startServer(t, shared.Replica("a"), "", withID("a"))
	ctx := t.Context()
	other := shared.Replica("b")
	token := ts.register("west")
	in := serviceInput(t, 3, "web")
	if err := other.PutInput(ctx, "west", in); err != nil {
		t.Fatal(err)
	}
	ts.handleStoreEvent(ctx, store.Event{Kind: store.EventInput, Cluster: "west", Replica: "b"})
	// What the echo translator answers for that input, stored by "b".
	cm, err := snapshot.FromJSON([]byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"web","namespace":"default"},"data":{"cluster":"west"}}`))
	if err != nil {
		t.Fatal(err)
	}
	stored, err := snapshot.New(5, []snapshot.Resource{cm})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.PutOutput(ctx, "west", "test", stored); err != nil {
		t.Fatal(err)
	}
	older, err := snapshot.New(4, []snapshot.Resource{configMapNamed(t, "older")})
	if err != nil {
		t.Fatal(err)
	}

	ih, oh := in.Hash(), older.Hash()
	stream := ts.sync(t, token, &relayv1.Hello{
		Cluster: "west", InputHash: ih[:], InputVersion: in.Version(),
		OutputHashes: map[string][]byte{"test": oh[:]}, OutputVersions: map[string]uint64{"test": older.Version()},
	})
	if d := firstOutput(t, stream, "test", "the stored output"); len(d.Upserts) != 1 || d.Upserts[0].Hash != cm.Hash {
		t.Fatalf("the agent got %+v, want the stored ConfigMap", d)
	}
}

// serviceInput is an input of the given version holding one Service of
// that name in namespace default.
func serviceInput(t *testing.T, version uint64, name string) *snapshot.Snapshot {
	t.Helper()
	svc, err := snapshot.FromJSON([]byte(`{"apiVersion":"v1","kind":"Service","metadata":{"name":"` + name + `","namespace":"default"}}`))
	if err != nil {
		t.Fatal(err)
	}
	in, err := snapshot.New(version, []snapshot.Resource{svc})
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// firstOutput reads stream up to the first output of backend and returns
// its delta; what is the output awaited, for the failure.
func firstOutput(t *testing.T, stream relayv1.Relay_SyncClient, backend, what string) snapshot.Delta {
	t.Helper()
	for {
		msg, err := stream.Recv()
		if err != nil {
			t.Fatalf("the stream ended before %s came: %v", what, err)
		}
		out := msg.GetOutput()
		if out.GetBackend() != backend {
			continue
		}
		d, err := snapshot.DeltaFromProto(out.GetDelta())
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
}

// TestAgentWithNewerInputIsTranslatedFromIt: an agent comes to a replica
// whose store holds an older input of its cluster than the agent's (the
// replica missed the write while cut off from Redis, or it is still on its
// way). Outputs computed from that older input would take the agent back,
// so the replica translates the cluster only once the agent's input is
// taken: the first output the agent gets is its newer input's. Whether a
// server acked the agent its input or the agent restarted and holds none
// acked, the replica cannot tell that the stored input is the agent's.
func TestAgentWithNewerInputIsTranslatedFromIt(t *testing.T) {
	newer := serviceInput(t, 5, "new")
	nh := newer.Hash()
	for name, hello := range map[string]*relayv1.Hello{
		"acked by another server":         {Cluster: "west", InputHash: nh[:], InputVersion: newer.Version()},
		"restarted, holding none acked":   {Cluster: "west"},
		"acked at the stored version too": {Cluster: "west", InputHash: nh[:], InputVersion: 3},
	} {
		t.Run(name, func(t *testing.T) {
			shared := memory.New()
			ts := startServer(t, shared.Replica("a"), "", withID("a"), func(o *Options) { o.Heartbeat = 200 * time.Millisecond })
			ctx := t.Context()
			token := ts.register("west")
			old := serviceInput(t, 3, "old")
			if err := ts.store.PutInput(ctx, "west", old); err != nil {
				t.Fatal(err)
			}
			ts.handleStoreEvent(ctx, store.Event{Kind: store.EventInput, Cluster: "west", Replica: "b"})

			stream := ts.sync(t, token, hello)
			sentInput := false
			for {
				msg, err := stream.Recv()
				if err != nil {
					t.Fatalf("the stream ended before an output came: %v", err)
				}
				if w := msg.GetWelcome(); w != nil && w.GetInputVersion() != old.Version() {
					t.Fatalf("welcome names input version %d, want the stored %d", w.GetInputVersion(), old.Version())
				}
				// The server's heartbeats show time passing with the
				// cluster known to the engine: an output from the older
				// input would have come by the first one.
				if msg.GetHeartbeat() != nil && !sentInput {
					if _, ok := ts.Engine().Mark(engineKey("west")); ok {
						t.Fatal("the engine translated west before the agent's input arrived")
					}
					sentInput = true
					full := snapshot.FullDelta(newer.WithVersion(6))
					if err := stream.Send(&relayv1.AgentMessage{Msg: &relayv1.AgentMessage_Input{Input: &relayv1.InputSnapshot{
						Delta: snapshot.DeltaToProto(full, false),
					}}}); err != nil {
						t.Fatal(err)
					}
				}
				out := msg.GetOutput()
				if out.GetBackend() != "test" {
					continue
				}
				d, err := snapshot.DeltaFromProto(out.GetDelta())
				if err != nil {
					t.Fatal(err)
				}
				var names []string
				for _, r := range d.Upserts {
					names = append(names, r.ID.Name)
				}
				if !sentInput || !slices.Equal(names, []string{"new"}) {
					t.Fatalf("the agent's first output holds %v (its input sent: %v), want the ConfigMap of its newer input only", names, sentInput)
				}
				return
			}
		})
	}
}

// TestRestartedAgentGetsOutputsItsInputLeftAsTheyWere: an agent restarted
// without its state holds no acked input and no outputs. The replica
// waits for its input before it translates the cluster; that input is
// the one the store holds, so no output changes, and the agent must get
// the stored outputs all the same. With --targets all the engine kept
// computing the cluster meanwhile and hands nothing on when the input
// comes.
func TestRestartedAgentGetsOutputsItsInputLeftAsTheyWere(t *testing.T) {
	for _, targets := range []string{TargetsConnected, TargetsAll} {
		t.Run(targets, func(t *testing.T) {
			shared := memory.New()
			ts := startServer(t, shared.Replica("a"), "", withID("a"), func(o *Options) {
				o.Heartbeat, o.Targets = 200*time.Millisecond, targets
			})
			ctx := t.Context()
			token := ts.register("west")
			in := serviceInput(t, 3, "web")
			if err := ts.store.PutInput(ctx, "west", in); err != nil {
				t.Fatal(err)
			}
			ts.handleStoreEvent(ctx, store.Event{Kind: store.EventInput, Cluster: "west", Replica: "b"})
			if targets == TargetsAll {
				testutil.Eventually(t, "west's output computed before its agent comes", func() bool {
					_, ok := ts.Engine().Mark(engineKey("west"))
					return ok
				})
			}

			stream := ts.sync(t, token, &relayv1.Hello{Cluster: "west"})
			same := snapshot.Diff(in, in.WithVersion(4)) // what a restarted agent sends when the welcome names its input
			if err := stream.Send(&relayv1.AgentMessage{Msg: &relayv1.AgentMessage_Input{Input: &relayv1.InputSnapshot{
				Delta: snapshot.DeltaToProto(same, false),
			}}}); err != nil {
				t.Fatal(err)
			}
			if d := firstOutput(t, stream, "test", "west's output"); len(d.Upserts) != 1 || d.Upserts[0].ID.Name != "web" {
				t.Fatalf("the agent got %+v, want the output of west's input", d)
			}
		})
	}
}

// sync opens a Sync stream as the agent of hello's cluster, with the
// certificate its token gets, and sends hello. The stream ends with the
// test, or after a minute.
func (ts *testServer) sync(t *testing.T, token string, hello *relayv1.Hello) relayv1.Relay_SyncClient {
	t.Helper()
	cert, err := ts.certificate(hello.GetCluster(), token)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	stream, err := relayv1.NewRelayClient(ts.dial(cert)).Sync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&relayv1.AgentMessage{Msg: &relayv1.AgentMessage_Hello{Hello: hello}}); err != nil {
		t.Fatal(err)
	}
	return stream
}
