package server

import (
	"math"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/meshrelay/meshrelay/core/store/memory"
	"github.com/meshrelay/meshrelay/core/traffic"
	"github.com/meshrelay/meshrelay/internal/testutil"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
)

// freeAddrs returns n loopback addresses free when asked, for replicas
// that must know their address before they listen.
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, l.Addr().String())
		l.Close()
	}
	return out
}

// sendTraffic opens cluster's stream to ts and sends one window in which
// the cluster's workload shop/checkout called shop/payments requests
// times, errors of them failing.
func sendTraffic(t *testing.T, ts *testServer, cluster string, requests, errors uint64) {
	t.Helper()
	stream := ts.sync(t, ts.register(cluster), &relayv1.Hello{Cluster: cluster})
	var st traffic.Stats
	st.Codes[traffic.ClassGRPCOK] = requests - errors
	st.Codes[traffic.ClassGRPCServerError] = errors
	st.Latency[traffic.Bucket(5)] = requests
	st.LatencySumMS = 5 * float64(requests)
	edge := traffic.Edge{SourceWorkload: "shop/checkout", DestinationCluster: cluster, DestinationService: "shop/payments", Protocol: "grpc"}
	w := (&traffic.Encoder{MaxBytes: 64 << 10, MaxNames: 16}).Encode(1, time.Now(), 10*time.Second, map[traffic.Edge]*traffic.Stats{edge: &st}, nil)
	if err := stream.Send(&relayv1.AgentMessage{Msg: &relayv1.AgentMessage_Traffic{Traffic: w}}); err != nil {
		t.Fatal(err)
	}
}

// Each replica answers for the whole fleet's traffic: it asks the other
// replicas that announce an address for their own edges and merges them
// into its answer, and a policy's before-and-after counts come from every
// replica too. A replica that announces no address, or stops answering,
// is named in the answer as missing; the rest of the answer stands.
func TestTrafficFromEveryReplica(t *testing.T) {
	shared := memory.New()
	dir := t.TempDir() // one admin token for the installation
	addrs := freeAddrs(t, 2)
	replica := func(id, addr string, advertise bool) *testServer {
		return startServer(t, shared.Replica(id), dir, func(o *Options) {
			o.ServerID, o.ListenAddr, o.RebalanceInterval = id, addr, time.Second
			if advertise {
				o.AdvertiseAddr = addr
			}
		})
	}
	r1 := replica("r1", addrs[0], true)
	r2 := replica("r2", addrs[1], true)
	r3 := replica("r3", "127.0.0.1:0", false)
	sendTraffic(t, r1, "east", 100, 10)
	sendTraffic(t, r2, "west", 50, 0)
	sendTraffic(t, r3, "north", 7, 7)

	clients := map[*testServer]relayv1.TrafficClient{}
	for _, ts := range []*testServer{r1, r2, r3} {
		clients[ts] = relayv1.NewTrafficClient(ts.dial(nil))
	}
	edges := func(ts *testServer, req *relayv1.ListEdgesRequest) (map[string]*relayv1.Edge, *relayv1.ListEdgesResponse) {
		resp, err := clients[ts].ListEdges(ts.adminCtx(), req)
		if err != nil {
			t.Fatalf("%s: ListEdges: %v", ts.opts.ServerID, err)
		}
		out := map[string]*relayv1.Edge{}
		for _, e := range resp.GetEdges() {
			out[e.GetSourceCluster()] = e
		}
		return out, resp
	}
	for _, ts := range []*testServer{r1, r2} {
		testutil.EventuallyWhy(t, ts.opts.ServerID+" answers with east's and west's edges, north's replica missing", func() (bool, string) {
			got, resp := edges(ts, &relayv1.ListEdgesRequest{})
			ok := len(got) == 2 && got["east"].GetRequests() == 100 && got["west"].GetRequests() == 50 &&
				len(resp.GetMissing()) == 1 && strings.HasPrefix(resp.GetMissing()[0], "r3: no --advertise-addr")
			return ok, resp.String()
		})
	}
	got, resp := edges(r1, &relayv1.ListEdgesRequest{})
	if e := got["east"]; math.Abs(e.GetErrorRate()-0.1) > 1e-9 || e.GetCodes()["grpc_server_error"] != 10 {
		t.Errorf("east's edge through r1 = %v, want an error rate of 0.1 with 10 server errors", e)
	}
	if resp.GetServerId() != "r1,r2" {
		t.Errorf("r1's answer holds the edges of %q, want r1,r2", resp.GetServerId())
	}
	// Asked for its own, a replica answers alone: what a peer is asked.
	if own, resp := edges(r1, &relayv1.ListEdgesRequest{Local: true}); len(own) != 1 || own["east"] == nil || len(resp.GetMissing()) != 0 {
		t.Errorf("r1's own edges = %v (missing %v), want east's alone", own, resp.GetMissing())
	}
	// The replica that announces no address still asks the others, once
	// it has read them from the store and taken north's window.
	testutil.EventuallyWhy(t, "r3 answers with the edges of all three clusters", func() (bool, string) {
		got, resp := edges(r3, &relayv1.ListEdgesRequest{})
		return len(got) == 3, resp.String()
	})
	// Filters reach the peers.
	if got, _ := edges(r1, &relayv1.ListEdgesRequest{Cluster: "west"}); len(got) != 1 || got["west"] == nil {
		t.Errorf("r1's edges of west = %v, want west's alone", got)
	}

	// A peer that stops answering is named; the others' edges stand.
	r2.Stop()
	got, resp = edges(r1, &relayv1.ListEdgesRequest{})
	if len(got) != 1 || got["east"] == nil || !strings.Contains(strings.Join(resp.GetMissing(), "\n"), "r2 ("+addrs[1]+"): unavailable") {
		t.Errorf("with r2 stopped, r1 answers %v, missing %q; want east's edge and r2 named unavailable", got, resp.GetMissing())
	}
}

// Two replicas' answers merge: an edge both saw (its agent moved) sums
// its counts and keeps the higher percentiles; the others pass through.
func TestMergeEdges(t *testing.T) {
	minute := func(m int64, req, errs uint64) *relayv1.EdgeMinute {
		return &relayv1.EdgeMinute{UnixMinute: m, Requests: req, Errors: errs}
	}
	moved := func(req, errs uint64, p99 float64, minutes ...*relayv1.EdgeMinute) *relayv1.Edge {
		return &relayv1.Edge{SourceCluster: "east", SourceWorkload: "shop/checkout", DestinationCluster: "east", DestinationService: "shop/payments", Protocol: "grpc",
			Requests: req, Errors: errs, Rps: float64(req) / 60, P99Ms: p99, Codes: map[string]uint64{"grpc_ok": req - errs, "grpc_server_error": errs}, Minutes: minutes}
	}
	other := &relayv1.Edge{SourceCluster: "west", SourceWorkload: "bookinfo/reviews", DestinationCluster: "west", DestinationService: "bookinfo/ratings", Protocol: "http", Requests: 7}
	a := &relayv1.ListEdgesResponse{ServerId: "r1", Edges: []*relayv1.Edge{moved(60, 6, 40, minute(10, 60, 6))}}
	b := &relayv1.ListEdgesResponse{ServerId: "r2", Edges: []*relayv1.Edge{moved(120, 0, 25, minute(10, 20, 0), minute(11, 100, 0)), other}}

	got := MergeEdges([]*relayv1.ListEdgesResponse{a, b})
	if got.GetServerId() != "r1,r2" || len(got.GetEdges()) != 2 {
		t.Fatalf("merged %d edges from %q, want 2 from r1,r2", len(got.GetEdges()), got.GetServerId())
	}
	e := got.GetEdges()[0]
	if e.GetRequests() != 180 || e.GetErrors() != 6 || e.GetRps() != 3 || e.GetP99Ms() != 40 || math.Abs(e.GetErrorRate()-6.0/180) > 1e-9 {
		t.Errorf("moved edge = %d requests, %d errors, %.2f rps, p99 %.0f ms, error rate %.4f; want 180, 6, 3.00, 40, %.4f",
			e.GetRequests(), e.GetErrors(), e.GetRps(), e.GetP99Ms(), e.GetErrorRate(), 6.0/180)
	}
	if e.GetCodes()["grpc_ok"] != 174 || e.GetCodes()["grpc_server_error"] != 6 {
		t.Errorf("moved edge's codes = %v, want 174 ok and 6 server errors", e.GetCodes())
	}
	if m := e.GetMinutes(); len(m) != 2 || m[0].GetRequests() != 80 || m[0].GetErrors() != 6 || m[1].GetRequests() != 100 {
		t.Errorf("moved edge's minutes = %v, want minute 10 with 80 (6 errors) and minute 11 with 100", m)
	}
	if a.GetEdges()[0].GetRequests() != 60 {
		t.Error("merging changed the first replica's answer")
	}
	if got.GetEdges()[1].GetRequests() != 7 {
		t.Errorf("the edge only r2 saw has %d requests, want 7", got.GetEdges()[1].GetRequests())
	}
}

// --advertise-addr must be host:port: peers dial it as it is.
func TestAdvertiseAddrIsHostPort(t *testing.T) {
	for addr, ok := range map[string]bool{
		"":                   true,
		"10.0.0.1:9900":      true,
		"[fd00::1]:9900":     true,
		"meshrelay-0.x:9900": true,
		"10.0.0.1":           false,
		":9900":              false,
		"10.0.0.1:":          false,
		"fd00::1:9900":       false,
	} {
		o := DefaultOptions()
		o.AdvertiseAddr = addr
		if err := o.Validate(); (err == nil) != ok {
			t.Errorf("Validate with --advertise-addr %q: %v, want ok %v", addr, err, ok)
		}
	}
}
