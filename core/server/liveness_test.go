package server

import (
	"fmt"
	"testing"
	"time"

	"github.com/meshrelay/meshrelay/core/agent"
	"github.com/meshrelay/meshrelay/core/store/memory"
	"github.com/meshrelay/meshrelay/internal/testutil"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
)

// messagesIn returns how many messages of each type the server received
// from agents.
func messagesIn(ts *testServer) map[string]float64 {
	n := map[string]float64{}
	for _, typ := range []string{"hello", "input", "ack", "heartbeat", "goodbye", "traffic", "unknown"} {
		if v := promtest.ToFloat64(ts.m.messages.WithLabelValues("in", typ)); v > 0 {
			n[typ] = v
		}
	}
	return n
}

// heartbeatsOut returns how many heartbeats the server sent.
func heartbeatsOut(ts *testServer) float64 {
	return promtest.ToFloat64(ts.m.messages.WithLabelValues("out", "heartbeat"))
}

// clusterLister returns a function that gives the status of a cluster
// as ts's admin API lists it, over one connection.
func clusterLister(t *testing.T, ts *testServer) func(name string) *relayv1.ClusterStatus {
	t.Helper()
	admin := relayv1.NewAdminClient(ts.dial(nil))
	return func(name string) *relayv1.ClusterStatus {
		t.Helper()
		cs, err := admin.ListClusters(ts.adminCtx(), &relayv1.ListClustersRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cs.GetClusters() {
			if c.GetName() == name {
				return c
			}
		}
		t.Fatalf("ListClusters has no cluster %q", name)
		return nil
	}
}

// An idle agent with the default options sends nothing on its stream,
// no heartbeat either, however many heartbeats the server sends it: the
// server finds a dead agent by its own heartbeats and keepalive.
func TestIdleAgentSendsNothing(t *testing.T) {
	// Longer than a minute of waiting would be; the server heartbeats
	// every second on the stream.
	const beats = 30
	ts := startServer(t, nil, "")
	east := startAgent(t, ts, "east", ts.register("east"), func(o *agent.Options) {
		*o = withDefaultTimings(*o)
		o.ServerTimeout = 3 * ts.opts.Heartbeat // the server heartbeats at a third of it
	})
	east.src.set(t, "a")
	testutil.Eventually(t, "east's outputs", func() bool { return len(east.sink.names()) == 1 })
	// The ack of the outputs may still be on its way: count from the
	// next heartbeat on.
	h0 := heartbeatsOut(ts)
	testutil.Eventually(t, "a server heartbeat", func() bool { return heartbeatsOut(ts) > h0 })
	in0, h0 := messagesIn(ts), heartbeatsOut(ts)
	testutil.EventuallyWhy(t, "the server's heartbeats", func() (bool, string) {
		n := heartbeatsOut(ts) - h0
		return n >= beats, fmt.Sprintf("%.0f heartbeats", n)
	})
	in := messagesIn(ts)
	for typ, n := range in {
		if n != in0[typ] {
			t.Errorf("the idle agent sent %.0f %s messages while the server sent %d heartbeats, want none", n-in0[typ], typ, beats)
		}
	}
	if c := clusterLister(t, ts)("east"); !c.GetConnected() {
		t.Errorf("east after %d heartbeats = %v, want connected", beats, c)
	}
}

// withDefaultTimings gives o the agent's default heartbeat and keepalive,
// which the test harness may shorten.
func withDefaultTimings(o agent.Options) agent.Options {
	d := agent.DefaultOptions()
	o.Heartbeat, o.Keepalive, o.KeepaliveTimeout, o.ServerTimeout = d.Heartbeat, d.Keepalive, d.KeepaliveTimeout, d.ServerTimeout
	return o
}

// An idle agent that sends nothing stays connected in every replica's
// view, well past the window in which a last-seen time counts as fresh
// (freshWindowHeartbeats): its open stream is its sign of life, recorded
// in the store each heartbeat.
func TestIdleAgentStaysSeenEverywhere(t *testing.T) {
	const heartbeat = 200 * time.Millisecond
	shared := memory.New()
	st := &countingStore{Store: shared.Replica("a")}
	a := startServer(t, st, "", withID("a"), func(o *Options) { o.Heartbeat = heartbeat })
	b := startServer(t, shared.Replica("b"), "", withID("b"), func(o *Options) { o.Heartbeat = heartbeat })
	east := startAgent(t, a, "east", a.register("east"), func(o *agent.Options) { *o = withDefaultTimings(*o) })
	east.src.set(t, "a")
	testutil.Eventually(t, "east's outputs", func() bool { return len(east.sink.names()) == 1 })
	inA, inB := clusterLister(t, a), clusterLister(t, b)
	testutil.Eventually(t, "replica b seeing east connected to a", func() bool {
		c := inB("east")
		return c.GetConnected() && c.GetReplica() == "a"
	})

	// Over ten fresh windows of a's last-seen writes, b sees east
	// connected to a at every look.
	const writes = 10 * freshWindowHeartbeats
	in0, p0 := messagesIn(a), st.puts.Load()
	testutil.EventuallyWhy(t, "a's last-seen writes", func() (bool, string) {
		if c := inB("east"); !c.GetConnected() || c.GetReplica() != "a" {
			t.Fatalf("replica b's view of the idle east = %v, want connected to a", c)
		}
		n := st.puts.Load() - p0
		return n >= writes, fmt.Sprintf("%d writes", n)
	})
	if in := messagesIn(a); in["heartbeat"] != in0["heartbeat"] {
		t.Errorf("east sent %.0f heartbeats, want none", in["heartbeat"]-in0["heartbeat"])
	}
	if c := inA("east"); !c.GetConnected() {
		t.Errorf("replica a's view of the idle east = %v, want connected", c)
	}
}
