package server

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/pluginhost"
	"github.com/meshrelay/meshrelay/core/store"
	"github.com/meshrelay/meshrelay/core/store/memory"
	"github.com/meshrelay/meshrelay/internal/bench"
	"github.com/meshrelay/meshrelay/plugins/istio"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
)

// Size of the inspection benchmarks' fleet: the fleet benchmark's 1,000
// clusters of 50 services.
const (
	inspectBenchClusters = 1000
	inspectBenchServices = 50
)

// staticPolicySource publishes one snapshot of policies.
type staticPolicySource struct{ snap *snapshot.Snapshot }

func (p staticPolicySource) Run(ctx context.Context, publish func(*snapshot.Snapshot)) error {
	publish(p.snap)
	<-ctx.Done()
	return nil
}

// inspectFleet is a server of the benchmark's fleet, built once for the
// inspection benchmarks: translating it takes a minute.
var inspectFleet struct {
	once     sync.Once
	s        *Server
	st       store.Store
	clusters []*bench.Cluster
	err      error
}

// benchFleetServer returns a server holding clusters of the benchmark's
// fleet (internal/bench) with their Istio outputs, under the benchmark's
// fleet-wide AccessPolicy: no agent is connected, and the server computes
// every cluster's outputs.
func benchFleetServer(b *testing.B) (*Server, store.Store, []*bench.Cluster) {
	b.Helper()
	inspectFleet.once.Do(func() {
		inspectFleet.s, inspectFleet.st, inspectFleet.clusters, inspectFleet.err = newBenchFleetServer(inspectBenchClusters, inspectBenchServices)
	})
	if inspectFleet.err != nil {
		b.Fatal(inspectFleet.err)
	}
	return inspectFleet.s, inspectFleet.st, inspectFleet.clusters
}

func newBenchFleetServer(n, services int) (*Server, store.Store, []*bench.Cluster, error) {
	ctx := context.Background()
	st := memory.New()
	clusters := make([]*bench.Cluster, n)
	for i := range n {
		c, err := bench.NewCluster(i, services)
		if err != nil {
			return nil, nil, nil, err
		}
		clusters[i] = c
		snap, err := c.Snapshot()
		if err != nil {
			return nil, nil, nil, err
		}
		if _, err := store.UpdateCluster(ctx, st, c.Name, func(r *store.Cluster, _ bool) error {
			r.Labels = map[string]string{"region": fmt.Sprintf("region-%d", i%4)}
			return nil
		}); err != nil {
			return nil, nil, nil, err
		}
		if err := st.PutInput(ctx, c.Name, snap); err != nil {
			return nil, nil, nil, err
		}
	}
	policy, err := snapshot.FromYAML(bench.PolicyYAML("p0"))
	if err != nil {
		return nil, nil, nil, err
	}
	policies, err := snapshot.New(1, []snapshot.Resource{policy})
	if err != nil {
		return nil, nil, nil, err
	}
	tr, err := pluginhost.InProcess(istio.New(), slog.New(slog.DiscardHandler))
	if err != nil {
		return nil, nil, nil, err
	}
	opts := DefaultOptions()
	opts.ListenAddr, opts.AdminAddr = "127.0.0.1:0", ""
	opts.SafeStartWindow, opts.Targets = time.Millisecond, TargetsAll
	opts.RebalanceInterval = 0
	opts.CAKeyEncryptionKey = "test-ca-key-encryption-key"
	// The data directory outlives the benchmarks, as the server does.
	dir, err := os.MkdirTemp("", "meshrelay-inspect-bench")
	if err != nil {
		return nil, nil, nil, err
	}
	opts.DataDir = dir
	s, err := New(ctx, opts, Deps{Store: st, Translators: []pluginhost.Translator{tr}, Policies: staticPolicySource{policies}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, nil, nil, err
	}
	go s.Run(ctx) // runs until the benchmark binary exits
	deadline := time.Now().Add(20 * time.Minute)
	for {
		ps := s.policyStatuses(ctx)
		if len(ps) == 1 && len(ps[0].targets) == n {
			return s, st, clusters, nil
		}
		if time.Now().After(deadline) {
			return nil, nil, nil, fmt.Errorf("the fleet's outputs are not ready after 20 minutes")
		}
		time.Sleep(time.Second)
	}
}

// BenchmarkListDestinations measures the admin API's List of every
// destination of a fleet of 1,000 clusters of 50 services: what the UI's
// fleet graph reads first.
func BenchmarkListDestinations(b *testing.B) {
	s, _, _ := benchFleetServer(b)
	ctx := context.Background()
	list := func() {
		resp, err := s.List(ctx, &relayv1.ListRequest{Kind: KindDestinations})
		if err != nil {
			b.Fatal(err)
		}
		if got := len(resp.GetDestinations()); got != inspectBenchClusters*inspectBenchServices {
			b.Fatalf("List(destinations) = %d destinations, want %d", got, inspectBenchClusters*inspectBenchServices)
		}
	}
	first := timed(list)
	b.ReportAllocs()
	for b.Loop() {
		list()
	}
	reportFirst(b, first)
}

// timed returns how long call takes.
func timed(call func()) time.Duration {
	start := time.Now()
	call()
	return time.Since(start)
}

// reportFirst reports how long the first call of its kind on the
// benchmark's server took, as first-ms: what the first viewer waits.
func reportFirst(b *testing.B, d time.Duration) {
	b.ReportMetric(float64(d.Microseconds())/1000, "first-ms")
}

// BenchmarkDescribePolicy measures the admin API's DescribePolicy of the
// fleet-wide AccessPolicy of a fleet of 1,000 clusters of 50 services,
// whose outputs are in every cluster: what the UI's policy page and graph
// read.
func BenchmarkDescribePolicy(b *testing.B) {
	s, _, _ := benchFleetServer(b)
	ctx := context.Background()
	describe := func() {
		desc, err := s.DescribePolicy(ctx, &relayv1.DescribeRequest{Kind: "AccessPolicy", Namespace: bench.Namespace, Name: "bench-access"})
		if err != nil {
			b.Fatal(err)
		}
		if got := len(desc.GetClusters()); got != inspectBenchClusters {
			b.Fatalf("DescribePolicy reaches %d clusters, want %d", got, inspectBenchClusters)
		}
	}
	first := timed(describe)
	b.ReportAllocs()
	for b.Loop() {
		describe()
	}
	reportFirst(b, first)
}
