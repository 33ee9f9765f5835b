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
