package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/internal/testutil"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// dialH2 opens a raw HTTP/2 connection, with a client certificate when
// given, for attacks a gRPC client would not make.
func (ts *testServer) dialH2(t *testing.T, cert *tls.Certificate) *h2conn {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ts.CABundle())
	cfg := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS13}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	tc, err := tls.Dial("tcp", ts.Addr(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tc.Close() })
	h := &h2conn{c: tc, conn: 65535, init: 65535, stream: map[uint32]int64{}, closed: map[uint32]bool{}}
	h.cond = sync.NewCond(&h.mu)
	if _, err := tc.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	h.frame(4, 0, 0, nil)
	go h.read()
	return h
}

// hold opens n streams calling path, each sending a message that
// announces size bytes and leaves its last byte unsent.
func (h *h2conn) hold(authority, path string, first uint32, n, size int) {
	for i := range n {
		id := first + uint32(2*i)
		h.mu.Lock()
		h.stream[id] = h.init
		h.mu.Unlock()
		h.frame(1, 4, id, callHeaders(authority, path))
		go h.sendMessage(id, size)
	}
}

// callHeaders encodes a call's request headers as HPACK literals.
func callHeaders(authority, path string) []byte {
	var b []byte
	for _, kv := range [][2]string{{":method", "POST"}, {":scheme", "https"}, {":path", path},
		{":authority", authority}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		b = append(b, 0, byte(len(kv[0])))
		b = append(b, kv[0]...)
		b = append(b, byte(len(kv[1])))
		b = append(b, kv[1]...)
	}
	return b
}

// closedByServer reports whether the server closed the connection.
func (h *h2conn) closedByServer() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err != nil
}

// heapPeak samples the heap in use until stop is called and returns its
// growth over what it was at the start.
func heapPeak() (stop func() uint64) {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	base, peak := ms.HeapInuse, ms.HeapInuse
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	})
	return func() uint64 {
		close(done)
		wg.Wait()
		return peak - base
	}
}

// heapBound is what the attacks below may make the server's heap grow by:
// far below what they announce (128 MiB or more).
const heapBound = 48 << 20

// Unfinished messages cost a peer at most its own budgets: a message over
// its method's limit, or over what one connection or one cluster may hold
// unfinished, closes the connection before the server holds it.
func TestUnfinishedMessagesAreBounded(t *testing.T) {
	ts := startServer(t, nil, "")
	cert, err := ts.certificate("evil", ts.register("evil"))
	if err != nil {
		t.Fatal(err)
	}
	attack := func(t *testing.T, h *h2conn, path string, n, size int) {
		t.Helper()
		stop := heapPeak()
		h.hold(ts.Addr(), path, 1, n, size)
		testutil.Eventually(t, "the attacker's connection closed", h.closedByServer)
		if grew := stop(); grew > heapBound {
			t.Errorf("heap grew by %d MiB during the attack, want at most %d MiB", grew>>20, heapBound>>20)
		}
	}
	t.Run("Renew over its limit", func(t *testing.T) {
		attack(t, ts.dialH2(t, cert), relayv1.Registration_Renew_FullMethodName, 8, 16<<20)
	})
	t.Run("Sync messages over the connection's budget", func(t *testing.T) {
		attack(t, ts.dialH2(t, cert), relayv1.Relay_Sync_FullMethodName, 2, 15<<20)
	})
	t.Run("Sync messages over the cluster's budget", func(t *testing.T) {
		// Two connections, as a cluster's streams waiting for their Hello
		// take two slots at most: a third stream could be refused its slot
		// before its message counts against the budget.
		ts := startServer(t, nil, "", func(o *Options) { o.MaxClusterBytesInFlight = 20 << 20 })
		cert, err := ts.certificate("evil", ts.register("evil"))
		if err != nil {
			t.Fatal(err)
		}
		stop := heapPeak()
		var conns []*h2conn
		for range 2 {
			h := ts.dialH2(t, cert)
			h.hold(ts.Addr(), relayv1.Relay_Sync_FullMethodName, 1, 1, 15<<20)
			conns = append(conns, h)
		}
		testutil.Eventually(t, "one of the cluster's connections closed", func() bool {
			for _, h := range conns {
				if h.closedByServer() {
					return true
				}
			}
			return false
		})
		if grew := stop(); grew > heapBound {
			t.Errorf("heap grew by %d MiB during the attack, want at most %d MiB", grew>>20, heapBound>>20)
		}
		if got := testutilCounter(t, ts, "meshrelay_relay_connection_refusals_total"); got < 1 {
			t.Errorf("meshrelay_relay_connection_refusals_total = %v, want at least 1", got)
		}
	})
	if got := testutilCounter(t, ts, "meshrelay_relay_connection_refusals_total"); got < 2 {
		t.Errorf("meshrelay_relay_connection_refusals_total = %v, want at least 2", got)
	}
	t.Run("--mode tls, Register without credentials", func(t *testing.T) {
		ts := startServer(t, nil, "", func(o *Options) { o.Mode = ModeTLS })
		stop := heapPeak()
		var conns []*h2conn
		for range 2 {
			h := ts.dialH2(t, nil)
			h.hold(ts.Addr(), relayv1.Registration_Register_FullMethodName, 1, 8, 8<<20)
			conns = append(conns, h)
		}
		for _, h := range conns {
			testutil.Eventually(t, "the attacker's connection closed", h.closedByServer)
		}
		if grew := stop(); grew > heapBound {
			t.Errorf("heap grew by %d MiB during the attack, want at most %d MiB", grew>>20, heapBound>>20)
		}
	})
}

// One cluster's streams without a Hello take only that cluster's slots: a
// legitimate agent is welcomed while they are held.
func TestHelloSlotsPerCluster(t *testing.T) {
	ts := startServer(t, nil, "", func(o *Options) { o.HelloTimeout = time.Minute })
	evil, err := ts.certificate("evil", ts.register("evil"))
	if err != nil {
		t.Fatal(err)
	}
	good, err := ts.certificate("good", ts.register("good"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	conn := ts.dial(evil)
	for range 70 {
		if _, err := relayv1.NewRelayClient(conn).Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, "the attacker's extra streams refused", func() bool {
		return testutilCounter(t, ts, "meshrelay_relay_connection_refusals_total") >= 6
	})
	_, first, err := syncWith(t, ts, good, &relayv1.Hello{Cluster: "good"})
	if err != nil || first.GetWelcome() == nil {
		t.Fatalf("a legitimate agent's Sync while another cluster holds 70 streams without a Hello = %v, %v; want a Welcome", first, err)
	}
}

// In --mode tls, streams without a token waiting for their Hello take
// their address's slots, not those of agents that send the token only in
// the Hello.
func TestAnonymousHelloSlotsPerAddress(t *testing.T) {
	ts := startServer(t, nil, "", func(o *Options) { o.Mode, o.HelloTimeout = ModeTLS, time.Minute })
	tok := ts.register("east")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	attacker := ts.dialFrom("127.0.0.2")
	for range 4 {
		if _, err := relayv1.NewRelayClient(attacker).Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, "four anonymous streams waiting", func() bool { return len(ts.unauthHellos) == 4 })
	_, first, err := syncWith(t, ts, nil, &relayv1.Hello{Cluster: "east", Token: tok})
	if err != nil || first.GetWelcome() == nil {
		t.Fatalf("an agent with its token in the Hello while 4 anonymous streams wait = %v, %v; want a Welcome", first, err)
	}
}

// One cluster's certificate cannot take the connections others need: an
// agent of another cluster, an administrator and a registration all get
// through while it holds as many as it can.
func TestConnectionsPerCluster(t *testing.T) {
	ts := startServer(t, nil, "", func(o *Options) { o.MaxConnections = 40 })
	evil, err := ts.certificate("evil", ts.register("evil"))
	if err != nil {
		t.Fatal(err)
	}
	good, err := ts.certificate("good", ts.register("good"))
	if err != nil {
		t.Fatal(err)
	}
	newTok := ts.register("new")
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ts.CABundle())
	for range 40 {
		tc, err := tls.Dial("tcp", ts.Addr(), &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", NextProtos: []string{"h2"},
			MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{*evil}})
		if err != nil {
			continue
		}
		defer tc.Close()
	}
	testutil.EventuallyWhy(t, "an agent, an administrator and a registration served", func() (bool, string) {
		if _, err := relayv1.NewAdminClient(ts.dial(nil)).ListClusters(ts.adminCtx(), &relayv1.ListClustersRequest{}); err != nil {
			return false, "ListClusters: " + err.Error()
		}
		if err := registerOn(ts.dial(nil), "new", newTok); err != nil && status.Code(err) != codes.Unauthenticated {
			return false, "Register: " + err.Error()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		stream, err := relayv1.NewRelayClient(ts.dial(good)).Sync(ctx)
		if err == nil {
			err = stream.Send(&relayv1.AgentMessage{Msg: &relayv1.AgentMessage_Hello{Hello: &relayv1.Hello{Cluster: "good"}}})
		}
		if err == nil {
			var m *relayv1.ServerMessage
			if m, err = stream.Recv(); err == nil && m.GetWelcome() == nil {
				err = errors.New("no Welcome")
			}
		}
		if err != nil {
			return false, "Sync: " + err.Error()
		}
		return true, ""
	})
}

// In --mode tls a connection gets an agent's limits once its token is
// checked: an input larger than an unauthenticated peer's limit is read
// and acked, whether the token came in the headers or in the Hello.
func TestTokenLiftsLimitsInTLSMode(t *testing.T) {
	ts := startServer(t, nil, "", func(o *Options) { o.Mode = ModeTLS })
	tok := ts.register("east")
	r, err := snapshot.NewResource(snapshot.ID{Version: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "big"},
		[]byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"big","namespace":"ns"},"data":{"x":"`+strings.Repeat("x", 512<<10)+`"}}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, inHeaders := range []bool{true, false} {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		if inHeaders {
			ctx = metadata.AppendToOutgoingContext(ctx, "x-meshrelay-cluster", "east", "x-meshrelay-token", tok)
		}
		stream, err := relayv1.NewRelayClient(ts.dial(nil)).Sync(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&relayv1.AgentMessage{Msg: &relayv1.AgentMessage_Hello{Hello: &relayv1.Hello{Cluster: "east", Token: tok}}}); err != nil {
			t.Fatal(err)
		}
		if m, err := stream.Recv(); err != nil || m.GetWelcome() == nil {
			t.Fatalf("Sync (token in headers %v) = %v, %v; want a Welcome", inHeaders, m, err)
		}
		d := snapshot.Delta{Full: true, Version: 1, Upserts: []snapshot.Resource{r}}
		if err := stream.Send(&relayv1.AgentMessage{Msg: &relayv1.AgentMessage_Input{Input: &relayv1.InputSnapshot{Delta: snapshot.DeltaToProto(d, false)}}}); err != nil {
			t.Fatal(err)
		}
		for {
			m, err := stream.Recv()
			if err != nil {
				t.Fatalf("a 512 KiB input (token in headers %v): stream ended with %v, want an ack", inHeaders, err)
			}
			if a := m.GetAck(); a != nil && a.GetSubject() == relayv1.Ack_SUBJECT_INPUT {
				if a.GetNack() {
					t.Fatalf("a 512 KiB input (token in headers %v) nacked: %s", inHeaders, a.GetError())
				}
				break
			}
		}
		cancel()
	}
}
