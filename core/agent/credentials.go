package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/meshrelay/meshrelay/core/pki"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
)

// Files the agent keeps in its state directory.
const (
	certFile = "tls.crt"
	keyFile  = "tls.key"
	caFile   = "ca.crt"
)

// credentialSet is the agent's identity: the CA bundle it trusts and, under
// mTLS, its client certificate. The renewal loop replaces them while the
// relay loop dials, so they are read and written under mu.
type credentialSet struct {
	mu    sync.Mutex
	roots *x509.CertPool
	cert  *pki.Reloader
	leaf  *x509.Certificate
}

// get returns the current roots, certificate source and leaf.
func (c *credentialSet) get() (*x509.CertPool, *pki.Reloader, *x509.Certificate) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.roots, c.cert, c.leaf
}

// token reads the relay identity token.
func (a *Agent) token() (string, error) {
	if a.opts.TokenFile == "" {
		return "", errors.New("no --token-file to register with")
	}
	data, err := os.ReadFile(a.opts.TokenFile)
	if err != nil {
		return "", fmt.Errorf("read token: %w", err)
	}
	return strings.TrimSpace(string(data)), nil
}

// trustedRoots reads the CA bundle from the state directory or --ca-file.
func (a *Agent) trustedRoots() (*x509.CertPool, []byte, error) {
	for _, path := range []string{filepath.Join(a.opts.StateDir, caFile), a.opts.CAFile} {
		if path == "" || path == caFile {
			continue
		}
		data, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("read CA bundle: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(data) {
			return nil, nil, fmt.Errorf("CA bundle %s holds no certificate", path)
		}
		return pool, data, nil
	}
	return nil, nil, errors.New("no CA bundle: pass --ca-file")
}

// servers returns the relay addresses to try.
func (a *Agent) servers() []string {
	var out []string
	for _, s := range strings.Split(a.opts.Server, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// target returns the relay address to dial now.
func (a *Agent) target() string {
	servers := a.servers()
	return servers[int(a.attempt.Load())%len(servers)]
}

func (a *Agent) serverName() string {
	if a.opts.ServerName != "" {
		return a.opts.ServerName
	}
	host, _, err := net.SplitHostPort(a.target())
	if err != nil {
		return a.target()
	}
	return host
}

// dial opens a connection to the server. With withCert false it offers no
// client certificate (registration, TLS-only mode).
func (a *Agent) dial(withCert bool) (*grpc.ClientConn, error) {
	var creds credentials.TransportCredentials
	if a.opts.Insecure {
		creds = insecure.NewCredentials()
	} else {
		roots, cert, _ := a.creds.get()
		opts := pki.ClientTLSOptions{RootCAs: roots, ServerName: a.serverName()}
		if withCert && cert != nil {
			opts.Certificate = cert
		}
		creds = credentials.NewTLS(pki.ClientTLSConfig(opts))
	}
	dial := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(a.opts.MaxMessageBytes), grpc.MaxCallSendMsgSize(a.opts.MaxMessageBytes)),
		grpc.WithStaticStreamWindowSize(streamWindow),
		grpc.WithStaticConnWindowSize(connWindow),
		grpc.WithWriteBufferSize(writeBatch),
	}
	if a.opts.Keepalive > 0 {
		dial = append(dial, grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: a.opts.Keepalive, Timeout: a.opts.KeepaliveTimeout}))
	}
	return grpc.NewClient(a.target(), dial...)
}

// streamWindow and connWindow are the HTTP/2 flow-control windows of a
// stream and of a connection, fixed as the server fixes its own
// (core/server/server.go): a window that grows with the measured
// bandwidth-delay product costs a PING and its ack after every message
// that arrives on an idle connection, each server heartbeat.
const (
	streamWindow = 1 << 20
	connWindow   = 2 << 20
)

// writeBatch bounds what the agent writes to its connection at once, and
// so the TLS records it sends. crypto/tls reads a whole record into a
// buffer of its connection that it never gives back, and grows that
// buffer to about three records when it already holds part of the next:
// records of 16 KiB, the most TLS allows, would cost the server about
// 24 KiB for every agent connected, records of 4 KiB about 12, of 2 KiB
// about 7. What the agent sends in bulk, its first input, is a few dozen
// records more, 29 bytes each.
const writeBatch = 2 << 10

// ensureCredentials loads the agent's certificate from its state directory,
// or registers with the token to get one.
func (a *Agent) ensureCredentials(ctx context.Context) error {
	if a.opts.Insecure {
		return nil
	}
	roots, _, err := a.trustedRoots()
	if err != nil {
		return err
	}
	a.creds.mu.Lock()
	a.creds.roots = roots
	a.creds.mu.Unlock()
	if a.opts.Mode == pki.ModeTLS {
		return nil
	}
	if cert, err := tls.LoadX509KeyPair(filepath.Join(a.opts.StateDir, certFile), filepath.Join(a.opts.StateDir, keyFile)); err == nil {
		leaf, perr := x509.ParseCertificate(cert.Certificate[0])
		if perr == nil && time.Now().Before(leaf.NotAfter) {
			if r, err := pki.NewReloader(&cert); err == nil {
				a.creds.mu.Lock()
				a.creds.cert, a.creds.leaf = r, leaf
				a.creds.mu.Unlock()
				a.log.Info("using stored certificate", "expires", leaf.NotAfter)
				return nil
			}
		}
	}
	return a.register(ctx)
}

// register trades the token and a fresh key's CSR for a certificate.
func (a *Agent) register(ctx context.Context) error {
	tok, err := a.token()
	if err != nil {
		return err
	}
	key, csr, err := newKeyAndCSR(a.opts.Cluster)
	if err != nil {
		return err
	}
	conn, err := a.dial(false)
	if err != nil {
		return fmt.Errorf("register: %w", err)
	}
	defer conn.Close()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := relayv1.NewRegistrationClient(conn).Register(cctx, &relayv1.RegisterRequest{Cluster: a.opts.Cluster, Token: tok, Csr: csr})
	if err != nil {
		return fmt.Errorf("register: %w", err)
	}
	if err := a.storeCertificate(key, resp); err != nil {
		return err
	}
	_, _, leaf := a.creds.get()
	a.log.Info("registered", "expires", leaf.NotAfter)
	return nil
}

// renew gets a fresh certificate over mTLS, with a new key.
func (a *Agent) renew(ctx context.Context) error {
	key, csr, err := newKeyAndCSR(a.opts.Cluster)
	if err != nil {
		return err
	}
	conn, err := a.dial(true)
	if err != nil {
		return fmt.Errorf("renew: %w", err)
	}
	defer conn.Close()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := relayv1.NewRegistrationClient(conn).Renew(cctx, &relayv1.RenewRequest{Csr: csr})
	if err != nil {
		return fmt.Errorf("renew: %w", err)
	}
	if err := a.storeCertificate(key, resp); err != nil {
		return err
	}
	_, _, leaf := a.creds.get()
	a.log.Info("certificate renewed", "expires", leaf.NotAfter)
	return nil
}

func newKeyAndCSR(cluster string) ([]byte, []byte, error) {
	key, err := pki.NewKey()
	if err != nil {
		return nil, nil, err
	}
	csr, err := pki.NewCSR(key, cluster)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err := pki.KeyPEM(key)
	if err != nil {
		return nil, nil, err
	}
	return keyPEM, csr, nil
}

// storeCertificate swaps in a new certificate and keeps it in the state directory.
func (a *Agent) storeCertificate(keyPEM []byte, resp *relayv1.Certificate) error {
	cert, err := tls.X509KeyPair(resp.GetChain(), keyPEM)
	if err != nil {
		return fmt.Errorf("server sent an unusable certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return fmt.Errorf("server sent an unusable certificate: %w", err)
	}
	a.creds.mu.Lock()
	if a.creds.cert == nil {
		a.creds.cert, err = pki.NewReloader(&cert)
	} else {
		err = a.creds.cert.Store(&cert)
	}
	if err == nil {
		a.creds.leaf = leaf
		if pool := x509.NewCertPool(); len(resp.GetCaBundle()) > 0 && pool.AppendCertsFromPEM(resp.GetCaBundle()) {
			a.creds.roots = pool
		}
	}
	a.creds.mu.Unlock()
	if err != nil {
		return err
	}
	if a.opts.StateDir == "" {
		return nil
	}
	for name, data := range map[string][]byte{keyFile: keyPEM, certFile: resp.GetChain(), caFile: resp.GetCaBundle()} {
		if len(data) == 0 {
			continue
		}
		if err := a.keepState(name, data); err != nil {
			return fmt.Errorf("keep certificate: %w", err)
		}
	}
	return nil
}

// keepState writes one file of the state directory atomically, readable
// by the agent only.
func (a *Agent) keepState(name string, data []byte) error {
	if err := os.MkdirAll(a.opts.StateDir, 0o700); err != nil {
		return err
	}
	tmp := filepath.Join(a.opts.StateDir, "."+name+".tmp")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(a.opts.StateDir, name))
}

// renewLoop renews the certificate at two thirds of its life.
func (a *Agent) renewLoop(ctx context.Context) error {
	if a.opts.Insecure || a.opts.Mode == pki.ModeTLS {
		return nil
	}
	retry := time.Second
	for {
		_, _, leaf := a.creds.get()
		wait := time.Until(pki.RenewAt(leaf))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(max(wait, 0)):
		}
		if err := a.renew(ctx); err != nil {
			a.log.Warn("renew certificate; retrying", "error", err, "retry_in", retry)
			if time.Now().After(leaf.NotAfter) {
				// Expired: fall back to the token.
				if rerr := a.register(ctx); rerr == nil {
					retry = time.Second
					continue
				}
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(retry):
			}
			retry = min(retry*2, time.Minute)
			continue
		}
		retry = time.Second
	}
}
