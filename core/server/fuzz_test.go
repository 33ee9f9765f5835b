package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"log/slog"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/meshrelay/meshrelay/core/pki"
	"github.com/meshrelay/meshrelay/core/store"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/store/memory"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	snapshotv1 "github.com/meshrelay/meshrelay/proto/snapshot/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// fakeStream feeds recorded agent messages to a stream's receive loop.
type fakeStream struct {
	grpc.ServerStream
	ctx  context.Context
	msgs []*relayv1.AgentMessage
}

func (f *fakeStream) Context() context.Context          { return f.ctx }
func (f *fakeStream) Send(*relayv1.ServerMessage) error { return nil }
func (f *fakeStream) Recv() (*relayv1.AgentMessage, error) {
	if len(f.msgs) == 0 {
		return nil, io.EOF
	}
	m := f.msgs[0]
	f.msgs = f.msgs[1:]
	return m, nil
}

// FuzzAgentMessages feeds arbitrary agent messages to the server's handling
// of a stream: nothing may panic, whatever the server accepts as the
// cluster's input must be a consistent snapshot of Kubernetes objects, and
// nothing of an unfinished delta is counted once the stream ends.
func FuzzAgentMessages(f *testing.F) {
	svc, _ := snapshot.NewResource(snapshot.ID{Version: "v1", Kind: "Service", Namespace: "ns", Name: "a"},
		[]byte(`{"apiVersion":"v1","kind":"Service","metadata":{"name":"a","namespace":"ns"},"spec":{}}`))
	full, _ := snapshot.New(1, []snapshot.Resource{svc})
	seed := func(ms ...*relayv1.AgentMessage) {
		var data [][]byte
		for _, m := range ms {
			b, err := proto.Marshal(m)
			if err != nil {
				f.Fatal(err)
			}
			data = append(data, b)
		}
		for len(data) < 2 {
			data = append(data, nil)
		}
		f.Add(data[0], data[1])
	}
	input := func(d *snapshotv1.Delta) *relayv1.AgentMessage {
		return &relayv1.AgentMessage{Msg: &relayv1.AgentMessage_Input{Input: &relayv1.InputSnapshot{Delta: d}}}
	}
	seed(input(snapshot.DeltaToProto(snapshot.FullDelta(full), false)))
	seed(input(snapshot.DeltaToProto(snapshot.FullDelta(full), true)), input(snapshot.DeltaToProto(snapshot.Delta{BaseVersion: 1, Version: 2}, false)))
	seed(&relayv1.AgentMessage{Msg: &relayv1.AgentMessage_Ack{Ack: &relayv1.Ack{Subject: relayv1.Ack_SUBJECT_OUTPUT, Backend: "test", Version: 3, Nack: true}}})
	seed(&relayv1.AgentMessage{Msg: &relayv1.AgentMessage_Hello{Hello: &relayv1.Hello{Cluster: "west"}}})

	opts := DefaultOptions()
	opts.ListenAddr, opts.AdminAddr, opts.DataDir = "127.0.0.1:0", "", f.TempDir()
	s, err := New(context.Background(), opts, Deps{Store: memory.New()})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(s.Stop)

	f.Fuzz(func(t *testing.T, a, b []byte) {
		var msgs []*relayv1.AgentMessage
		for _, data := range [][]byte{a, b} {
			m := &relayv1.AgentMessage{}
			if proto.Unmarshal(data, m) == nil {
				msgs = append(msgs, m)
			}
		}
		ctx, cancel := context.WithCancelCause(context.Background())
		defer cancel(nil)
		st := &stream{
			s: s, cluster: "east", log: slog.New(slog.DiscardHandler), srv: &fakeStream{ctx: ctx, msgs: msgs},
			cancel: cancel, wake: make(chan struct{}, 1), ctrl: make(chan *relayv1.ServerMessage, 64), sent: map[string]sent{},
		}
		_ = st.recvLoop(ctx)
		if h := s.inputHeld.get("east"); h != (held{}) {
			t.Fatalf("the ended stream still counts %+v held", h)
		}
		in, _, ok := s.input(ctx, "east")
		s.mu.Lock()
		delete(s.fleet, "east")
		s.mu.Unlock()
		if !ok {
			return
		}
		again, err := snapshot.New(in.Version(), in.Resources())
		if err != nil || again.Hash() != in.Hash() {
			t.Fatalf("accepted input is inconsistent: %v", err)
		}
		for r := range in.All() {
			if err := r.ValidateObject(); err != nil {
				t.Fatalf("accepted input holds what is not a Kubernetes object: %v", err)
			}
		}
	})
}

// countingStream is a fakeStream that counts the messages read from it.
type countingStream struct {
	fakeStream
	reads int
}

func (c *countingStream) Recv() (*relayv1.AgentMessage, error) {
	c.reads++
	return c.fakeStream.Recv()
}

// FuzzUnauthenticatedPeer calls every RPC as a peer without a client
// certificate would, with arbitrary requests and messages: nothing may
// panic, no registration may succeed without the cluster's token, Trust
// calls and the admin API refuse it, under mTLS Sync must refuse before
// reading anything, and in --mode tls no stream may be attached without a
// valid token. The receive limit of each RPC is FuzzInspector's and
// TestInspectorMethodLimits'.
func FuzzUnauthenticatedPeer(f *testing.F) {
	seedReq := func(r *relayv1.RegisterRequest) []byte {
		b, err := proto.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	seedMsg := func(m *relayv1.AgentMessage) []byte {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	hello := func(h *relayv1.Hello) []byte {
		return seedMsg(&relayv1.AgentMessage{Msg: &relayv1.AgentMessage_Hello{Hello: h}})
	}
	f.Add(seedReq(&relayv1.RegisterRequest{Cluster: "east", Token: "mrt_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", Csr: []byte("csr")}), hello(&relayv1.Hello{Cluster: "east", Token: "mrt_x"}))
	f.Add(seedReq(&relayv1.RegisterRequest{Cluster: "Not_A_Name"}), hello(&relayv1.Hello{}))
	f.Add([]byte{}, seedMsg(&relayv1.AgentMessage{Msg: &relayv1.AgentMessage_Heartbeat{Heartbeat: &relayv1.Heartbeat{}}}))

	newServer := func(mode string) *Server {
		opts := DefaultOptions()
		opts.ListenAddr, opts.AdminAddr, opts.DataDir, opts.Mode = "127.0.0.1:0", "", f.TempDir(), mode
		opts.HelloTimeout = time.Second
		opts.RegisterFailures = 1 << 20
		s, err := New(context.Background(), opts, Deps{Store: memory.New()})
		if err != nil {
			f.Fatal(err)
		}
		f.Cleanup(s.Stop)
		if _, err := store.UpdateCluster(context.Background(), s.deps.Store, "east", func(c *store.Cluster, _ bool) error {
			tok, _ := pki.NewToken()
			c.TokenHash, c.TokenExpires = pki.HashToken(tok), time.Now().Add(time.Hour)
			return nil
		}); err != nil {
			f.Fatal(err)
		}
		return s
	}
	mtls, tlsMode := newServer(ModeMTLS), newServer(ModeTLS)
	anonymous := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}})

	f.Fuzz(func(t *testing.T, reqData, msgData []byte) {
		req := &relayv1.RegisterRequest{}
		if proto.Unmarshal(reqData, req) == nil {
			for _, s := range []*Server{mtls, tlsMode} {
				if _, err := (&registration{s: s}).Register(anonymous, req); err == nil {
					t.Fatalf("registration without the token succeeded: %v", req)
				}
				if _, err := (&registration{s: s}).Renew(anonymous, &relayv1.RenewRequest{Csr: req.GetCsr()}); status.Code(err) != codes.Unauthenticated {
					t.Fatalf("Renew without a certificate = %v, want Unauthenticated", err)
				}
			}
		}
		for _, s := range []*Server{mtls, tlsMode} {
			if _, err := (&trustService{s: s}).Report(anonymous, &relayv1.TrustReport{Policy: req.GetCluster(), CaCert: req.GetCsr()}); err == nil {
				t.Fatal("a Trust report without credentials was accepted")
			}
			if _, err := (&trustService{s: s}).Sign(anonymous, &relayv1.TrustSignRequest{Policy: req.GetCluster(), Csr: req.GetCsr()}); err == nil {
				t.Fatal("a Trust signing without credentials was accepted")
			}
			if _, err := (&admin{s: s}).RegisterCluster(anonymous, &relayv1.RegisterClusterRequest{Cluster: req.GetCluster()}); status.Code(err) != codes.Unauthenticated {
				t.Fatalf("RegisterCluster without the admin token = %v, want Unauthenticated", err)
			}
			if _, err := (&admin{s: s}).ListClusters(anonymous, &relayv1.ListClustersRequest{}); status.Code(err) != codes.Unauthenticated {
				t.Fatalf("ListClusters without the admin token = %v, want Unauthenticated", err)
			}
		}
		var msgs []*relayv1.AgentMessage
		if m := (&relayv1.AgentMessage{}); proto.Unmarshal(msgData, m) == nil {
			msgs = append(msgs, m)
		}
		ms := &countingStream{fakeStream: fakeStream{ctx: anonymous, msgs: slices.Clone(msgs)}}
		if err := (&relay{s: mtls}).Sync(ms); status.Code(err) != codes.Unauthenticated || ms.reads != 0 {
			t.Fatalf("mTLS Sync without a certificate = %v after %d reads, want Unauthenticated before any", err, ms.reads)
		}
		ts := &countingStream{fakeStream: fakeStream{ctx: anonymous, msgs: msgs}}
		if err := (&relay{s: tlsMode}).Sync(ts); err == nil {
			t.Fatal("a Sync without a valid token was served")
		}
		if n := tlsMode.connectedCount(); n != 0 {
			t.Fatalf("%d streams attached without a valid token", n)
		}
	})
}

// FuzzAuthenticatedPeer calls every RPC as an agent with cluster east's
// verified certificate would, with arbitrary requests and messages:
// nothing may panic, no certificate is issued for another cluster, the
// admin API refuses the agent, and a Sync naming another cluster is
// refused. The receive limit of each RPC is FuzzInspector's and
// TestInspectorMethodLimits'.
func FuzzAuthenticatedPeer(f *testing.F) {
	opts := DefaultOptions()
	opts.ListenAddr, opts.AdminAddr, opts.DataDir = "127.0.0.1:0", "", f.TempDir()
	opts.RegisterFailures = 1 << 20
	s, err := New(context.Background(), opts, Deps{Store: memory.New()})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(s.Stop)
	tok, err := pki.NewToken()
	if err != nil {
		f.Fatal(err)
	}
	if _, err := store.UpdateCluster(context.Background(), s.deps.Store, "east", func(c *store.Cluster, _ bool) error {
		c.TokenHash, c.TokenExpires, c.TokenReusable = pki.HashToken(tok), time.Now().Add(time.Hour), true
		return nil
	}); err != nil {
		f.Fatal(err)
	}
	key, _ := pki.NewKey()
	csr, _ := pki.NewCSR(key, "east")
	anonymous := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}})
	resp, err := (&registration{s: s}).Register(anonymous, &relayv1.RegisterRequest{Cluster: "east", Token: tok, Csr: csr})
	if err != nil {
		f.Fatal(err)
	}
	block, _ := pem.Decode(resp.GetChain())
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		f.Fatal(err)
	}
	east := peer.NewContext(context.Background(), &peer.Peer{
		Addr:     &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 2},
		AuthInfo: credentials.TLSInfo{State: tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}, VerifiedChains: [][]*x509.Certificate{{leaf}}}},
	})

	marshal := func(m proto.Message) []byte {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	westCSR, _ := pki.NewCSR(key, "west")
	f.Add(marshal(&relayv1.RenewRequest{Csr: westCSR}), marshal(&relayv1.AgentMessage{Msg: &relayv1.AgentMessage_Hello{Hello: &relayv1.Hello{Cluster: "west"}}}))
	f.Add(marshal(&relayv1.TrustReport{Policy: "ns/mesh", CaCert: []byte("x"), Roots: []string{"r"}}), marshal(&relayv1.AgentMessage{Msg: &relayv1.AgentMessage_Hello{Hello: &relayv1.Hello{Cluster: "east"}}}))
	f.Add(marshal(&relayv1.TrustSignRequest{Policy: "ns/mesh", Csr: csr}), []byte{})

	admin := &admin{s: s}
	f.Fuzz(func(t *testing.T, reqData, msgData []byte) {
		renew := &relayv1.RenewRequest{}
		if proto.Unmarshal(reqData, renew) == nil {
			if c, err := (&registration{s: s}).Renew(east, renew); err == nil {
				b, _ := pem.Decode(c.GetChain())
				cert, perr := x509.ParseCertificate(b.Bytes)
				if perr != nil {
					t.Fatal(perr)
				}
				if name, _ := pki.ClusterFromCert(cert); name != "east" {
					t.Fatalf("east renewed a certificate for %q", name)
				}
			}
		}
		report := &relayv1.TrustReport{}
		if proto.Unmarshal(reqData, report) == nil {
			_, _ = (&trustService{s: s}).Report(east, report)
		}
		sign := &relayv1.TrustSignRequest{}
		if proto.Unmarshal(reqData, sign) == nil {
			_, _ = (&trustService{s: s}).Sign(east, sign)
		}
		for _, call := range []func() error{
			func() error {
				_, err := admin.RegisterCluster(east, &relayv1.RegisterClusterRequest{Cluster: "west"})
				return err
			},
			func() error {
				_, err := admin.DeregisterCluster(east, &relayv1.DeregisterClusterRequest{Cluster: "west"})
				return err
			},
			func() error { _, err := admin.ListClusters(east, &relayv1.ListClustersRequest{}); return err },
			func() error { _, err := admin.GetStatus(east, &relayv1.GetStatusRequest{}); return err },
			func() error { _, err := admin.List(east, &relayv1.ListRequest{}); return err },
			func() error { _, err := admin.DescribeCluster(east, &relayv1.DescribeRequest{}); return err },
			func() error { _, err := admin.DescribePolicy(east, &relayv1.DescribeRequest{}); return err },
			func() error { _, err := admin.DescribeDestination(east, &relayv1.DescribeRequest{}); return err },
		} {
			if err := call(); status.Code(err) != codes.Unauthenticated {
				t.Fatalf("an admin call by an agent = %v, want Unauthenticated", err)
			}
		}
		m := &relayv1.AgentMessage{}
		if proto.Unmarshal(msgData, m) != nil {
			return
		}
		if c := m.GetHello().GetCluster(); c != "" && c != "east" {
			if err := (&relay{s: s}).Sync(&fakeStream{ctx: east, msgs: []*relayv1.AgentMessage{m}}); status.Code(err) != codes.PermissionDenied {
				t.Fatalf("east's Sync naming %q = %v, want PermissionDenied", c, err)
			}
		}
	})
}
