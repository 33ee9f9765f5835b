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
	"github.com/meshrelay/meshrelay/internal/testutil"
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
	clusters []*bench.Cluster
}

// benchFleetServer returns a server holding inspectBenchClusters clusters
// of the benchmark's fleet (benchFleet), shared by the benchmarks.
func benchFleetServer(b *testing.B) (*Server, []*bench.Cluster) {
	b.Helper()
	inspectFleet.once.Do(func() {
		// The server and its data directory outlive the benchmarks.
		dir, err := os.MkdirTemp("", "meshrelay-inspect-bench")
		if err != nil {
			b.Fatal(err)
		}
		inspectFleet.s, inspectFleet.clusters = benchFleet(b, context.Background(), dir, inspectBenchClusters, inspectBenchServices)
	})
	if inspectFleet.s == nil {
		b.Fatal("the benchmark's fleet was not built")
	}
	return inspectFleet.s, inspectFleet.clusters
}

// benchFleet runs, until ctx ends, a server of n clusters of the
// benchmark's fleet (internal/bench) with services each, its data in dir,
// under the benchmark's fleet-wide AccessPolicy, with the Istio plugin in
// process. No agent is connected: the server computes every cluster's
// outputs. It returns once every cluster has its outputs and its
// discovery objects.
func benchFleet(tb testing.TB, ctx context.Context, dir string, n, services int) (*Server, []*bench.Cluster) {
	tb.Helper()
	st := memory.New()
	clusters := make([]*bench.Cluster, n)
	for i := range n {
		c, err := bench.NewCluster(i, services)
		if err != nil {
			tb.Fatal(err)
		}
		clusters[i] = c
		snap, err := c.Snapshot()
		if err != nil {
			tb.Fatal(err)
		}
		if _, err := store.UpdateCluster(ctx, st, c.Name, func(r *store.Cluster, _ bool) error {
			r.Labels = map[string]string{"region": fmt.Sprintf("region-%d", i%4)}
			return nil
		}); err != nil {
			tb.Fatal(err)
		}
		if err := st.PutInput(ctx, c.Name, snap); err != nil {
			tb.Fatal(err)
		}
	}
	policy, err := snapshot.FromYAML(bench.PolicyYAML("p0"))
	if err != nil {
		tb.Fatal(err)
	}
	policies, err := snapshot.New(1, []snapshot.Resource{policy})
	if err != nil {
		tb.Fatal(err)
	}
	tr, err := pluginhost.InProcess(istio.New(), slog.New(slog.DiscardHandler))
	if err != nil {
		tb.Fatal(err)
	}
	opts := DefaultOptions()
	opts.ListenAddr, opts.AdminAddr, opts.DataDir = "127.0.0.1:0", "", dir
	opts.SafeStartWindow, opts.Targets = time.Millisecond, TargetsAll
	opts.RebalanceInterval = 0
	opts.CAKeyEncryptionKey = "test-ca-key-encryption-key"
	s, err := New(ctx, opts, Deps{Store: st, Translators: []pluginhost.Translator{tr}, Policies: staticPolicySource{policies}})
	if err != nil {
		tb.Fatal(err)
	}
	go s.Run(ctx)
	testutil.EventuallyWithin(tb, 20*time.Minute, "every cluster's outputs", func() (bool, string) {
		ps := s.policyStatuses(ctx)
		if len(ps) != 1 {
			return false, fmt.Sprintf("%d policies", len(ps))
		}
		return len(ps[0].targets) == n, fmt.Sprintf("outputs in %d clusters", len(ps[0].targets))
	})
	// The discovery objects are derived when first read, as by the UI.
	fleet, err := s.currentCatalog(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	if len(fleet.Clusters) != n {
		tb.Fatalf("the first read of the discovery objects has %d clusters, want %d", len(fleet.Clusters), n)
	}
	return s, clusters
}

// BenchmarkListDestinations measures the admin API's List of every
// destination of a fleet of 1,000 clusters of 50 services: what the UI's
// fleet graph reads first.
func BenchmarkListDestinations(b *testing.B) {
	s, _ := benchFleetServer(b)
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
	s, _ := benchFleetServer(b)
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

// BenchmarkDescribePolicyPage measures what the UI's policy page asks of
// the same policy: its outline, then a page of 200 of its outputs, those
// of the first clusters.
func BenchmarkDescribePolicyPage(b *testing.B) {
	s, clusters := benchFleetServer(b)
	ctx := context.Background()
	const pageSize = 200
	describe := func() {
		req := &relayv1.DescribeRequest{Kind: "AccessPolicy", Namespace: bench.Namespace, Name: "bench-access", Outline: true}
		outline, err := s.DescribePolicy(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		if got := len(outline.GetClusters()); got != inspectBenchClusters {
			b.Fatalf("DescribePolicy reaches %d clusters, want %d", got, inspectBenchClusters)
		}
		req.Outline, req.OutputLimit = false, pageSize
		for _, c := range clusters[:10] {
			req.OutputClusters = append(req.OutputClusters, c.Name)
		}
		page, err := s.DescribePolicy(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		if got := len(page.GetOutputs()); got != pageSize {
			b.Fatalf("DescribePolicy answers %d outputs, want %d", got, pageSize)
		}
	}
	first := timed(describe)
	b.ReportAllocs()
	for b.Loop() {
		describe()
	}
	reportFirst(b, first)
}

// BenchmarkStatus measures the admin API's GetStatus of a fleet of 1,000
// clusters of 50 services: what the UI's pages draw first and its event
// stream polls.
func BenchmarkStatus(b *testing.B) {
	s, _ := benchFleetServer(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		st, err := s.Status(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if got := len(st.GetClusters()); got != inspectBenchClusters {
			b.Fatalf("Status has %d clusters, want %d", got, inspectBenchClusters)
		}
	}
}
