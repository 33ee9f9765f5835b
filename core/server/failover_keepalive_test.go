package server

import (
	"fmt"
	"testing"
	"time"

	"github.com/meshrelay/meshrelay/core/agent"
	"github.com/meshrelay/meshrelay/internal/tcpproxy"
	"github.com/meshrelay/meshrelay/internal/testutil"
)

// TestAgentLeavesASilentNetworkAtItsKeepalive: the network to the agent's
// server loses every packet without closing the connection (the server's
// node lost). The agent's HTTP/2 keepalive finds it and the agent moves
// to its next server address well before its --server-timeout.
func TestAgentLeavesASilentNetworkAtItsKeepalive(t *testing.T) {
	ts := startServer(t, nil, "")
	p, err := tcpproxy.Start(ts.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	a := startAgent(t, ts, "west", ts.register("west"), func(o *agent.Options) {
		o.Server = p.Addr() + "," + ts.Addr()
		o.ServerTimeout = time.Hour
		o.Keepalive, o.KeepaliveTimeout = 10*time.Second, time.Second
	})
	testutil.Eventually(t, "the agent connected through the proxy", func() bool { return a.Stats.Connects.Load() == 1 })
	p.Stall()
	testutil.EventuallyWhy(t, "the agent on its next server", func() (bool, string) {
		n := a.Stats.Connects.Load()
		return n >= 2, fmt.Sprintf("%d connects", n)
	})
}

// TestServerFindsAgentWhoseNetworkDied: the network to an idle agent loses
// every packet without closing the connection (the agent's node lost),
// through a proxy that acknowledges what the server sends. The agent sends
// no heartbeat, so the server's keepalive ping goes unanswered and the
// server closes the connection within --keepalive and
// --keepalive-timeout: the cluster shows disconnected before the agent,
// which pings more slowly, has left. Then the agent finds the dead server
// by its own keepalive and connects again at its next address.
func TestServerFindsAgentWhoseNetworkDied(t *testing.T) {
	ts := startServer(t, nil, "", func(o *Options) {
		o.Heartbeat = 100 * time.Millisecond
		o.Keepalive, o.KeepaliveTimeout = time.Second, time.Second
	})
	p, err := tcpproxy.Start(ts.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	west := startAgent(t, ts, "west", ts.register("west"), func(o *agent.Options) {
		*o = withDefaultTimings(*o)
		o.Server = p.Addr() + "," + ts.Addr()
		o.ServerTimeout = time.Hour
		// gRPC's shortest: the agent finds the dead server well after
		// the server found the dead agent.
		o.Keepalive, o.KeepaliveTimeout = 10*time.Second, time.Second
	})
	west.src.set(t, "a")
	testutil.Eventually(t, "west's outputs through the proxy", func() bool { return len(west.sink.names()) == 1 })

	status := clusterLister(t, ts)
	p.Stall()
	testutil.EventuallyWhy(t, "the server finding west gone", func() (bool, string) {
		if n := west.Stats.Connects.Load(); n != 1 {
			t.Fatalf("west connected %d times before the server found its first connection dead", n)
		}
		c := status("west")
		return !c.GetConnected(), fmt.Sprintf("west %v", c)
	})
	testutil.EventuallyWhy(t, "west back on the server's own address", func() (bool, string) {
		c := status("west")
		return west.Stats.Connects.Load() == 2 && c.GetConnected(), fmt.Sprintf("%d connects, west %v", west.Stats.Connects.Load(), c)
	})
}
