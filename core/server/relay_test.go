package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/agent"
	"github.com/meshrelay/meshrelay/core/pki"
	"github.com/meshrelay/meshrelay/core/store"
	"github.com/meshrelay/meshrelay/core/store/memory"
	"github.com/meshrelay/meshrelay/internal/testutil"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	snapshotv1 "github.com/meshrelay/meshrelay/proto/snapshot/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestGoodPath(t *testing.T) {
	ts := startServer(t, nil, "")
	east := startAgent(t, ts, "east", ts.register("east"))
	east.src.set(t, "a", "b", "c")
	testutil.Eventually(t, "east's outputs", func() bool { return len(east.sink.names()) == 3 })
	if diff := cmp.Diff([]string{"a", "b", "c"}, east.sink.names()); diff != "" {
		t.Errorf("east applied (-want +got):\n%s", diff)
	}
	st, err := relayv1.NewAdminClient(ts.dial(nil)).GetStatus(ts.adminCtx(), &relayv1.GetStatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.GetClusters()) != 1 || !st.GetClusters()[0].GetConnected() || st.GetClusters()[0].GetInputResources() != 3 {
		t.Errorf("status clusters = %v, want east connected with 3 inputs", st.GetClusters())
	}
}

func TestOutputsGoOnlyToTheirCluster(t *testing.T) {
	ts := startServer(t, nil, "")
	east := startAgent(t, ts, "east", ts.register("east"))
	west := startAgent(t, ts, "west", ts.register("west"))
	east.src.set(t, "e1")
	west.src.set(t, "w1", "w2")
	testutil.Eventually(t, "outputs", func() bool { return len(east.sink.names()) == 1 && len(west.sink.names()) == 2 })
	got, _ := east.Received("test")
	for r := range got.All() {
		if r.ID.Namespace == "meshrelay" {
			continue // peer-* ConfigMaps name the other clusters
		}
		var cm struct {
			Data map[string]string `json:"data"`
		}
		if err := r.Decode(&cm); err != nil {
			t.Fatal(err)
		}
		if cm.Data["cluster"] != "east" {
			t.Errorf("east received %s made for %q", r.ID, cm.Data["cluster"])
		}
	}
}

func TestRegistrationRefusals(t *testing.T) {
	ts := startServer(t, nil, "")
	token := ts.register("east")
	tests := map[string]struct {
		cluster, token string
		prepare        func()
		want           codes.Code
	}{
		"wrong token":     {cluster: "east", token: "mrt_" + string(make([]byte, 43)), want: codes.Unauthenticated},
		"other's token":   {cluster: "west", token: token, want: codes.Unauthenticated},
		"unknown cluster": {cluster: "nowhere", token: token, want: codes.Unauthenticated},
		"expired token": {cluster: "exp", want: codes.Unauthenticated, prepare: func() {
			tok, err := pki.NewToken()
			if err != nil {
				t.Fatal(err)
			}
			c := store.Cluster{Name: "exp", TokenHash: pki.HashToken(tok), TokenExpires: time.Now().Add(-time.Minute)}
			if err := ts.store.PutCluster(context.Background(), c); err != nil {
				t.Fatal(err)
			}
		}},
	}
	ts.register("west")
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if tc.prepare != nil {
				tc.prepare()
			}
			_, err := ts.certificate(tc.cluster, tc.token)
			if status.Code(err) != tc.want {
				t.Fatalf("Register(%q) = %v, want %v", tc.cluster, err, tc.want)
			}
		})
	}
	if _, err := ts.certificate("east", token); err != nil {
		t.Fatalf("the right token was refused: %v", err)
	}
	key, _ := pki.NewKey()
	csr, _ := pki.NewCSR(key, "east")
	_, err := relayv1.NewRegistrationClient(ts.dial(nil)).Register(context.Background(), &relayv1.RegisterRequest{Cluster: "Not_A_Name", Token: token, Csr: csr})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("Register with a bad cluster name = %v, want InvalidArgument", err)
	}
}

func TestFailedRegistrationsAreRateLimited(t *testing.T) {
	ts := startServer(t, nil, "", func(o *Options) { o.RegisterFailures = 3 })
	ts.register("east")
	var codesSeen []codes.Code
	for range 5 {
		_, err := ts.certificate("east", "mrt_wrong")
		codesSeen = append(codesSeen, status.Code(err))
	}
	want := []codes.Code{codes.Unauthenticated, codes.Unauthenticated, codes.Unauthenticated, codes.ResourceExhausted, codes.ResourceExhausted}
	if diff := cmp.Diff(want, codesSeen); diff != "" {
		t.Errorf("codes of five failed registrations (-want +got):\n%s", diff)
	}
}

// syncWith opens a raw Sync stream with a certificate and sends a Hello.
func syncWith(t *testing.T, ts *testServer, cert *tls.Certificate, hello *relayv1.Hello) (relayv1.Relay_SyncClient, *relayv1.ServerMessage, error) {
	t.Helper()
	return syncWithConn(t, ts.dial(cert), hello)
}

func TestStreamAuthorization(t *testing.T) {
	ts := startServer(t, nil, "")
	eastTok := ts.register("east")
	ts.register("west")
	eastCert, err := ts.certificate("east", eastTok)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("no certificate", func(t *testing.T) {
		_, _, err := syncWith(t, ts, nil, &relayv1.Hello{Cluster: "east"})
		if status.Code(err) != codes.Unauthenticated {
			t.Fatalf("Sync without a certificate = %v, want Unauthenticated", err)
		}
	})
	t.Run("A presenting B's name", func(t *testing.T) {
		_, _, err := syncWith(t, ts, eastCert, &relayv1.Hello{Cluster: "west"})
		if status.Code(err) != codes.PermissionDenied {
			t.Fatalf("Sync as west with east's certificate = %v, want PermissionDenied", err)
		}
	})
	t.Run("certificate from another CA", func(t *testing.T) {
		other, err := pki.GenerateCA("other", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		key, _ := pki.NewKey()
		csr, _ := pki.NewCSR(key, "east")
		chain, _, _, err := other.SignClusterCSR(csr, "east", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		keyPEM, _ := pki.KeyPEM(key)
		cert, err := tls.X509KeyPair(chain, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := syncWith(t, ts, &cert, &relayv1.Hello{Cluster: "east"}); err == nil {
			t.Fatal("a certificate from another CA was accepted")
		}
	})
	t.Run("expired certificate", func(t *testing.T) {
		key, _ := pki.NewKey()
		csr, _ := pki.NewCSR(key, "east")
		chain, serial, notAfter, err := ts.ca.SignClusterCSR(csr, "east", time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		c, _ := ts.store.GetCluster(context.Background(), "east")
		c.Serials = append(c.Serials, serial)
		if err := ts.store.PutCluster(context.Background(), c); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, "certificate expiry", func() bool { return time.Now().After(notAfter) })
		keyPEM, _ := pki.KeyPEM(key)
		cert, err := tls.X509KeyPair(chain, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := syncWith(t, ts, &cert, &relayv1.Hello{Cluster: "east"}); err == nil {
			t.Fatal("an expired certificate was accepted")
		}
	})
	t.Run("own certificate", func(t *testing.T) {
		_, first, err := syncWith(t, ts, eastCert, &relayv1.Hello{Cluster: "east"})
		if err != nil || first.GetWelcome() == nil {
			t.Fatalf("Sync as east = %v, %v; want a welcome", first, err)
		}
	})
}

func TestDeregisterClosesStreamAndRevokes(t *testing.T) {
	ts := startServer(t, nil, "")
	east := startAgent(t, ts, "east", ts.register("east"))
	east.src.set(t, "a")
	testutil.Eventually(t, "east's outputs", func() bool { return len(east.sink.names()) == 1 })
	certPEM, keyPEM := readState(t, east)

	if _, err := relayv1.NewAdminClient(ts.dial(nil)).DeregisterCluster(ts.adminCtx(), &relayv1.DeregisterClusterRequest{Cluster: "east"}); err != nil {
		t.Fatal(err)
	}
	if err := east.err(t); !errors.Is(err, agent.ErrDeregistered) {
		t.Fatalf("agent Run = %v, want ErrDeregistered", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := syncWith(t, ts, &cert, &relayv1.Hello{Cluster: "east"}); err == nil {
		t.Fatal("a deregistered cluster's certificate was accepted")
	}
	if _, err := ts.store.GetInput(context.Background(), "east"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("deregistered cluster's input still stored: %v", err)
	}
	// Its applied resources stay in place: nothing was pruned.
	if _, deletes := east.sink.counts(); deletes != 0 {
		t.Errorf("deregistration pruned %d resources in the cluster", deletes)
	}
}

func TestRenewalBeforeExpiry(t *testing.T) {
	ts := startServer(t, nil, "", func(o *Options) { o.CertTTL = 3 * time.Second })
	east := startAgent(t, ts, "east", ts.register("east"))
	east.src.set(t, "a")
	testutil.Eventually(t, "east's outputs", func() bool { return len(east.sink.names()) == 1 })
	first, _ := readState(t, east)
	testutil.Eventually(t, "a renewed certificate", func() bool {
		now, _ := readState(t, east)
		return string(now) != string(first)
	})
	// Still connected and working after the first certificate expired.
	testutil.Eventually(t, "first certificate to expire", func() bool { return time.Now().After(notAfter(t, first)) })
	east.src.set(t, "a", "b")
	testutil.Eventually(t, "outputs after renewal", func() bool { return len(east.sink.names()) == 2 })
}

func TestResumeWithoutFullResend(t *testing.T) {
	ts := startServer(t, nil, "")
	east := startAgent(t, ts, "east", ts.register("east"))
	var names []string
	for i := range 1000 {
		names = append(names, fmt.Sprintf("svc-%04d", i))
	}
	east.src.set(t, names...)
	testutil.Eventually(t, "east's outputs", func() bool { return len(east.sink.names()) == 1000 })
	fullBytes := east.Stats.InputBytes.Load()

	// Drop the connection from the server side.
	ts.mu.Lock()
	st := ts.streams["east"]
	ts.mu.Unlock()
	st.cancel(errors.New("test drops the stream"))
	testutil.Eventually(t, "reconnect", func() bool { return east.Stats.Connects.Load() == 2 })
	testutil.Eventually(t, "resume to finish", func() bool {
		ts.mu.Lock()
		defer ts.mu.Unlock()
		return ts.streams["east"] != nil && ts.streams["east"] != st
	})
	east.src.set(t, append(names, "svc-new")...)
	testutil.Eventually(t, "the change", func() bool { return len(east.sink.names()) == 1001 })

	if n := east.Stats.FullInputs.Load(); n != 1 {
		t.Errorf("agent sent %d full inputs, want 1 (resume must not resend in full)", n)
	}
	resumeBytes := east.Stats.InputBytes.Load() - fullBytes
	if resumeBytes > 1024 {
		t.Errorf("resume and one new Service cost %d bytes, want < 1024 (full send was %d)", resumeBytes, fullBytes)
	}
	if creates, deletes := east.sink.counts(); creates != 1001 || deletes != 0 {
		t.Errorf("sink saw %d creates and %d deletes, want 1001 and 0 (no churn)", creates, deletes)
	}
}

func TestCorruptDeltaIsNackedThenFullWorks(t *testing.T) {
	ts := startServer(t, nil, "")
	cert, err := ts.certificate("east", ts.register("east"))
	if err != nil {
		t.Fatal(err)
	}
	stream, first, err := syncWith(t, ts, cert, &relayv1.Hello{Cluster: "east"})
	if err != nil || first.GetWelcome() == nil {
		t.Fatalf("Sync = %v, %v", first, err)
	}
	svc := func(name string) *snapshotv1.Resource {
		return &snapshotv1.Resource{Id: &snapshotv1.ResourceID{Version: "v1", Kind: "Service", Namespace: "default", Name: name},
			Body: []byte(`{"apiVersion":"v1","kind":"Service","metadata":{"name":"` + name + `","namespace":"default"}}`)}
	}
	send := func(d *snapshotv1.Delta) *relayv1.Ack {
		t.Helper()
		if err := stream.Send(&relayv1.AgentMessage{Msg: &relayv1.AgentMessage_Input{Input: &relayv1.InputSnapshot{Delta: d}}}); err != nil {
			t.Fatal(err)
		}
		for {
			m, err := stream.Recv()
			if err != nil {
				t.Fatal(err)
			}
			if a := m.GetAck(); a != nil {
				return a
			}
		}
	}
	// A delta against a base the server never had.
	if a := send(&snapshotv1.Delta{BaseVersion: 41, Version: 42, Upserts: []*snapshotv1.Resource{svc("a")}}); !a.GetNack() {
		t.Fatalf("delta from an unknown base = %v, want a nack", a)
	}
	// A delta whose promised hash is wrong.
	if a := send(&snapshotv1.Delta{Full: true, Version: 1, Upserts: []*snapshotv1.Resource{svc("a")}, Hash: bytes.Repeat([]byte{1}, 32)}); !a.GetNack() {
		t.Fatalf("delta with a wrong hash = %v, want a nack", a)
	}
	// Not JSON.
	bad := svc("b")
	bad.Body = []byte("{not json")
	if a := send(&snapshotv1.Delta{Full: true, Version: 1, Upserts: []*snapshotv1.Resource{bad}}); !a.GetNack() {
		t.Fatalf("delta with a malformed body = %v, want a nack", a)
	}
	// A correct full resend is accepted.
	r, err := snapshot.NewResource(snapshot.ID{Version: "v1", Kind: "Service", Namespace: "default", Name: "a"}, svc("a").GetBody())
	if err != nil {
		t.Fatal(err)
	}
	s, _ := snapshot.New(2, []snapshot.Resource{r})
	full := snapshot.DeltaToProto(snapshot.FullDelta(s), false)
	if a := send(full); a.GetNack() || a.GetVersion() != 2 {
		t.Fatalf("full resend = %v, want an ack of version 2", a)
	}
}

func TestServerRestartAgentReconnects(t *testing.T) {
	st := memory.New()
	dir := t.TempDir()
	ts := startServer(t, st, dir)
	addr := ts.Addr()
	east := startAgent(t, ts, "east", ts.register("east"))
	east.src.set(t, "a", "b")
	testutil.Eventually(t, "east's outputs", func() bool { return len(east.sink.names()) == 2 })
	ts.stop()

	// The agent keeps discovering while the server is away and keeps what
	// it applied.
	east.src.set(t, "a", "b", "c")
	if _, deletes := east.sink.counts(); deletes != 0 {
		t.Fatalf("the outage caused %d deletes", deletes)
	}
	ts2 := startServer(t, st, dir, func(o *Options) { o.ListenAddr = addr })
	testutil.Eventually(t, "reconnect to the new server", func() bool { return east.Stats.Connects.Load() >= 2 })
	testutil.Eventually(t, "the change made during the outage to arrive", func() bool { return len(east.sink.names()) == 3 })
	if n := east.Stats.FullInputs.Load(); n != 1 {
		t.Errorf("agent sent %d full inputs across the restart, want 1 (a delta from what the store holds)", n)
	}
	if _, deletes := east.sink.counts(); deletes != 0 {
		t.Errorf("restart caused %d deletes", deletes)
	}
	_ = ts2
}

func TestTLSOnlyModeNeedsTokenOnEveryStream(t *testing.T) {
	ts := startServer(t, nil, "", func(o *Options) { o.Mode = ModeTLS })
	tok := ts.register("east")
	east := startAgent(t, ts, "east", tok, func(o *agent.Options) { o.Mode = "tls" })
	east.src.set(t, "a")
	testutil.Eventually(t, "east's outputs", func() bool { return len(east.sink.names()) == 1 })

	_, _, err := syncWith(t, ts, nil, &relayv1.Hello{Cluster: "east", Token: "mrt_wrong"})
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("Sync with a wrong token = %v, want Unauthenticated", err)
	}
}

func TestAdminNeedsToken(t *testing.T) {
	ts := startServer(t, nil, "")
	_, err := relayv1.NewAdminClient(ts.dial(nil)).RegisterCluster(context.Background(), &relayv1.RegisterClusterRequest{Cluster: "east"})
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("RegisterCluster without the admin token = %v, want Unauthenticated", err)
	}
}

// The install-wide shared token, when enabled, registers the clusters
// registered for it; without it, or for other clusters (even those with
// their own token), only the cluster's own token does.
func TestSharedToken(t *testing.T) {
	shared, err := pki.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	off := startServer(t, nil, "")
	off.registerWith(&relayv1.RegisterClusterRequest{Cluster: "east", AllowSharedToken: true})
	if _, err := off.certificate("east", shared); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("shared token with the option off = %v, want Unauthenticated", err)
	}
	file := filepath.Join(t.TempDir(), "shared-token")
	if err := os.WriteFile(file, []byte(shared+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	on := startServer(t, nil, "", func(o *Options) { o.SharedTokenFile = file })
	on.registerWith(&relayv1.RegisterClusterRequest{Cluster: "east", AllowSharedToken: true})
	westTok := on.register("west")
	if _, err := on.certificate("east", shared); err != nil {
		t.Fatalf("shared token for a cluster registered for it = %v", err)
	}
	if _, err := on.certificate("west", shared); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("shared token for a cluster with its own token = %v, want Unauthenticated", err)
	}
	if _, err := on.certificate("nowhere", shared); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("shared token for an unregistered cluster = %v, want Unauthenticated", err)
	}
	if _, err := on.certificate("west", westTok); err != nil {
		t.Fatalf("west's own token = %v", err)
	}
}
