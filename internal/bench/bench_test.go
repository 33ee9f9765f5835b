package bench

import (
	"context"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/agent"
	"github.com/meshrelay/meshrelay/core/pki"
	"github.com/meshrelay/meshrelay/core/pluginhost"
	"github.com/meshrelay/meshrelay/core/server"
	"github.com/meshrelay/meshrelay/core/store/memory"
	"github.com/meshrelay/meshrelay/plugins/istio"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
)

// fleetClusters is the fleet size of the fan-out benchmark.
const fleetClusters = 1000

// mirror is an in-engine translator with the cheapest possible work: each
// cluster's output (backend "test") is a copy of its inputs' Services as
// ConfigMaps, recomputed only for the clusters whose input changed; a
// policy change restamps every cluster's outputs with the policies' hash.
type mirror struct {
	inputs   map[string]*snapshot.Snapshot
	policies snapshot.Hash
	stamp    string
}

func newMirror() *mirror { return &mirror{inputs: map[string]*snapshot.Snapshot{}} }

func (m *mirror) Name() string       { return "mirror" }
func (m *mirror) Backends() []string { return []string{"test"} }
func (m *mirror) Meshes() []string   { return nil }

// OutputKinds declares nothing: the mirrored inputs are of any kind.
func (m *mirror) OutputKinds() []string { return nil }
func (m *mirror) InputKinds() []string  { return nil }

func (m *mirror) Translate(_ context.Context, v pluginhost.View) (pluginhost.Result, error) {
	touched := map[string]bool{}
	for name := range m.inputs {
		if _, ok := v.Clusters[name]; !ok {
			delete(m.inputs, name)
		}
	}
	for name, c := range v.Clusters {
		if old, ok := m.inputs[name]; !ok || old.Hash() != c.Input.Hash() {
			touched[name] = true
			m.inputs[name] = c.Input
		}
	}
	if v.Policies.Hash() != m.policies {
		m.policies = v.Policies.Hash()
		var sb strings.Builder
		for p := range v.Policies.All() {
			sb.WriteString(p.Hash.Short())
		}
		m.stamp = sb.String()
		for name := range m.inputs {
			touched[name] = true
		}
	}
	res := pluginhost.Result{Sent: len(touched) > 0}
	for name := range touched {
		var out []snapshot.Resource
		for r := range m.inputs[name].All() {
			id := r.ID
			if id.Kind != "Service" && id.Kind != "ConfigMap" {
				continue
			}
			cm, err := snapshot.FromObject(map[string]any{
				"apiVersion": "v1", "kind": "ConfigMap",
				"metadata": map[string]any{"name": id.Name, "namespace": id.Namespace},
				"data":     map[string]any{"source": string(r.Body), "policies": m.stamp},
			})
			if err != nil {
				return res, err
			}
			out = append(out, cm)
		}
		res.Outputs = append(res.Outputs, pluginhost.ClusterOutput{Cluster: name, Backend: "test", Resources: out})
	}
	return res, nil
}

// policies returns the management policies with the fleet-wide AccessPolicy
// at marker.
func policies(tb testing.TB, marker string) *snapshot.Snapshot {
	tb.Helper()
	r, err := snapshot.FromYAML(PolicyYAML(marker))
	if err != nil {
		tb.Fatal(err)
	}
	s, err := snapshot.New(0, []snapshot.Resource{r})
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// BenchmarkEngineFanout measures one translation cycle of a
// 1,000-cluster fleet (50 services each) after a change in one cluster, and
// after a policy edit that touches every cluster: time per cycle and the
// bytes of outputs the engine hands on to delivery. translator=istio is the
// real Istio translator behind the plugin protocol (in process);
// translator=mirror is the engine with a trivial translator.
func BenchmarkEngineFanout(b *testing.B) {
	for _, tr := range []string{"istio", "mirror"} {
		for _, change := range []string{"one-cluster", "every-cluster"} {
			b.Run("translator="+tr+"/change="+change, func(b *testing.B) {
				benchmarkFanout(b, tr, change)
			})
		}
	}
}

func benchmarkFanout(b *testing.B, tr, change string) {
	var t pluginhost.Translator
	switch tr {
	case "istio":
		l, err := pluginhost.InProcess(istio.New(), slog.New(slog.DiscardHandler))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(l.Close)
		t = l
	default:
		t = newMirror()
	}
	e := newMemFleet(t)
	clusters := make([]*Cluster, fleetClusters)
	for i := range clusters {
		c, err := NewCluster(i, 50)
		if err != nil {
			b.Fatal(err)
		}
		s, err := c.Snapshot()
		if err != nil {
			b.Fatal(err)
		}
		clusters[i] = c
		e.SetInput(c.Name, s)
	}
	e.SetPolicies(policies(b, "p0"))
	ctx := context.Background()
	first := e.cycle(ctx)
	last := first.Stats
	if first.Retry != 0 || len(last.Failed) > 0 {
		b.Fatalf("first cycle failed: %v", last.Failed)
	}
	b.ReportMetric(float64(last.Bytes), "full-B")
	var bytes, outputs int
	cpu0 := cpuTime()
	b.ResetTimer()
	for i := range b.N {
		marker := "m" + strconv.Itoa(i+1) + "x"
		if change == "one-cluster" {
			c := clusters[i%len(clusters)]
			s, err := c.Change(i%c.Services(), marker)
			if err != nil {
				b.Fatal(err)
			}
			e.SetInput(c.Name, s)
		} else {
			e.SetPolicies(policies(b, marker))
		}
		last = e.cycle(ctx).Stats
		if len(last.Failed) > 0 {
			b.Fatalf("cycle failed: %v", last.Failed)
		}
		bytes += last.Bytes
		outputs += last.Outputs
	}
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
	b.ReportMetric(float64(bytes)/float64(b.N), "handed-B/op")
	b.ReportMetric(float64(outputs)/float64(b.N), "outputs/op")
}

// testServer is an in-process server on loopback with a memory store.
type testServer struct {
	srv   *server.Server
	admin relayv1.AdminClient
	reg   relayv1.RegistrationClient
	actx  context.Context
}

func startTestServer(b *testing.B, translators ...pluginhost.Translator) *testServer {
	b.Helper()
	opts := server.DefaultOptions()
	opts.ListenAddr, opts.AdminAddr, opts.DataDir = "127.0.0.1:0", "", b.TempDir()
	opts.Debounce = 5 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := server.New(ctx, opts, server.Deps{Store: memory.New(), Translators: translators})
	if err != nil {
		cancel()
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = srv.Run(ctx); close(done) }()
	b.Cleanup(func() { cancel(); <-done })
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(srv.CABundle())
	conn, err := grpc.NewClient(srv.Addr(), grpc.WithTransportCredentials(credentials.NewTLS(
		pki.ClientTLSConfig(pki.ClientTLSOptions{RootCAs: pool, ServerName: "127.0.0.1"}))))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	tok, err := os.ReadFile(srv.AdminTokenPath())
	if err != nil {
		b.Fatal(err)
	}
	return &testServer{
		srv: srv, admin: relayv1.NewAdminClient(conn), reg: relayv1.NewRegistrationClient(conn),
		actx: metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+strings.TrimSpace(string(tok))),
	}
}

// notifySink hands every output it is given to a channel.
type notifySink struct {
	ch chan *snapshot.Snapshot
}

func (s notifySink) Apply(_ context.Context, _ string, desired *snapshot.Snapshot, _ bool) (map[snapshot.ID]error, error) {
	s.ch <- desired
	return nil, nil
}

// configMaps returns n ConfigMaps, the k-th with value v.
func configMaps(b *testing.B, n, k int, v string) *snapshot.Snapshot {
	b.Helper()
	rs := make([]snapshot.Resource, n)
	for i := range rs {
		val := "value-" + strconv.Itoa(i) + strings.Repeat(".", 200)
		if i == k {
			val = v
		}
		r, err := snapshot.FromObject(map[string]any{
			"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": fmt.Sprintf("cm-%04d", i), "namespace": "default"},
			"data":     map[string]any{"value": val},
		})
		if err != nil {
			b.Fatal(err)
		}
		rs[i] = r
	}
	s, err := snapshot.New(0, rs)
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkRelayChange measures the bytes one agent receives on the wire
// (TCP, as the kernel counts them) for its 1,000-resource output:
// change=one-resource changes one input, so one output resource;
// change=full-resend reconnects a fresh agent, which is sent the whole
// output. Both run through a real server and a real agent over mTLS.
func BenchmarkRelayChange(b *testing.B) {
	for _, change := range []string{"one-resource", "full-resend"} {
		b.Run("change="+change, func(b *testing.B) { benchmarkRelay(b, change) })
	}
}

func benchmarkRelay(b *testing.B, change string) {
	const resources = 1000
	ts := startTestServer(b, newMirror())
	_, port, _ := net.SplitHostPort(ts.srv.Addr())
	serverPort, _ := strconv.Atoi(port)
	resp, err := ts.admin.RegisterCluster(ts.actx, &relayv1.RegisterClusterRequest{Cluster: "relay"})
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(resp.GetToken()), 0o600); err != nil {
		b.Fatal(err)
	}
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, ts.srv.CABundle(), 0o600); err != nil {
		b.Fatal(err)
	}
	src := newSource(configMaps(b, resources, -1, ""))
	sink := notifySink{ch: make(chan *snapshot.Snapshot, 16)}
	start := func() (stop func()) {
		opts := agent.DefaultOptions()
		opts.Cluster, opts.Server, opts.ServerName = "relay", ts.srv.Addr(), "127.0.0.1"
		opts.TokenFile, opts.CAFile, opts.StateDir = tokenFile, caFile, filepath.Join(dir, "state")
		a, err := agent.New(opts, src, agent.Sinks{sink}, nil)
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { _ = a.Run(ctx); close(done) }()
		return func() { cancel(); <-done }
	}
	waitFor := func(marker string) {
		timeout := time.After(30 * time.Second)
		for {
			select {
			case s := <-sink.ch:
				if r, ok := s.Get(snapshot.ID{Version: "v1", Kind: "ConfigMap", Namespace: "default", Name: "cm-0000"}); ok &&
					strings.Contains(string(r.Body), marker) {
					return
				}
			case <-timeout:
				b.Fatalf("output with %q did not arrive", marker)
			}
		}
	}
	stop := start()
	waitFor("value-0")
	var wire int64
	b.ResetTimer()
	for i := range b.N {
		marker := "changed-" + strconv.Itoa(i)
		switch change {
		case "one-resource":
			before := receivedFrom(serverPort)
			src.set(configMaps(b, resources, 0, marker))
			waitFor(marker)
			time.Sleep(20 * time.Millisecond) // let the input ack land
			wire += receivedFrom(serverPort) - before
		default:
			stop()
			src.set(configMaps(b, resources, 0, marker))
			var before int64
			stop = startCounting(start, serverPort, &before)
			waitFor(marker)
			time.Sleep(20 * time.Millisecond)
			wire += receivedFrom(serverPort) - before
		}
	}
	b.StopTimer()
	stop()
	b.ReportMetric(float64(wire)/float64(b.N), "wire-B/op")
}

// startCounting starts an agent after noting the bytes received so far.
func startCounting(start func() func(), port int, before *int64) func() {
	*before = receivedFrom(port)
	return start()
}

// BenchmarkRegister measures registrations per second against an
// in-process server: the admin API creates the cluster and its token, then
// the cluster trades the token and a CSR (a fresh ECDSA key) for its
// certificate.
func BenchmarkRegister(b *testing.B) {
	ts := startTestServer(b)
	var n atomic.Int64
	var mu sync.Mutex
	var firstErr error
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			name := fmt.Sprintf("reg-%06d", n.Add(1))
			if err := register(ts, name); err != nil {
				mu.Lock()
				firstErr = err
				mu.Unlock()
				return
			}
		}
	})
	elapsed := time.Since(start)
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "registrations/s")
}

func register(ts *testServer, name string) error {
	resp, err := ts.admin.RegisterCluster(ts.actx, &relayv1.RegisterClusterRequest{Cluster: name})
	if err != nil {
		return fmt.Errorf("register cluster %s: %w", name, err)
	}
	key, err := pki.NewKey()
	if err != nil {
		return err
	}
	csr, err := pki.NewCSR(key, name)
	if err != nil {
		return err
	}
	if _, err := ts.reg.Register(context.Background(), &relayv1.RegisterRequest{Cluster: name, Token: resp.GetToken(), Csr: csr}); err != nil {
		return fmt.Errorf("register %s: %w", name, err)
	}
	return nil
}

// BenchmarkOutOfProcessRatio runs the same Istio translator on the same
// 200-cluster fleet (50 services each) in process and as a real plugin
// process started through go-plugin: a full translation (the whole fleet
// view sent and every output returned) and a one-cluster change. The ratio
// of the two is the cost of running translators out of process.
func BenchmarkOutOfProcessRatio(b *testing.B) {
	bin := filepath.Join(b.TempDir(), "meshrelay-plugin-istio")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/meshrelay/meshrelay/cmd/meshrelay-plugin-istio").CombinedOutput(); err != nil {
		b.Fatalf("build plugin: %v\n%s", err, out)
	}
	dir := b.TempDir()
	if _, err := pluginhost.Install(dir, bin, ""); err != nil {
		b.Fatal(err)
	}
	const clusters = 200
	view := fleetView(b, clusters)
	for _, mode := range []string{"inprocess", "process"} {
		b.Run(mode, func(b *testing.B) {
			var t pluginhost.Translator
			if mode == "inprocess" {
				l, err := pluginhost.InProcess(istio.New(), nil)
				if err != nil {
					b.Fatal(err)
				}
				defer l.Close()
				t = l
			} else {
				host, err := pluginhost.New(dir, nil, pluginhost.DefaultOptions())
				if err != nil {
					b.Fatal(err)
				}
				defer host.Close()
				if err := host.Start(context.Background()); err != nil {
					b.Fatal(err)
				}
				t = host.Plugins()[0]
			}
			ctx := context.Background()
			b.ResetTimer()
			for range b.N {
				// An empty view first (a small update), so that the
				// whole view is sent again.
				if _, err := t.Translate(ctx, pluginhost.View{}); err != nil {
					b.Fatal(err)
				}
				res, err := t.Translate(ctx, view)
				if err != nil {
					b.Fatal(err)
				}
				if len(res.Outputs) != clusters {
					b.Fatalf("%d outputs, want %d", len(res.Outputs), clusters)
				}
			}
		})
	}
}
