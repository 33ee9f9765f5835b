package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/agent"
	"github.com/meshrelay/meshrelay/core/pki"
	"github.com/meshrelay/meshrelay/core/pluginhost"
	"github.com/meshrelay/meshrelay/core/store"
	"github.com/meshrelay/meshrelay/core/store/memory"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
)

// echo is an in-process translator for relay tests: for every Service in a
// cluster's inputs it emits a ConfigMap into that cluster's "test" output
// naming the cluster, so tests see whose outputs an agent receives.
type echo struct {
	mu   sync.Mutex
	view map[string]map[snapshot.ID]snapshot.Resource
	last map[string]snapshot.Hash
}

func newEcho() *echo {
	return &echo{view: map[string]map[snapshot.ID]snapshot.Resource{}, last: map[string]snapshot.Hash{}}
}

func (e *echo) Name() string       { return "echo" }
func (e *echo) Backends() []string { return []string{"test"} }
func (e *echo) Meshes() []string   { return nil }

// OutputKinds declares nothing: the echoed inputs are of any kind.
func (e *echo) OutputKinds() []string { return nil }
func (e *echo) InputKinds() []string  { return nil }

func (e *echo) Translate(_ context.Context, v pluginhost.View) (pluginhost.Result, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.view = map[string]map[snapshot.ID]snapshot.Resource{}
	for name, c := range v.Clusters {
		if v.Scoped && !slices.Contains(v.Targets, name) {
			delete(e.last, name) // forgotten, as an SDK session forgets it
		}
		objs := map[snapshot.ID]snapshot.Resource{}
		for r := range c.Input.All() {
			objs[r.ID] = r
		}
		e.view[name] = objs
	}
	for name := range e.last {
		if _, ok := v.Clusters[name]; !ok {
			delete(e.last, name)
		}
	}
	res := pluginhost.Result{Sent: true}
	for cluster, objs := range e.view {
		if v.Scoped && !slices.Contains(v.Targets, cluster) {
			continue
		}
		var out []snapshot.Resource
		for id := range objs {
			if id.Kind != "Service" {
				continue
			}
			r, err := snapshot.FromJSON([]byte(fmt.Sprintf(
				`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"%s","namespace":"%s"},"data":{"cluster":"%s"}}`,
				id.Name, id.Namespace, cluster)))
			if err != nil {
				return res, err
			}
			out = append(out, r)
		}
		// One ConfigMap per other cluster in the view: outputs depend on
		// the whole fleet, as real translators' do.
		for peer := range e.view {
			if peer == cluster {
				continue
			}
			r, err := snapshot.FromJSON([]byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"peer-` + peer + `","namespace":"meshrelay"}}`))
			if err != nil {
				return res, err
			}
			out = append(out, r)
		}
		s, err := snapshot.New(0, out)
		if err != nil {
			return res, err
		}
		if e.last[cluster] == s.Hash() {
			continue
		}
		e.last[cluster] = s.Hash()
		res.Outputs = append(res.Outputs, pluginhost.ClusterOutput{Cluster: cluster, Backend: "test", Resources: out})
	}
	return res, nil
}

// testServer is a server on loopback with a memory store.
type testServer struct {
	*Server
	t      *testing.T
	store  store.Store
	dir    string
	cancel context.CancelFunc
	done   chan error
}

type serverOption func(*Options)

func startServer(t *testing.T, st store.Store, dir string, mods ...serverOption) *testServer {
	t.Helper()
	return startServerDeps(t, st, dir, nil, mods...)
}

// startServerDeps is startServer with more dependencies set by deps.
func startServerDeps(t *testing.T, st store.Store, dir string, deps func(*Deps), mods ...serverOption) *testServer {
	t.Helper()
	if st == nil {
		st = memory.New()
	}
	if dir == "" {
		dir = t.TempDir()
	}
	opts := DefaultOptions()
	opts.ListenAddr = "127.0.0.1:0"
	opts.AdminAddr = "127.0.0.1:0"
	opts.DataDir = dir
	opts.Debounce = 10 * time.Millisecond
	opts.Heartbeat = time.Second
	// Agents stay where a test puts them unless it tests rebalancing.
	opts.RebalanceInterval = 0
	// Replicas of one store share the secret the CA key is encrypted with.
	opts.CAKeyEncryptionKey = "test-ca-key-encryption-key"
	for _, m := range mods {
		m(&opts)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := Deps{Store: st, Translators: []pluginhost.Translator{newEcho()}}
	if deps != nil {
		deps(&d)
	}
	s, err := New(ctx, opts, d)
	if err != nil {
		cancel()
		t.Fatalf("New server: %v", err)
	}
	ts := &testServer{Server: s, t: t, store: st, dir: dir, cancel: cancel, done: make(chan error, 1)}
	go func() { ts.done <- s.Run(ctx) }()
	t.Cleanup(ts.stop)
	return ts
}

func (ts *testServer) stop() {
	if ts.cancel == nil {
		return
	}
	ts.cancel()
	ts.cancel = nil
	select {
	case <-ts.done:
	case <-time.After(10 * time.Second):
		ts.t.Error("server did not stop within 10s")
	}
}

// adminToken reads the generated admin token.
func (ts *testServer) adminToken() string {
	data, err := os.ReadFile(ts.AdminTokenPath())
	if err != nil {
		ts.t.Fatal(err)
	}
	return strings.TrimSpace(string(data))
}

// dial connects to the server, with a client certificate when given.
func (ts *testServer) dial(cert *tls.Certificate) *grpc.ClientConn {
	ts.t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ts.CABundle())
	opts := pki.ClientTLSOptions{RootCAs: pool, ServerName: "127.0.0.1"}
	if cert != nil {
		r, err := pki.NewReloader(cert)
		if err != nil {
			ts.t.Fatal(err)
		}
		opts.Certificate = r
	}
	conn, err := grpc.NewClient(ts.Addr(), grpc.WithTransportCredentials(credentials.NewTLS(pki.ClientTLSConfig(opts))))
	if err != nil {
		ts.t.Fatal(err)
	}
	ts.t.Cleanup(func() { conn.Close() })
	return conn
}

func (ts *testServer) adminCtx() context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+ts.adminToken())
}

// register creates a cluster and returns its token.
func (ts *testServer) register(name string) string {
	ts.t.Helper()
	resp, err := relayv1.NewAdminClient(ts.dial(nil)).RegisterCluster(ts.adminCtx(), &relayv1.RegisterClusterRequest{Cluster: name})
	if err != nil {
		ts.t.Fatalf("RegisterCluster(%q): %v", name, err)
	}
	return resp.GetToken()
}

// registerWith creates a cluster as req says and returns its token.
func (ts *testServer) registerWith(req *relayv1.RegisterClusterRequest) string {
	ts.t.Helper()
	resp, err := relayv1.NewAdminClient(ts.dial(nil)).RegisterCluster(ts.adminCtx(), req)
	if err != nil {
		ts.t.Fatalf("RegisterCluster(%v): %v", req, err)
	}
	return resp.GetToken()
}

// certificate registers with the token and returns a client certificate.
func (ts *testServer) certificate(cluster, token string) (*tls.Certificate, error) {
	key, err := pki.NewKey()
	if err != nil {
		return nil, err
	}
	csr, err := pki.NewCSR(key, cluster)
	if err != nil {
		return nil, err
	}
	resp, err := relayv1.NewRegistrationClient(ts.dial(nil)).Register(context.Background(), &relayv1.RegisterRequest{Cluster: cluster, Token: token, Csr: csr})
	if err != nil {
		return nil, err
	}
	keyPEM, err := pki.KeyPEM(key)
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(resp.GetChain(), keyPEM)
	return &cert, err
}

// memSource is a discovery source the test sets by hand.
type memSource struct {
	ch chan *snapshot.Snapshot
}

func newMemSource() *memSource { return &memSource{ch: make(chan *snapshot.Snapshot, 16)} }

func (m *memSource) Run(ctx context.Context, publish func(*snapshot.Snapshot)) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case s := <-m.ch:
			publish(s)
		}
	}
}

func (m *memSource) set(t testing.TB, services ...string) {
	t.Helper()
	var rs []snapshot.Resource
	for _, name := range services {
		r, err := snapshot.FromJSON([]byte(`{"apiVersion":"v1","kind":"Service","metadata":{"name":"` + name + `","namespace":"default"},"spec":{"ports":[{"port":80}]}}`))
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	s, err := snapshot.New(0, rs)
	if err != nil {
		t.Fatal(err)
	}
	m.ch <- s
}

// recordingSink keeps what it was asked to apply and counts creates and
// deletes, as a cluster would see them.
type recordingSink struct {
	mu      sync.Mutex
	current map[snapshot.ID]snapshot.Hash
	creates int
	deletes int
	prunes  []bool
	last    *snapshot.Snapshot
	// fail are the resources Apply reports an error for, by kind and name.
	fail map[string]string
}

// failApply makes Apply report msg for every resource of kind and name.
func (r *recordingSink) failApply(kind, name, msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail == nil {
		r.fail = map[string]string{}
	}
	r.fail[kind+"/"+name] = msg
}

func newRecordingSink() *recordingSink {
	return &recordingSink{current: map[snapshot.ID]snapshot.Hash{}}
}

func (r *recordingSink) Apply(_ context.Context, _ string, desired *snapshot.Snapshot, prune bool) (map[snapshot.ID]error, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.prunes = append(r.prunes, prune)
	r.last = desired
	var errs map[snapshot.ID]error
	for res := range desired.All() {
		if msg, ok := r.fail[res.ID.Kind+"/"+res.ID.Name]; ok {
			if errs == nil {
				errs = map[snapshot.ID]error{}
			}
			errs[res.ID] = errors.New(msg)
		}
	}
	want := map[snapshot.ID]bool{}
	for res := range desired.All() {
		want[res.ID] = true
		if _, ok := r.current[res.ID]; !ok {
			r.creates++
		}
		r.current[res.ID] = res.Hash
	}
	if prune {
		for id := range r.current {
			if !want[id] {
				delete(r.current, id)
				r.deletes++
			}
		}
	}
	return errs, nil
}

func (r *recordingSink) names() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for id := range r.current {
		if id.Namespace != "meshrelay" {
			out = append(out, id.Name)
		}
	}
	return sortStrings(out)
}

// peers returns the peer ConfigMaps applied: the other clusters this
// cluster's output knew of.
func (r *recordingSink) peers() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for id := range r.current {
		if id.Namespace == "meshrelay" {
			out = append(out, id.Name)
		}
	}
	return sortStrings(out)
}

func (r *recordingSink) counts() (creates, deletes int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.creates, r.deletes
}

func sortStrings(s []string) []string {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	return s
}

// testAgent is a real agent against a test server.
type testAgent struct {
	*agent.Agent
	src    *memSource
	sink   *recordingSink
	dir    string
	cancel context.CancelFunc
	done   chan error
	// logs are the agent's last log lines, for a test's failure message.
	logs *tailLines
}

// tailLines keeps the last lines written to it: a slog text handler's
// records, one per Write.
type tailLines struct {
	mu    sync.Mutex
	lines []string
}

const tailKept = 8

func (l *tailLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, strings.TrimSpace(string(p)))
	if len(l.lines) > tailKept {
		l.lines = l.lines[len(l.lines)-tailKept:]
	}
	return len(p), nil
}

// String returns the lines kept, oldest first.
func (l *tailLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

func startAgent(t *testing.T, ts *testServer, cluster, token string, mods ...func(*agent.Options)) *testAgent {
	t.Helper()
	src := newMemSource()
	ta := startAgentSource(t, ts, cluster, token, src, mods...)
	ta.src = src
	return ta
}

// startAgentSource starts an agent reading its cluster from src.
func startAgentSource(t *testing.T, ts *testServer, cluster, token string, src agent.Source, mods ...func(*agent.Options)) *testAgent {
	t.Helper()
	return startAgentSinks(t, ts, cluster, token, src, nil, mods...)
}

// startAgentSinks starts an agent reading its cluster from src and
// applying to a recording sink and to extra.
func startAgentSinks(t *testing.T, ts *testServer, cluster, token string, src agent.Source, extra agent.Sinks, mods ...func(*agent.Options)) *testAgent {
	t.Helper()
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(caFile, ts.CABundle(), 0o600); err != nil {
		t.Fatal(err)
	}
	opts := agent.DefaultOptions()
	opts.Cluster, opts.Server, opts.ServerName = cluster, ts.Addr(), "127.0.0.1"
	opts.TokenFile, opts.CAFile, opts.StateDir = tokenFile, caFile, filepath.Join(dir, "state")
	opts.ReconnectMax = 500 * time.Millisecond
	for _, m := range mods {
		m(&opts)
	}
	sink := newRecordingSink()
	logs := &tailLines{}
	logger := slog.New(slog.NewTextHandler(logs, nil))
	if os.Getenv("ROLLOUT_DEBUG") != "" {
		logger = slog.New(slog.NewTextHandler(os.Stderr, nil)).With("agent", cluster)
	}
	a, err := agent.New(opts, src, append(agent.Sinks{sink}, extra...), logger)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ta := &testAgent{Agent: a, sink: sink, dir: dir, cancel: cancel, done: make(chan error, 1), logs: logs}
	go func() { ta.done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-ta.done
	})
	return ta
}

// agentErr waits for an agent's Run to return.
func (ta *testAgent) err(t *testing.T) error {
	t.Helper()
	select {
	case err := <-ta.done:
		ta.done <- err
		return err
	case <-time.After(15 * time.Second):
		t.Fatal("agent did not stop within 15s")
		return errors.New("timeout")
	}
}
