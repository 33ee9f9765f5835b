package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/pki"
	"github.com/meshrelay/meshrelay/core/store"
	"github.com/meshrelay/meshrelay/core/store/memory"
	"github.com/meshrelay/meshrelay/internal/testenv"
	"github.com/meshrelay/meshrelay/internal/testutil"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	snapshotv1 "github.com/meshrelay/meshrelay/proto/snapshot/v1"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// A client without a certificate cannot make the server read large
// messages, hold streams open without a Hello, or open unbounded
// connections.
func TestUnauthenticatedPeerIsBounded(t *testing.T) {
	t.Run("large message before authentication", func(t *testing.T) {
		ts := startServer(t, nil, "")
		tok := ts.register("east")
		big := bytes.Repeat([]byte{'x'}, 1<<20)
		_, err := relayv1.NewRegistrationClient(ts.dial(nil)).Register(context.Background(), &relayv1.RegisterRequest{Cluster: "east", Token: tok, Csr: big})
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("a 1 MiB Register from a peer without a certificate = %v, want ResourceExhausted", err)
		}
		// Sync is refused before its first message is read.
		stream, err := relayv1.NewRelayClient(ts.dial(nil)).Sync(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		_ = stream.Send(&relayv1.AgentMessage{Msg: &relayv1.AgentMessage_Hello{Hello: &relayv1.Hello{Cluster: "east", Token: string(big)}}})
		if _, err = stream.Recv(); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("Sync without a certificate with a 1 MiB Hello = %v, want Unauthenticated", err)
		}
	})
	t.Run("token in the headers checked before reading, --mode tls", func(t *testing.T) {
		ts := startServer(t, nil, "", func(o *Options) { o.Mode = ModeTLS })
		tok := ts.register("east")
		ctx := metadata.AppendToOutgoingContext(context.Background(), "x-meshrelay-cluster", "east", "x-meshrelay-token", "mrt_wrong")
		stream, err := relayv1.NewRelayClient(ts.dial(nil)).Sync(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// The Hello carries the right token: a server that read it before
		// checking the headers would take the stream. (A Hello over the
		// anonymous limit would race the gate closing the connection.)
		_ = stream.Send(&relayv1.AgentMessage{Msg: &relayv1.AgentMessage_Hello{Hello: &relayv1.Hello{Cluster: "east", Token: tok}}})
		if _, err := stream.Recv(); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("Sync with a wrong token in its headers and the right one in its Hello = %v, want Unauthenticated", err)
		}
	})
	t.Run("no Hello", func(t *testing.T) {
		ts := startServer(t, nil, "", func(o *Options) { o.Mode, o.HelloTimeout = ModeTLS, 300*time.Millisecond })
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		stream, err := relayv1.NewRelayClient(ts.dial(nil)).Sync(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "no Hello within") {
			t.Fatalf("a stream that never sends its Hello ended with %v, want DeadlineExceeded from the server", err)
		}
	})
	t.Run("connections per peer", func(t *testing.T) {
		ts := startServer(t, nil, "", func(o *Options) { o.MaxConnectionsPerPeer = 2 })
		for range 2 {
			c, err := net.Dial("tcp", ts.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
		}
		testutil.Eventually(t, "two connections admitted", func() bool {
			ts.gate.mu.Lock()
			defer ts.gate.mu.Unlock()
			return ts.gate.open == 2
		})
		c, err := net.Dial("tcp", ts.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !isReset(err) {
			t.Fatalf("a third connection from the same address: read = %v, want it closed", err)
		}
	})
}

func isReset(err error) bool {
	return err != nil && strings.Contains(err.Error(), "reset")
}

// Renewals racing a deregistration never undo it, in memory and
// with replicas on a real Redis.
func TestDeregisterRacingRenewals(t *testing.T) {
	run := func(t *testing.T, ts *testServer, other *testServer) {
		for trial := range 5 {
			tok := ts.registerWith(&relayv1.RegisterClusterRequest{Cluster: "east", Reusable: true})
			var certs []*tls.Certificate
			for range 4 {
				c, err := ts.certificate("east", tok)
				if err != nil {
					t.Fatal(err)
				}
				certs = append(certs, c)
			}
			var wg sync.WaitGroup
			renewed := make(chan struct{}, len(certs)*50)
			deregistered := make(chan struct{})
			for _, c := range certs {
				client := relayv1.NewRegistrationClient(other.dial(c))
				wg.Go(func() {
					for i := 0; ; i++ {
						select {
						case <-deregistered:
							return
						default:
						}
						key, _ := pki.NewKey()
						csr, _ := pki.NewCSR(key, "east")
						if _, err := client.Renew(context.Background(), &relayv1.RenewRequest{Csr: csr}); err == nil {
							renewed <- struct{}{}
						}
						if i > 200 {
							return
						}
					}
				})
			}
			wg.Go(func() {
				defer close(deregistered)
				select {
				case <-renewed:
				case <-time.After(10 * time.Second):
				}
				if err := ts.Deregister(context.Background(), "east"); err != nil {
					t.Error(err)
				}
			})
			wg.Wait()
			c, err := ts.store.GetCluster(context.Background(), "east")
			if err != nil {
				t.Fatal(err)
			}
			if !c.Revoked || len(c.Serials) != 0 {
				t.Fatalf("trial %d: after deregistration racing renewals: revoked=%v serials=%v", trial, c.Revoked, c.Serials)
			}
			for _, cert := range certs {
				key, _ := pki.NewKey()
				csr, _ := pki.NewCSR(key, "east")
				if _, err := relayv1.NewRegistrationClient(ts.dial(cert)).Renew(context.Background(), &relayv1.RenewRequest{Csr: csr}); err == nil {
					t.Fatalf("trial %d: a renewal succeeded after the deregistration", trial)
				}
			}
		}
	}
	t.Run("memory", func(t *testing.T) {
		ts := startServer(t, nil, "")
		run(t, ts, ts)
	})
	t.Run("redis replicas", func(t *testing.T) {
		r := testenv.StartRedis(t)
		dir := t.TempDir()
		ts1 := startServer(t, redisStore(t, r, "r1"), dir, withID("r1"))
		ts2 := startServer(t, redisStore(t, r, "r2"), "", withID("r2"), func(o *Options) { o.AdminTokenFile = ts1.AdminTokenPath() })
		run(t, ts1, ts2)
	})
}

// signed returns a certificate signed for cluster and records its serial.
func (ts *testServer) signed(t *testing.T, cluster string, ttl time.Duration) (*tls.Certificate, time.Time) {
	t.Helper()
	key, _ := pki.NewKey()
	csr, _ := pki.NewCSR(key, cluster)
	chain, serial, notAfter, err := ts.ca.SignClusterCSR(csr, cluster, ttl)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.UpdateCluster(context.Background(), ts.store, cluster, func(c *store.Cluster, _ bool) error {
		c.Serials = appendSerial(c.Serials, serial)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	keyPEM, _ := pki.KeyPEM(key)
	cert, err := tls.X509KeyPair(chain, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return &cert, notAfter
}

func renewOn(conn *grpc.ClientConn) error {
	key, _ := pki.NewKey()
	csr, _ := pki.NewCSR(key, "east")
	_, err := relayv1.NewRegistrationClient(conn).Renew(context.Background(), &relayv1.RenewRequest{Csr: csr})
	return err
}

// Serial, expiry and revocation are checked on every call of an
// open connection, and Renew works only from the current certificate.
func TestCertificateCheckedOnEveryCall(t *testing.T) {
	ts := startServer(t, nil, "")
	t.Run("evicted serial", func(t *testing.T) {
		ts.register("east")
		old, _ := ts.signed(t, "east", time.Hour)
		conn := ts.dial(old)
		ts.signed(t, "east", time.Hour) // a renewal: old is no longer current
		if err := renewOn(conn); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("Renew from a certificate that is not the current one = %v, want PermissionDenied", err)
		}
		for range maxSerials {
			ts.signed(t, "east", time.Hour)
		}
		if _, _, err := syncWithConn(t, conn, &relayv1.Hello{Cluster: "east"}); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("Sync on an open connection with an evicted serial = %v, want PermissionDenied", err)
		}
	})
	t.Run("expired on an open connection", func(t *testing.T) {
		ts.register("east")
		cert, notAfter := ts.signed(t, "east", 2*time.Second)
		conn := ts.dial(cert)
		_, first, err := syncWithConn(t, conn, &relayv1.Hello{Cluster: "east"})
		if err != nil || first.GetWelcome() == nil {
			t.Fatalf("Sync = %v, %v", first, err)
		}
		testutil.Eventually(t, "expiry", func() bool { return time.Now().After(notAfter) })
		if err := renewOn(conn); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("Renew with an expired certificate on an open connection = %v, want Unauthenticated", err)
		}
	})
	t.Run("stream closed at expiry", func(t *testing.T) {
		ts.register("east")
		cert, _ := ts.signed(t, "east", 2*time.Second)
		stream, first, err := syncWithConn(t, ts.dial(cert), &relayv1.Hello{Cluster: "east"})
		if err != nil || first.GetWelcome() == nil {
			t.Fatalf("Sync = %v, %v", first, err)
		}
		for {
			m, err := stream.Recv()
			if err != nil {
				t.Fatalf("the stream ended with %v before a goodbye", err)
			}
			if m.GetGoodbye() != nil {
				break
			}
		}
	})
	t.Run("deregistered and registered again", func(t *testing.T) {
		ts.register("east")
		cert, _ := ts.signed(t, "east", time.Hour)
		conn := ts.dial(cert)
		if err := renewOn(conn); err != nil {
			t.Fatalf("Renew from the current certificate = %v", err)
		}
		if err := ts.Deregister(context.Background(), "east"); err != nil {
			t.Fatal(err)
		}
		ts.register("east")
		if err := renewOn(conn); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("Renew on an old connection after deregister and register = %v, want PermissionDenied", err)
		}
	})
}

// syncWithConn opens a Sync stream on conn and sends a Hello.
func syncWithConn(t *testing.T, conn *grpc.ClientConn, hello *relayv1.Hello) (relayv1.Relay_SyncClient, *relayv1.ServerMessage, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := relayv1.NewRelayClient(conn).Sync(ctx)
	if err != nil {
		return nil, nil, err
	}
	// A stream the server refused at once may fail Send with io.EOF; its
	// status comes from Recv, as with any gRPC stream.
	if err := stream.Send(&relayv1.AgentMessage{Msg: &relayv1.AgentMessage_Hello{Hello: hello}}); err != nil && !errors.Is(err, io.EOF) {
		return nil, nil, err
	}
	first, err := stream.Recv()
	return stream, first, err
}

// An authenticated agent's input is bounded, and the nack names the
// limit.
func TestInputLimits(t *testing.T) {
	ts := startServer(t, nil, "", func(o *Options) { o.MaxInputParts, o.MaxInputResources = 3, 5 })
	tok := ts.register("east")
	cert, err := ts.certificate("east", tok)
	if err != nil {
		t.Fatal(err)
	}
	resources := func(n int) []snapshot.Resource {
		var rs []snapshot.Resource
		for i := range n {
			name := string(rune('a' + i))
			r, err := snapshot.NewResource(snapshot.ID{Version: "v1", Kind: "ConfigMap", Namespace: "ns", Name: name},
				[]byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"`+name+`","namespace":"ns"}}`))
			if err != nil {
				t.Fatal(err)
			}
			rs = append(rs, r)
		}
		return rs
	}
	nackFor := func(t *testing.T, stream relayv1.Relay_SyncClient) string {
		for {
			m, err := stream.Recv()
			if err != nil {
				t.Fatalf("stream ended before a nack: %v", err)
			}
			if a := m.GetAck(); a != nil && a.GetSubject() == relayv1.Ack_SUBJECT_INPUT {
				if !a.GetNack() {
					t.Fatalf("input acked, want a nack")
				}
				return a.GetError()
			}
		}
	}
	send := func(t *testing.T, stream relayv1.Relay_SyncClient, d snapshot.Delta, more bool) {
		if err := stream.Send(&relayv1.AgentMessage{Msg: &relayv1.AgentMessage_Input{Input: &relayv1.InputSnapshot{Delta: snapshot.DeltaToProto(d, more)}}}); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("parts", func(t *testing.T) {
		stream, _, err := syncWith(t, ts, cert, &relayv1.Hello{Cluster: "east"})
		if err != nil {
			t.Fatal(err)
		}
		for range 4 {
			send(t, stream, snapshot.Delta{Full: true, Version: 1, Upserts: resources(1)}, true)
		}
		if msg := nackFor(t, stream); !strings.Contains(msg, "parts") {
			t.Fatalf("nack = %q, want the parts limit named", msg)
		}
	})
	t.Run("resources", func(t *testing.T) {
		stream, _, err := syncWith(t, ts, cert, &relayv1.Hello{Cluster: "east"})
		if err != nil {
			t.Fatal(err)
		}
		send(t, stream, snapshot.Delta{Full: true, Version: 1, Upserts: resources(6)}, false)
		if msg := nackFor(t, stream); !strings.Contains(msg, "resources") {
			t.Fatalf("nack = %q, want the resources limit named", msg)
		}
	})
	if got := testutilCounter(t, ts, "meshrelay_relay_input_limit_refusals_total"); got < 2 {
		t.Errorf("meshrelay_relay_input_limit_refusals_total = %v, want 2", got)
	}
}

// An authenticated agent's input whose body is not JSON is refused, the
// nack says why, and the server keeps no input from it: the store trusts
// what it reads back because the relay checked it here.
func TestInputBodyMustBeJSON(t *testing.T) {
	ts := startServer(t, nil, "")
	tok := ts.register("east")
	cert, err := ts.certificate("east", tok)
	if err != nil {
		t.Fatal(err)
	}
	stream, _, err := syncWith(t, ts, cert, &relayv1.Hello{Cluster: "east"})
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"`)
	bad := &snapshotv1.Resource{Id: snapshot.IDToProto(snapshot.ID{Version: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "a"}), Body: body}
	d := &snapshotv1.Delta{Full: true, Version: 1, Upserts: []*snapshotv1.Resource{bad}}
	if err := stream.Send(&relayv1.AgentMessage{Msg: &relayv1.AgentMessage_Input{Input: &relayv1.InputSnapshot{Delta: d}}}); err != nil {
		t.Fatal(err)
	}
	for {
		m, err := stream.Recv()
		if err != nil {
			t.Fatalf("stream ended before a nack: %v", err)
		}
		a := m.GetAck()
		if a == nil || a.GetSubject() != relayv1.Ack_SUBJECT_INPUT {
			continue
		}
		if !a.GetNack() || !strings.Contains(a.GetError(), "not valid JSON") {
			t.Fatalf("input ack = nack %v %q, want a nack saying the body is not valid JSON", a.GetNack(), a.GetError())
		}
		break
	}
	if in, err := ts.deps.Store.GetInput(t.Context(), "east"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetInput(east) = %v, %v after a refused input, want ErrNotFound", in, err)
	}
}

// testutilCounter sums a metric's samples from /metrics.
func testutilCounter(t *testing.T, ts *testServer, name string) float64 {
	t.Helper()
	mfs, err := ts.deps.Gatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// dialFrom connects without a certificate from a given loopback address.
func (ts *testServer) dialFrom(ip string) *grpc.ClientConn {
	ts.t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ts.CABundle())
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	conn, err := grpc.NewClient(ts.Addr(),
		grpc.WithTransportCredentials(credentials.NewTLS(pki.ClientTLSConfig(pki.ClientTLSOptions{RootCAs: pool, ServerName: "127.0.0.1"}))),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }))
	if err != nil {
		ts.t.Fatal(err)
	}
	ts.t.Cleanup(func() { conn.Close() })
	return conn
}

func registerOn(conn *grpc.ClientConn, cluster, token string) error {
	key, _ := pki.NewKey()
	csr, _ := pki.NewCSR(key, cluster)
	_, err := relayv1.NewRegistrationClient(conn).Register(context.Background(), &relayv1.RegisterRequest{Cluster: cluster, Token: token, Csr: csr})
	return err
}

// Failures are limited per address and per cluster, a correct
// token is never refused for others' failures, and limiters are pruned.
func TestRegistrationRateLimit(t *testing.T) {
	ts := startServer(t, nil, "", func(o *Options) { o.RegisterFailures = 3 })
	eastTok := ts.register("east")
	ts.register("west")
	attacker := ts.dialFrom("127.0.0.1")
	for range 5 {
		_ = registerOn(attacker, "east", "mrt_wrong")
	}
	if err := registerOn(attacker, "east", "mrt_wrong"); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a sixth wrong token = %v, want ResourceExhausted", err)
	}
	if err := registerOn(ts.dialFrom("127.0.0.1"), "east", eastTok); err != nil {
		t.Fatalf("the right token after others' failures = %v, want success", err)
	}
	// Rotating addresses does not escape the cluster's limit.
	var last error
	for i := range 5 {
		last = registerOn(ts.dialFrom("127.0.0."+string(rune('2'+i))), "west", "mrt_wrong")
	}
	if status.Code(last) != codes.ResourceExhausted {
		t.Fatalf("wrong tokens for west from five addresses: last = %v, want ResourceExhausted", last)
	}
	ts.mu.Lock()
	ts.limiters["addr:gone"] = newFullLimiter()
	ts.mu.Unlock()
	ts.pruneLimiters()
	ts.mu.Lock()
	_, kept := ts.limiters["addr:gone"]
	_, west := ts.limiters["cluster:west"]
	ts.mu.Unlock()
	if kept || !west {
		t.Fatalf("after pruning: full limiter kept=%v, west's kept=%v; want false, true", kept, west)
	}
}

// In --mode tls, wrong tokens on Sync are limited too.
func TestSyncTokenRateLimit(t *testing.T) {
	ts := startServer(t, nil, "", func(o *Options) { o.Mode, o.RegisterFailures = ModeTLS, 2 })
	ts.register("east")
	var codesSeen []codes.Code
	for range 4 {
		_, _, err := syncWith(t, ts, nil, &relayv1.Hello{Cluster: "east", Token: "mrt_wrong"})
		codesSeen = append(codesSeen, status.Code(err))
	}
	if codesSeen[3] != codes.ResourceExhausted {
		t.Fatalf("codes of four wrong tokens on Sync = %v, want the last ResourceExhausted", codesSeen)
	}
}

// Tokens are single-use unless reusable, and expire by default.
func TestTokensAreSingleUse(t *testing.T) {
	ts := startServer(t, nil, "")
	resp, err := relayv1.NewAdminClient(ts.dial(nil)).RegisterCluster(ts.adminCtx(), &relayv1.RegisterClusterRequest{Cluster: "east"})
	if err != nil {
		t.Fatal(err)
	}
	if exp := resp.GetExpires().AsTime(); !resp.GetExpires().IsValid() || exp.After(time.Now().Add(25*time.Hour)) || exp.Before(time.Now()) {
		t.Fatalf("token expires %v, want within the default day", resp.GetExpires())
	}
	if _, err := ts.certificate("east", resp.GetToken()); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.certificate("east", resp.GetToken()); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("a second registration with the same token = %v, want Unauthenticated", err)
	}
	tok := ts.registerWith(&relayv1.RegisterClusterRequest{Cluster: "west", Reusable: true})
	for range 2 {
		if _, err := ts.certificate("west", tok); err != nil {
			t.Fatalf("a reusable token = %v", err)
		}
	}
}

// The CA key is encrypted in the store, and replicas with the same
// secret share the CA; one with another secret refuses to start.
func TestCAKeyEncryptedInStore(t *testing.T) {
	st := memory.New()
	ts := startServer(t, st, "")
	_, key, err := st.GetCA(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(key, []byte("PRIVATE KEY")) {
		t.Fatal("the CA private key is in the store in plain text")
	}
	ts2 := startServer(t, st.Replica("r2"), "")
	if !bytes.Equal(ts.CABundle(), ts2.CABundle()) {
		t.Fatal("a replica with the same secret did not load the shared CA")
	}
	opts := DefaultOptions()
	opts.ListenAddr, opts.AdminAddr, opts.DataDir = "127.0.0.1:0", "", t.TempDir()
	opts.CAKeyEncryptionKey = "another-secret-entirely"
	if _, err := New(context.Background(), opts, Deps{Store: st.Replica("r3")}); err == nil || !strings.Contains(err.Error(), "decrypt CA key") {
		t.Fatalf("New with another secret = %v, want a decryption error", err)
	}
}

// Low: /readyz tells cluster names and store errors only to callers with
// the admin token.
func TestReadyzDetailsNeedAdminToken(t *testing.T) {
	st := memory.New()
	if _, err := store.UpdateCluster(context.Background(), st, "secret-cluster", func(*store.Cluster, bool) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := st.PutInput(context.Background(), "secret-cluster", snapshot.Empty.WithVersion(1)); err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, st, "")
	if body := readyz(t, ts); strings.Contains(body, "secret-cluster") || !strings.Contains(body, "safe mode") {
		t.Fatalf("anonymous /readyz = %q, want safe mode without cluster names", body)
	}
	req, _ := http.NewRequest(http.MethodGet, "http://"+ts.AdminAddr()+"/readyz", nil)
	req.Header.Set("Authorization", "Bearer "+ts.adminToken())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(body), "secret-cluster") {
		t.Fatalf("/readyz with the admin token = %q, want the cluster named", body)
	}
}

func newFullLimiter() *rate.Limiter { return rate.NewLimiter(rate.Every(time.Minute), 3) }
