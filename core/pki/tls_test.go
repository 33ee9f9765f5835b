package pki

import (
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// result is what both ends of one test connection saw.
type result struct {
	serverErr error
	clientErr error
	// state is the server's view of an accepted connection.
	state tls.ConnectionState
	// serverCert is the leaf the client received.
	serverCert *x509.Certificate
}

func (r result) ok() bool { return r.serverErr == nil && r.clientErr == nil }

// handshake runs one real TLS connection over a loopback listener. The
// server writes "ok" after its handshake succeeds; with TLS 1.3 the client
// learns that the server refused its certificate only when it reads.
func handshake(t *testing.T, server, client *tls.Config) result {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", server)
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	var (
		res result
		wg  sync.WaitGroup
	)
	wg.Go(func() {
		conn, err := ln.Accept()
		if err != nil {
			res.serverErr = err
			return
		}
		defer conn.Close()
		tc := conn.(*tls.Conn)
		if err := tc.HandshakeContext(ctx); err != nil {
			res.serverErr = err
			return
		}
		res.state = tc.ConnectionState()
		_ = tc.SetWriteDeadline(time.Now().Add(5 * time.Second))
		if _, err := tc.Write([]byte("ok")); err != nil {
			res.serverErr = err
		}
	})

	d := tls.Dialer{Config: client}
	conn, err := d.DialContext(ctx, "tcp", ln.Addr().String())
	if err != nil {
		res.clientErr = err
		_ = ln.Close()
		wg.Wait()
		return res
	}
	defer conn.Close()
	tc := conn.(*tls.Conn)
	if peers := tc.ConnectionState().PeerCertificates; len(peers) > 0 {
		res.serverCert = peers[0]
	}
	_ = tc.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 2)
	if _, err := io.ReadFull(tc, buf); err != nil {
		res.clientErr = err
	} else if string(buf) != "ok" {
		res.clientErr = errors.New("unexpected reply " + string(buf))
	}
	wg.Wait()
	return res
}

// verifyLog records the calls of a VerifyCluster hook and refuses the
// clusters and serials it lists.
type verifyLog struct {
	mu      sync.Mutex
	calls   [][2]string
	revoked map[string]bool
}

func (v *verifyLog) verify(cluster, serial string) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.calls = append(v.calls, [2]string{cluster, serial})
	if v.revoked[cluster] || v.revoked[serial] {
		return errors.New("revoked")
	}
	return nil
}

func (v *verifyLog) clusters() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []string
	for _, c := range v.calls {
		out = append(out, c[0])
	}
	return out
}

func TestMTLS(t *testing.T) {
	ca := newTestCA(t, "relay")
	otherCA := newTestCA(t, "impostor")
	srv := reloader(t, serverCert(t, ca))

	good := clusterCert(t, ca, "alpha", time.Hour)
	revoked := clusterCert(t, ca, "alpha", time.Hour)
	deregistered := clusterCert(t, ca, "gone", time.Hour)
	foreign := clusterCert(t, otherCA, "alpha", time.Hour)
	// An expired certificate: issued two days ago for one day.
	past := *ca
	past.now = func() time.Time { return time.Now().Add(-48 * time.Hour) }
	expired := clusterCert(t, &past, "alpha", 24*time.Hour)
	notYet := *ca
	notYet.now = func() time.Time { return time.Now().Add(10 * time.Minute) }
	future := clusterCert(t, &notYet, "alpha", 30*time.Minute)
	// A server certificate is not a client certificate.
	serverAsClient := serverCert(t, ca)
	// A certificate from the right CA claiming two clusters.
	twoIDs := func() *tls.Certificate {
		key, err := NewKey()
		if err != nil {
			t.Fatal(err)
		}
		a, _ := url.Parse(ClusterURI("alpha"))
		b, _ := url.Parse(ClusterURI("beta"))
		der, err := ca.issue(&x509.Certificate{
			URIs:        []*url.URL{a, b},
			KeyUsage:    x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}, key.Public(), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	}()

	for name, tc := range map[string]struct {
		mode        ClientAuth
		cert        *tls.Certificate
		clientRoots *x509.CertPool
		serverName  string
		maxVersion  uint16
		wantOK      bool
		wantCluster string
		wantCalled  bool
		// wantErr is part of the error of the side that refused.
		wantErr string
	}{
		"good cert":                  {cert: good, wantOK: true, wantCluster: "alpha", wantCalled: true},
		"good cert, if given":        {mode: VerifyClientCertIfGiven, cert: good, wantOK: true, wantCluster: "alpha", wantCalled: true},
		"no cert":                    {wantErr: "client didn't provide a certificate"},
		"no cert, if given":          {mode: VerifyClientCertIfGiven, wantOK: true},
		"cert from another CA":       {cert: foreign, wantErr: "unknown authority"},
		"another CA, if given":       {mode: VerifyClientCertIfGiven, cert: foreign, wantErr: "unknown authority"},
		"expired cert":               {cert: expired, wantErr: "expired"},
		"expired cert, if given":     {mode: VerifyClientCertIfGiven, cert: expired, wantErr: "expired"},
		"not yet valid cert":         {cert: future, wantErr: "not yet valid"},
		"revoked serial":             {cert: revoked, wantCalled: true, wantErr: "refused: revoked"},
		"revoked serial, if given":   {mode: VerifyClientCertIfGiven, cert: revoked, wantCalled: true, wantErr: "refused: revoked"},
		"deregistered cluster":       {cert: deregistered, wantCalled: true, wantErr: "cluster \"gone\" certificate"},
		"server cert as client":      {cert: serverAsClient, wantErr: "incompatible key usage"},
		"two identities":             {cert: twoIDs, wantErr: "2 URI SANs"},
		"client distrusts server":    {cert: good, clientRoots: otherCA.Pool(), wantErr: "unknown authority"},
		"server name mismatch":       {cert: good, serverName: "relay.example.com", wantErr: "not relay.example.com"},
		"TLS 1.2 client refused":     {cert: good, maxVersion: tls.VersionTLS12, wantErr: "unsupported versions"},
		"TLS 1.2 no cert, if given":  {mode: VerifyClientCertIfGiven, maxVersion: tls.VersionTLS12, wantErr: "unsupported versions"},
		"IP address as server name":  {cert: good, serverName: "127.0.0.1", wantOK: true, wantCluster: "alpha", wantCalled: true},
		"no roots given trusts none": {cert: good, clientRoots: x509.NewCertPool(), wantErr: "unknown authority"},
	} {
		t.Run(name, func(t *testing.T) {
			log := &verifyLog{revoked: map[string]bool{"gone": true, Serial(parseLeaf(t, revoked)): true}}
			server := ServerTLSConfig(ServerTLSOptions{
				Certificate:   srv,
				ClientCAs:     ca.Pool(),
				ClientAuth:    tc.mode,
				VerifyCluster: log.verify,
			})
			roots := ca.Pool()
			if tc.clientRoots != nil {
				roots = tc.clientRoots
			}
			serverName := "localhost"
			if tc.serverName != "" {
				serverName = tc.serverName
			}
			var src CertSource
			if tc.cert != nil {
				src = reloader(t, tc.cert)
			}
			client := ClientTLSConfig(ClientTLSOptions{RootCAs: roots, ServerName: serverName, Certificate: src})
			if tc.maxVersion != 0 {
				client.MinVersion = tc.maxVersion
				client.MaxVersion = tc.maxVersion
			}

			res := handshake(t, server, client)
			t.Logf("server: %v; client: %v", res.serverErr, res.clientErr)
			if res.ok() != tc.wantOK {
				t.Fatalf("handshake ok = %v (server: %v; client: %v), want %v", res.ok(), res.serverErr, res.clientErr, tc.wantOK)
			}
			if !tc.wantOK {
				err := res.serverErr
				if err == nil || tc.clientRoots != nil || tc.serverName != "" {
					err = res.clientErr // the client refused the server
				}
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("refusal = %v, want an error containing %q", err, tc.wantErr)
				}
			}
			if called := len(log.clusters()) > 0; called != tc.wantCalled {
				t.Errorf("VerifyCluster called = %v (%q), want %v", called, log.clusters(), tc.wantCalled)
			}
			if !tc.wantOK {
				return
			}
			cluster, serial, err := ClusterFromConnectionState(res.state)
			if tc.wantCluster == "" {
				if !errors.Is(err, ErrNoClientCertificate) {
					t.Errorf("ClusterFromConnectionState = %q, %v; want ErrNoClientCertificate", cluster, err)
				}
				return
			}
			if err != nil || cluster != tc.wantCluster || serial != Serial(parseLeaf(t, tc.cert)) {
				t.Errorf("ClusterFromConnectionState = %q, %q, %v; want %q, %q", cluster, serial, err, tc.wantCluster, Serial(parseLeaf(t, tc.cert)))
			}
			if got := log.calls[0]; got != [2]string{cluster, serial} {
				t.Errorf("VerifyCluster got %q, want %q", got, [2]string{cluster, serial})
			}
		})
	}
}

func parseLeaf(t *testing.T, cert *tls.Certificate) *x509.Certificate {
	t.Helper()
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return leaf
}

// TestRevocationOnResumption checks that a session resumed after a cluster
// is revoked is refused too.
func TestRevocationOnResumption(t *testing.T) {
	ca := newTestCA(t, "relay")
	log := &verifyLog{revoked: map[string]bool{}}
	server := ServerTLSConfig(ServerTLSOptions{
		Certificate:   reloader(t, serverCert(t, ca)),
		ClientCAs:     ca.Pool(),
		VerifyCluster: log.verify,
	})
	client := ClientTLSConfig(ClientTLSOptions{
		RootCAs:     ca.Pool(),
		ServerName:  "localhost",
		Certificate: reloader(t, clusterCert(t, ca, "alpha", time.Hour)),
	})
	client.ClientSessionCache = tls.NewLRUClientSessionCache(4)

	if res := handshake(t, server, client); !res.ok() {
		t.Fatalf("first handshake: server %v, client %v", res.serverErr, res.clientErr)
	}
	res := handshake(t, server, client)
	if !res.ok() || !res.state.DidResume {
		t.Fatalf("second handshake ok=%v resumed=%v (server %v, client %v), want a resumed session", res.ok(), res.state.DidResume, res.serverErr, res.clientErr)
	}
	log.mu.Lock()
	log.revoked["alpha"] = true
	log.mu.Unlock()
	if res := handshake(t, server, client); res.ok() {
		t.Errorf("handshake after revocation succeeded (resumed=%v), want refused", res.state.DidResume)
	}
}

func TestServerTLSOptionsValidate(t *testing.T) {
	ca := newTestCA(t, "v")
	src := reloader(t, serverCert(t, ca))
	for name, tc := range map[string]struct {
		opts ServerTLSOptions
		ok   bool
	}{
		"complete":     {opts: ServerTLSOptions{Certificate: src, ClientCAs: ca.Pool()}, ok: true},
		"no cert":      {opts: ServerTLSOptions{ClientCAs: ca.Pool()}},
		"no pool":      {opts: ServerTLSOptions{Certificate: src}},
		"unknown mode": {opts: ServerTLSOptions{Certificate: src, ClientCAs: ca.Pool(), ClientAuth: 7}},
	} {
		t.Run(name, func(t *testing.T) {
			if err := tc.opts.Validate(); (err == nil) != tc.ok {
				t.Errorf("Validate() = %v, want ok=%v", err, tc.ok)
			}
		})
	}

	// Incomplete options fail closed.
	client := ClientTLSConfig(ClientTLSOptions{RootCAs: ca.Pool(), ServerName: "localhost", Certificate: reloader(t, clusterCert(t, ca, "alpha", time.Hour))})
	if res := handshake(t, ServerTLSConfig(ServerTLSOptions{Certificate: src}), client); res.ok() {
		t.Errorf("server without a client CA pool accepted a client certificate")
	}
	if res := handshake(t, ServerTLSConfig(ServerTLSOptions{Certificate: &Reloader{}, ClientCAs: ca.Pool()}), client); res.ok() {
		t.Errorf("server without a certificate completed a handshake")
	}
}

// TestReloader swaps the server's and the agent's certificates between
// connections, and while handshakes run, without rebuilding either config.
func TestReloader(t *testing.T) {
	ca := newTestCA(t, "relay")
	srv1, srv2 := serverCert(t, ca), serverCert(t, ca)
	serverSrc := reloader(t, srv1)
	agentSrc := &Reloader{}
	log := &verifyLog{}
	server := ServerTLSConfig(ServerTLSOptions{
		Certificate:   serverSrc,
		ClientCAs:     ca.Pool(),
		ClientAuth:    VerifyClientCertIfGiven,
		VerifyCluster: log.verify,
	})
	client := ClientTLSConfig(ClientTLSOptions{RootCAs: ca.Pool(), ServerName: "localhost", Certificate: agentSrc})

	// Registration: no client certificate yet.
	res := handshake(t, server, client)
	if !res.ok() || len(res.state.PeerCertificates) != 0 {
		t.Fatalf("registration handshake ok=%v peers=%d (server %v, client %v)", res.ok(), len(res.state.PeerCertificates), res.serverErr, res.clientErr)
	}
	if !res.serverCert.Equal(srv1.Leaf) {
		t.Errorf("client saw server certificate %s, want %s", Serial(res.serverCert), Serial(srv1.Leaf))
	}

	// The agent stores its signed certificate as PEM, as after registration.
	key, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := KeyPEM(key)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := NewCSR(key, "alpha")
	if err != nil {
		t.Fatal(err)
	}
	chainPEM, serial1, _, err := ca.SignClusterCSR(csr, "alpha", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := agentSrc.StorePEM(chainPEM, keyPEM); err != nil {
		t.Fatalf("StorePEM = %v", err)
	}
	res = handshake(t, server, client)
	if c, s, err := ClusterFromConnectionState(res.state); !res.ok() || err != nil || c != "alpha" || s != serial1 {
		t.Fatalf("after StorePEM: ok=%v cluster=%q serial=%q err=%v, want alpha %s", res.ok(), c, s, err, serial1)
	}

	// Renewal and server rotation.
	renewed := clusterCert(t, ca, "alpha", time.Hour)
	if err := agentSrc.Store(renewed); err != nil {
		t.Fatal(err)
	}
	if err := serverSrc.Store(srv2); err != nil {
		t.Fatal(err)
	}
	res = handshake(t, server, client)
	if _, s, err := ClusterFromConnectionState(res.state); !res.ok() || err != nil || s != Serial(parseLeaf(t, renewed)) {
		t.Errorf("after renewal: ok=%v serial=%q err=%v, want %s", res.ok(), s, err, Serial(parseLeaf(t, renewed)))
	}
	if res.serverCert == nil || !res.serverCert.Equal(srv2.Leaf) {
		t.Errorf("client did not see the rotated server certificate")
	}

	// Swaps racing handshakes: every handshake sees one whole certificate.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		certs := []*tls.Certificate{srv1, srv2}
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := serverSrc.Store(certs[i%2]); err != nil {
				t.Error(err)
				return
			}
		}
	})
	for range 5 {
		if res := handshake(t, server, client); !res.ok() {
			t.Errorf("handshake during swaps: server %v, client %v", res.serverErr, res.clientErr)
		}
	}
	close(stop)
	wg.Wait()

	// Bad input leaves the current certificate in place.
	before := agentSrc.Current()
	for name, store := range map[string]func() error{
		"nil":          func() error { return agentSrc.Store(nil) },
		"no key":       func() error { return agentSrc.Store(&tls.Certificate{Certificate: renewed.Certificate}) },
		"garbage PEM":  func() error { return agentSrc.StorePEM([]byte("x"), keyPEM) },
		"wrong key":    func() error { return agentSrc.StorePEM(chainPEM, mustKeyPEM(t)) },
		"missing file": func() error { return agentSrc.LoadFiles("/nonexistent/c", "/nonexistent/k") },
	} {
		if err := store(); err == nil {
			t.Errorf("%s: store = nil error, want error", name)
		}
	}
	if agentSrc.Current() != before {
		t.Errorf("a failed store replaced the certificate")
	}
}

func TestReloaderLoadFiles(t *testing.T) {
	ca := newTestCA(t, "files")
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	write := func(cert *tls.Certificate) {
		t.Helper()
		var chain []byte
		for _, der := range cert.Certificate {
			chain = append(chain, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
		}
		keyPEM, err := KeyPEM(cert.PrivateKey.(crypto.Signer))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(certFile, chain, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	r := &Reloader{}
	for range 2 {
		cert := serverCert(t, ca)
		write(cert)
		if err := r.LoadFiles(certFile, keyFile); err != nil {
			t.Fatalf("LoadFiles = %v", err)
		}
		if got := r.Current(); got == nil || got.Leaf == nil || !got.Leaf.Equal(cert.Leaf) {
			t.Errorf("LoadFiles did not install the certificate on disk")
		}
	}
}

func TestClientWithoutRootsTrustsNothing(t *testing.T) {
	// A nil RootCAs must not fall back to the system roots.
	cfg := ClientTLSConfig(ClientTLSOptions{ServerName: "localhost"})
	if cfg.RootCAs == nil || cfg.MinVersion != tls.VersionTLS13 {
		t.Errorf("ClientTLSConfig(no roots) RootCAs=%v MinVersion=%x, want an empty pool and TLS 1.3", cfg.RootCAs, cfg.MinVersion)
	}
	ca := newTestCA(t, "x")
	server := ServerTLSConfig(ServerTLSOptions{Certificate: reloader(t, serverCert(t, ca)), ClientCAs: ca.Pool(), ClientAuth: VerifyClientCertIfGiven})
	if res := handshake(t, server, cfg); res.ok() {
		t.Errorf("client without roots accepted the server")
	}
}

func mustKeyPEM(t *testing.T) []byte {
	t.Helper()
	key, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	p, err := KeyPEM(key)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
