package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshrelay/meshrelay/core/pki"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
)

// attackDial connects to a running server, with a client certificate when
// given.
func attackDial(t *testing.T, addr string, pool *x509.CertPool, cert *tls.Certificate) *grpc.ClientConn {
	opts := pki.ClientTLSOptions{RootCAs: pool, ServerName: "127.0.0.1"}
	if cert != nil {
		r, err := pki.NewReloader(cert)
		if err != nil {
			t.Fatal(err)
		}
		opts.Certificate = r
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(pki.ClientTLSConfig(opts))),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(32<<20), grpc.MaxCallRecvMsgSize(32<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// attackSync registers a cluster on a running server and opens its Sync
// stream with a Hello, as its agent would.
func attackSync(t *testing.T, addr, dataDir string, pool *x509.CertPool) (string, relayv1.Relay_SyncClient) {
	name, cert := attackCluster(t, addr, dataDir, pool, "attacker")
	stream, err := relayv1.NewRelayClient(attackDial(t, addr, pool, cert)).Sync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&relayv1.AgentMessage{Msg: &relayv1.AgentMessage_Hello{Hello: &relayv1.Hello{Cluster: name}}}); err != nil {
		t.Fatal(err)
	}
	return name, stream
}

// attackAdmin returns a context with the running server's admin token.
func attackAdmin(t *testing.T, dataDir string) context.Context {
	tok, err := os.ReadFile(filepath.Join(dataDir, "admin-token"))
	if err != nil {
		t.Fatal(err)
	}
	return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+strings.TrimSpace(string(tok)))
}

// attackCluster registers a cluster on a running server and returns its
// client certificate.
func attackCluster(t *testing.T, addr, dataDir string, pool *x509.CertPool, prefix string) (string, *tls.Certificate) {
	name := fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano()%100000)
	resp, err := relayv1.NewAdminClient(attackDial(t, addr, pool, nil)).RegisterCluster(attackAdmin(t, dataDir), &relayv1.RegisterClusterRequest{Cluster: name})
	if err != nil {
		t.Fatal(err)
	}
	key, _ := pki.NewKey()
	csr, _ := pki.NewCSR(key, name)
	c, err := relayv1.NewRegistrationClient(attackDial(t, addr, pool, nil)).Register(context.Background(), &relayv1.RegisterRequest{Cluster: name, Token: resp.GetToken(), Csr: csr})
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, _ := pki.KeyPEM(key)
	cert, err := tls.X509KeyPair(c.GetChain(), keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return name, &cert
}

// attackH2 opens a raw HTTP/2 connection to a running server.
func attackH2(t *testing.T, addr string, pool *x509.CertPool, cert *tls.Certificate) *h2conn {
	cfg := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS13}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	tc, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tc.Close() })
	h := &h2conn{c: tc, conn: 65535, init: 65535, stream: map[uint32]int64{}, closed: map[uint32]bool{}}
	h.cond = sync.NewCond(&h.mu)
	if _, err := tc.Write([]byte(h2Preface)); err != nil {
		t.Fatal(err)
	}
	h.frame(4, 0, 0, nil)
	go h.read()
	return h
}

// attackRenew: one agent's certificate, 40 unfinished 16 MiB Renew
// messages on one connection.
func attackRenew(t *testing.T, addr, dataDir string, pool *x509.CertPool) {
	_, cert := attackCluster(t, addr, dataDir, pool, "renew")
	h := attackH2(t, addr, pool, cert)
	h.hold(addr, relayv1.Registration_Renew_FullMethodName, 1, 40, 16<<20)
	time.Sleep(3 * time.Second)
	t.Logf("connection closed by the server: %v", h.closedByServer())
}

// attackRegister: no credentials (--mode tls), 5 connections of 8
// unfinished 16 MiB Register messages.
func attackRegister(t *testing.T, addr string, pool *x509.CertPool) {
	var hs []*h2conn
	for range 5 {
		h := attackH2(t, addr, pool, nil)
		h.hold(addr, relayv1.Registration_Register_FullMethodName, 1, 8, 16<<20)
		hs = append(hs, h)
	}
	time.Sleep(3 * time.Second)
	closed := 0
	for _, h := range hs {
		if h.closedByServer() {
			closed++
		}
	}
	t.Logf("connections closed by the server: %d of 5", closed)
}

// attackHellos: one agent's certificate holds 70 Sync streams without a
// Hello, reopened as they end, while another cluster's agent tries to
// connect every half second for 30 seconds.
func attackHellos(t *testing.T, addr, dataDir string, pool *x509.CertPool) {
	_, evil := attackCluster(t, addr, dataDir, pool, "evil")
	name, good := attackCluster(t, addr, dataDir, pool, "good")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	conn := attackDial(t, addr, pool, evil)
	for range 70 {
		go func() {
			for ctx.Err() == nil {
				s, err := relayv1.NewRelayClient(conn).Sync(ctx)
				if err == nil {
					_, _ = s.Recv()
				}
			}
		}()
	}
	time.Sleep(time.Second)
	welcomed, tries := 0, 0
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		tries++
		sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
		conn := attackDial(t, addr, pool, good)
		s, err := relayv1.NewRelayClient(conn).Sync(sctx)
		if err == nil {
			_ = s.Send(&relayv1.AgentMessage{Msg: &relayv1.AgentMessage_Hello{Hello: &relayv1.Hello{Cluster: name}}})
			if m, err := s.Recv(); err == nil && m.GetWelcome() != nil {
				welcomed++
			}
		}
		scancel()
		conn.Close()
	}
	t.Logf("legitimate agent welcomed %d times in %d tries over 30s", welcomed, tries)
}

// attackConns: one agent's certificate holds as many idle connections as
// the server accepts (197 of --max-connections 200), then an agent of
// another cluster, an administrator and a new registration try their luck.
func attackConns(t *testing.T, addr, dataDir string, pool *x509.CertPool) {
	_, evil := attackCluster(t, addr, dataDir, pool, "evil")
	name, good := attackCluster(t, addr, dataDir, pool, "good")
	newTok, err := relayv1.NewAdminClient(attackDial(t, addr, pool, nil)).RegisterCluster(attackAdmin(t, dataDir), &relayv1.RegisterClusterRequest{Cluster: "newcomer"})
	if err != nil {
		t.Fatal(err)
	}
	held := 0
	for range 197 {
		tc, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{*evil}})
		if err == nil {
			held++
			defer tc.Close()
		}
	}
	time.Sleep(time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, listErr := relayv1.NewAdminClient(attackDial(t, addr, pool, nil)).ListClusters(attackAdmin(t, dataDir), &relayv1.ListClustersRequest{})
	key, _ := pki.NewKey()
	csr, _ := pki.NewCSR(key, "newcomer")
	_, regErr := relayv1.NewRegistrationClient(attackDial(t, addr, pool, nil)).Register(ctx, &relayv1.RegisterRequest{Cluster: "newcomer", Token: newTok.GetToken(), Csr: csr})
	var syncErr error
	s, err := relayv1.NewRelayClient(attackDial(t, addr, pool, good)).Sync(ctx)
	if err == nil {
		_ = s.Send(&relayv1.AgentMessage{Msg: &relayv1.AgentMessage_Hello{Hello: &relayv1.Hello{Cluster: name}}})
		_, err = s.Recv()
	}
	syncErr = err
	t.Logf("attacker dialled %d; ListClusters: %v; Register: %v; Sync: %v", held, listErr, regErr, syncErr)
}
