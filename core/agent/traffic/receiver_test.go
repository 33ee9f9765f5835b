package traffic_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	metricsv3 "github.com/envoyproxy/go-control-plane/envoy/service/metrics/v3"
	agenttraffic "github.com/meshrelay/meshrelay/core/agent/traffic"
	"github.com/meshrelay/meshrelay/core/traffic"
	"github.com/meshrelay/meshrelay/internal/testutil"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	collectorv1 "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	commonv1 "go.opentelemetry.io/proto/otlp/common/v1"
	metricsv1 "go.opentelemetry.io/proto/otlp/metrics/v1"
	resourcev1 "go.opentelemetry.io/proto/otlp/resource/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
)

// relay collects the windows a receiver relays, decoded as a server does.
type relay struct {
	mu      sync.Mutex
	dec     traffic.Decoder
	windows []*relayv1.TrafficWindow
	edges   map[traffic.Edge]traffic.Stats
	dropped map[string]uint64
	// countOnly keeps no window and no edge, only their counts.
	countOnly bool
	relayed   int
}

func newRelay() *relay {
	return &relay{dec: traffic.Decoder{Limits: traffic.DefaultLimits()}, edges: map[traffic.Edge]traffic.Stats{}, dropped: map[string]uint64{}}
}

func (r *relay) SendTraffic(build func(uint64) *relayv1.TrafficWindow) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := build(1)
	if w == nil {
		return true
	}
	edges, _, err := r.dec.Decode(w)
	if err != nil {
		panic(err)
	}
	for k, v := range w.GetDropped() {
		r.dropped[k] += v
	}
	if r.countOnly {
		r.relayed += len(edges)
		return true
	}
	r.windows = append(r.windows, w)
	for _, d := range edges {
		s := r.edges[d.Edge]
		s.Add(&d.Stats)
		r.edges[d.Edge] = s
	}
	return true
}

// serve runs rec on a real gRPC server on loopback and returns a
// connection to it.
func serve(t *testing.T, rec *agenttraffic.Receiver) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(rec.ServerOptions()...)
	rec.Register(srv)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// families reads a /stats/prometheus fixture into the metric families
// Envoy's metrics service sends (its tags as labels).
func families(t *testing.T, path string) []*dto.MetricFamily {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	byName, err := p.TextToMetricFamilies(f)
	if err != nil {
		t.Fatal(err)
	}
	var out []*dto.MetricFamily
	for _, mf := range byName {
		out = append(out, mf)
	}
	return out
}

// istioNode is the node an Istio sidecar sends in its first message.
func istioNode(t *testing.T) *corev3.Node {
	md, err := structpb.NewStruct(map[string]any{"NAMESPACE": "bookinfo", "WORKLOAD_NAME": "productpage-v1", "CLUSTER_ID": "east"})
	if err != nil {
		t.Fatal(err)
	}
	return &corev3.Node{Id: "sidecar~10.1.0.7~productpage-v1-6b746f74dc-9stvs.bookinfo~bookinfo.svc.cluster.local", Cluster: "productpage.bookinfo", Metadata: md}
}

// streamAsEnvoy sends the fixtures on one StreamMetrics stream, as Envoy
// does at each stats flush: the node in the first message only.
func streamAsEnvoy(t *testing.T, conn *grpc.ClientConn, node *corev3.Node, msgs ...[]*dto.MetricFamily) {
	t.Helper()
	stream, err := metricsv3.NewMetricsServiceClient(conn).StreamMetrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for i, fams := range msgs {
		m := &metricsv3.StreamMetricsMessage{EnvoyMetrics: fams}
		if i == 0 {
			m.Identifier = &metricsv3.StreamMetricsMessage_Identifier{Node: node}
		}
		if err := stream.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := stream.CloseAndRecv(); err != nil {
		t.Fatal(err)
	}
}

func TestEnvoyMetricsServiceIstio(t *testing.T) {
	rec := agenttraffic.New(agenttraffic.Options{Cluster: "east"})
	conn := serve(t, rec)
	streamAsEnvoy(t, conn, istioNode(t), families(t, "testdata/productpage-sidecar-0.prom"), families(t, "testdata/productpage-sidecar-1.prom"))
	r := newRelay()
	rec.Flush(time.Now(), r)

	pp := "bookinfo/productpage-v1"
	reviews := r.edges[traffic.Edge{SourceWorkload: pp, DestinationCluster: "east", DestinationService: "bookinfo/reviews", Protocol: "http"}]
	if got := reviews.Codes[traffic.Class2xx]; got != 60 {
		t.Errorf("productpage → reviews 2xx = %d, want 60", got)
	}
	if got := reviews.Codes[traffic.Class5xx]; got != 15 {
		t.Errorf("productpage → reviews 5xx = %d, want 15", got)
	}
	if got, want := reviews.Errors(), uint64(15); got != want {
		t.Errorf("productpage → reviews errors = %d, want %d", got, want)
	}
	wantLat := map[float64]uint64{1: 15, 25: 45, 50: 14, 100: 1}
	for i, b := range traffic.Bounds {
		if reviews.Latency[i] != wantLat[b] {
			t.Errorf("productpage → reviews latency bucket le=%g = %d, want %d", b, reviews.Latency[i], wantLat[b])
		}
	}
	if reviews.BytesSent != 75*420 || reviews.BytesReceived != 75*2600 {
		t.Errorf("productpage → reviews bytes = %d/%d, want %d/%d", reviews.BytesSent, reviews.BytesReceived, 75*420, 75*2600)
	}
	details := r.edges[traffic.Edge{SourceWorkload: pp, DestinationCluster: "west", DestinationService: "bookinfo/details", Protocol: "http"}]
	if details.Requests() != 75 || details.Errors() != 0 {
		t.Errorf("productpage → west details = %d requests, %d errors, want 75, 0", details.Requests(), details.Errors())
	}
	unknown := r.edges[traffic.Edge{SourceWorkload: "unknown", DestinationCluster: "east", DestinationService: "bookinfo/productpage", Protocol: "http"}]
	if unknown.Codes[traffic.Class4xx] != 10 {
		t.Errorf("unknown → productpage 4xx = %d, want 10", unknown.Codes[traffic.Class4xx])
	}
	gw := traffic.Edge{SourceWorkload: "istio-system/istio-ingressgateway", DestinationCluster: "east", DestinationService: "bookinfo/productpage", Protocol: "http"}
	if _, ok := r.edges[gw]; ok {
		t.Errorf("the gateway's request, reported by the destination, was counted: the gateway reports it")
	}
	mongo := r.edges[traffic.Edge{SourceWorkload: "bookinfo/ratings-v2", DestinationCluster: "east", DestinationService: "bookinfo/mongodb", Protocol: "tcp"}]
	if mongo.BytesSent != 9000 || mongo.BytesReceived != 30000 {
		t.Errorf("ratings → mongodb tcp bytes = %d/%d, want 9000/30000", mongo.BytesSent, mongo.BytesReceived)
	}
	if len(r.edges) != 4 {
		t.Errorf("edges = %v, want 4", r.edges)
	}
	// Nothing more happened: the next window sends nothing.
	n := len(r.windows)
	rec.Flush(time.Now(), r)
	if len(r.windows) != n {
		t.Errorf("an idle window was relayed: %v", r.windows[n:])
	}
}

// TestEnvoyClusterStats: a proxy without Istio's metrics is read from
// Envoy's cluster stats, its workload from its node.
func TestEnvoyClusterStats(t *testing.T) {
	rec := agenttraffic.New(agenttraffic.Options{Cluster: "west"})
	conn := serve(t, rec)
	scrape := func(ok, fail float64) []*dto.MetricFamily {
		c := func(class string, v float64) *dto.Metric {
			return &dto.Metric{Label: []*dto.LabelPair{
				{Name: ptr("envoy.cluster_name"), Value: ptr("outbound|9080||reviews.bookinfo.svc.cluster.local")},
				{Name: ptr("envoy.response_code_class"), Value: ptr(class)}}, Counter: &dto.Counter{Value: &v}}
		}
		return []*dto.MetricFamily{{Name: ptr("cluster.upstream_rq_xx"), Type: dto.MetricType_COUNTER.Enum(), Metric: []*dto.Metric{c("2", ok), c("5", fail)}}}
	}
	streamAsEnvoy(t, conn, &corev3.Node{Id: "frontend-7d9", Cluster: "frontend.shop"}, scrape(100, 3), scrape(130, 8))
	r := newRelay()
	rec.Flush(time.Now(), r)
	e := r.edges[traffic.Edge{SourceWorkload: "shop/frontend", DestinationCluster: "west", DestinationService: "bookinfo/reviews", Protocol: "http"}]
	if e.Codes[traffic.Class2xx] != 30 || e.Codes[traffic.Class5xx] != 5 {
		t.Errorf("frontend → reviews = %v, want 30 2xx and 5 5xx (all edges %v)", e.Codes, r.edges)
	}
}

func ptr[T any](v T) *T { return &v }

// otlpRequest is an Export of one resource with histogram points of
// grpc.client.attempt.duration, one per target, delta temporality.
func otlpRequest(workload string, targets []string, calls uint64) *collectorv1.ExportMetricsServiceRequest {
	str := func(k, v string) *commonv1.KeyValue {
		return &commonv1.KeyValue{Key: k, Value: &commonv1.AnyValue{Value: &commonv1.AnyValue_StringValue{StringValue: v}}}
	}
	h := &metricsv1.Histogram{AggregationTemporality: metricsv1.AggregationTemporality_AGGREGATION_TEMPORALITY_DELTA}
	for _, tg := range targets {
		h.DataPoints = append(h.DataPoints, &metricsv1.HistogramDataPoint{
			Attributes:     []*commonv1.KeyValue{str("grpc.method", "helloworld.Greeter/SayHello"), str("grpc.target", tg), str("grpc.status", "OK")},
			Count:          calls,
			Sum:            ptr(0.002 * float64(calls)),
			BucketCounts:   []uint64{0, calls, 0},
			ExplicitBounds: []float64{0.001, 0.005},
		})
	}
	return &collectorv1.ExportMetricsServiceRequest{ResourceMetrics: []*metricsv1.ResourceMetrics{{
		Resource:     &resourcev1.Resource{Attributes: []*commonv1.KeyValue{str("k8s.namespace.name", "shop"), str("k8s.deployment.name", workload)}},
		ScopeMetrics: []*metricsv1.ScopeMetrics{{Metrics: []*metricsv1.Metric{{Name: "grpc.client.attempt.duration", Data: &metricsv1.Metric_Histogram{Histogram: h}}}}},
	}}}
}

func heap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestMillionLabelValues: an OTLP client sending a million distinct
// targets keeps the agent's memory flat (the cluster's edge cap) and the
// windows report what was dropped.
func TestMillionLabelValues(t *testing.T) {
	rec := agenttraffic.New(agenttraffic.Options{Cluster: "east", MaxEdges: 1000})
	conn := serve(t, rec)
	client := collectorv1.NewMetricsServiceClient(conn)
	r := newRelay()
	r.countOnly = true
	const batches, per = 100, 10000
	var baseline uint64
	for b := range batches {
		targets := make([]string, per)
		for i := range targets {
			targets[i] = "dns:///svc-" + strconv.Itoa(b*per+i) + ".shop:50051"
		}
		if _, err := client.Export(context.Background(), otlpRequest("spammer", targets, 1)); err != nil {
			t.Fatal(err)
		}
		rec.Flush(time.Now(), r)
		if b == 9 {
			baseline = heap()
		}
	}
	grown := int64(heap()) - int64(baseline)
	t.Logf("heap after 100,000 label values: %d KiB; after 1,000,000: %+d KiB", baseline>>10, grown>>10)
	if grown > 8<<20 {
		t.Errorf("heap grew by %d KiB from 100,000 to 1,000,000 label values, want flat", grown>>10)
	}
	if got, want := r.dropped[traffic.DropEdges], uint64(batches*(per-1000)); got != want {
		t.Errorf("windows reported %d samples dropped for the edge cap, want %d", got, want)
	}
	if got := rec.Dropped()[traffic.DropEdges]; got != uint64(batches*(per-1000)) {
		t.Errorf("receiver counted %d dropped, want %d", got, batches*(per-1000))
	}
	if r.relayed != batches*1000 {
		t.Errorf("relayed %d edges, want %d (1,000 a window)", r.relayed, batches*1000)
	}
}

// TestSeriesPerStream: an Envoy stream keeps at most MaxSeriesPerStream
// series; the others are dropped and counted.
func TestSeriesPerStream(t *testing.T) {
	rec := agenttraffic.New(agenttraffic.Options{Cluster: "east", MaxSeriesPerStream: 100})
	conn := serve(t, rec)
	fam := func(v float64) []*dto.MetricFamily {
		f := &dto.MetricFamily{Name: ptr("istio_requests_total"), Type: dto.MetricType_COUNTER.Enum()}
		for i := range 150 {
			f.Metric = append(f.Metric, &dto.Metric{Label: []*dto.LabelPair{
				{Name: ptr("reporter"), Value: ptr("source")}, {Name: ptr("source_workload"), Value: ptr("w" + strconv.Itoa(i))},
				{Name: ptr("source_workload_namespace"), Value: ptr("ns")}, {Name: ptr("destination_service"), Value: ptr("api.ns.svc.cluster.local")},
				{Name: ptr("response_code"), Value: ptr("200")}, {Name: ptr("request_protocol"), Value: ptr("http")}}, Counter: &dto.Counter{Value: ptr(v)}})
		}
		return []*dto.MetricFamily{f}
	}
	streamAsEnvoy(t, conn, istioNode(t), fam(1), fam(2))
	r := newRelay()
	rec.Flush(time.Now(), r)
	if len(r.edges) != 100 {
		t.Errorf("edges = %d, want 100 (the series kept)", len(r.edges))
	}
	if got := r.dropped[traffic.DropSeries]; got != 100 {
		t.Errorf("dropped series = %d, want 100 (50 in each of two messages)", got)
	}
}

// TestMessageSize: a message over MaxMessageBytes is refused before it is read.
func TestMessageSize(t *testing.T) {
	rec := agenttraffic.New(agenttraffic.Options{Cluster: "east", MaxMessageBytes: 64 << 10})
	conn := serve(t, rec)
	targets := make([]string, 2000)
	for i := range targets {
		targets[i] = "dns:///svc-" + strconv.Itoa(i) + ".shop:50051"
	}
	_, err := collectorv1.NewMetricsServiceClient(conn).Export(context.Background(), otlpRequest("big", targets, 1))
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("Export of %d points = %v, want ResourceExhausted", len(targets), err)
	}
	if _, err := collectorv1.NewMetricsServiceClient(conn).Export(context.Background(), otlpRequest("small", targets[:10], 1)); err != nil {
		t.Errorf("a small Export after it: %v", err)
	}
}

// TestPointsPerExport: an Export with more points than MaxPoints is
// refused and counted.
func TestPointsPerExport(t *testing.T) {
	rec := agenttraffic.New(agenttraffic.Options{Cluster: "east", MaxPoints: 10})
	conn := serve(t, rec)
	targets := make([]string, 11)
	for i := range targets {
		targets[i] = "dns:///svc-" + strconv.Itoa(i) + ".shop:50051"
	}
	_, err := collectorv1.NewMetricsServiceClient(conn).Export(context.Background(), otlpRequest("w", targets, 1))
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("Export of 11 points = %v, want ResourceExhausted", err)
	}
	r := newRelay()
	rec.Flush(time.Now(), r)
	if r.dropped[traffic.DropPoints] != 11 || len(r.edges) != 0 {
		t.Errorf("dropped %v, edges %d; want 11 points dropped and no edge", r.dropped, len(r.edges))
	}
}

// TestStreamsAtOnce: streams beyond MaxStreams are refused and counted.
func TestStreamsAtOnce(t *testing.T) {
	rec := agenttraffic.New(agenttraffic.Options{Cluster: "east", MaxStreams: 1})
	conn := serve(t, rec)
	client := metricsv3.NewMetricsServiceClient(conn)
	open := func() grpc.ClientStreamingClient[metricsv3.StreamMetricsMessage, metricsv3.StreamMetricsResponse] {
		s, err := client.StreamMetrics(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		// io.EOF: the server already ended the stream; CloseAndRecv
		// returns how.
		if err := s.Send(&metricsv3.StreamMetricsMessage{Identifier: &metricsv3.StreamMetricsMessage_Identifier{Node: istioNode(t)}}); err != nil && !errors.Is(err, io.EOF) {
			t.Fatal(err)
		}
		return s
	}
	// The server starts each stream's handler on its own goroutine, so the
	// second stream may take the slot before the first: the first is then
	// the refused one, or the second ends before the first takes it. Each
	// attempt opens both again until the first holds the slot.
	var first grpc.ClientStreamingClient[metricsv3.StreamMetricsMessage, metricsv3.StreamMetricsResponse]
	testutil.EventuallyWhy(t, "a second stream refused while the first is open", func() (bool, string) {
		first = open()
		_, err := open().CloseAndRecv()
		if status.Code(err) == codes.ResourceExhausted {
			return true, ""
		}
		first.CloseAndRecv()
		return false, fmt.Sprintf("second stream = %v, want ResourceExhausted", err)
	})
	r := newRelay()
	rec.Flush(time.Now(), r)
	if r.dropped[traffic.DropRefused] == 0 {
		t.Errorf("the refused stream was not reported: %v", r.dropped)
	}
	if _, err := first.CloseAndRecv(); err != nil {
		t.Errorf("the first stream, which held the slot, ended with %v", err)
	}
}

// TestWindowBytes: a window is kept under MaxWindowBytes; the edges left
// out are reported.
func TestWindowBytes(t *testing.T) {
	rec := agenttraffic.New(agenttraffic.Options{Cluster: "east", MaxWindowBytes: 4 << 10})
	conn := serve(t, rec)
	targets := make([]string, 500)
	for i := range targets {
		targets[i] = "dns:///svc-" + strconv.Itoa(i) + ".shop:50051"
	}
	if _, err := collectorv1.NewMetricsServiceClient(conn).Export(context.Background(), otlpRequest("w", targets, 3)); err != nil {
		t.Fatal(err)
	}
	r := newRelay()
	rec.Flush(time.Now(), r)
	w := r.windows[0]
	if n := protoSize(w); n > 4<<10 {
		t.Errorf("window of %d bytes, want at most %d", n, 4<<10)
	}
	if got := uint64(len(r.edges)) + r.dropped[traffic.DropSize]; got != 500 {
		t.Errorf("%d edges sent + %d dropped for size, want 500", len(r.edges), r.dropped[traffic.DropSize])
	}
	if r.dropped[traffic.DropSize] == 0 {
		t.Errorf("no edge was dropped for size")
	}
}

// TestSeriesAcrossStreams: the Envoy streams together keep at most
// MaxSeries series; a stream that ends gives its series back.
func TestSeriesAcrossStreams(t *testing.T) {
	rec := agenttraffic.New(agenttraffic.Options{Cluster: "east", MaxSeriesPerStream: 100, MaxSeries: 150})
	conn := serve(t, rec)
	fam := func(prefix string, v float64) []*dto.MetricFamily {
		f := &dto.MetricFamily{Name: ptr("istio_requests_total"), Type: dto.MetricType_COUNTER.Enum()}
		for i := range 100 {
			f.Metric = append(f.Metric, &dto.Metric{Label: []*dto.LabelPair{
				{Name: ptr("reporter"), Value: ptr("source")}, {Name: ptr("source_workload"), Value: ptr(prefix + strconv.Itoa(i))},
				{Name: ptr("source_workload_namespace"), Value: ptr("ns")}, {Name: ptr("destination_service"), Value: ptr("api.ns.svc.cluster.local")},
				{Name: ptr("response_code"), Value: ptr("200")}, {Name: ptr("request_protocol"), Value: ptr("http")}}, Counter: &dto.Counter{Value: ptr(v)}})
		}
		return []*dto.MetricFamily{f}
	}
	client := metricsv3.NewMetricsServiceClient(conn)
	first, err := client.StreamMetrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []float64{1, 2} {
		if err := first.Send(&metricsv3.StreamMetricsMessage{EnvoyMetrics: fam("a", v)}); err != nil {
			t.Fatal(err)
		}
	}
	// The second stream starts once the first holds its 100 series.
	r := newRelay()
	testutil.EventuallyWhy(t, "the first stream's 100 series", func() (bool, string) {
		rec.Flush(time.Now(), r)
		return len(r.edges) >= 100, fmt.Sprintf("%d edges", len(r.edges))
	})
	streamAsEnvoy(t, conn, istioNode(t), fam("b", 1), fam("b", 2))
	rec.Flush(time.Now(), r)
	if len(r.edges) != 150 || r.dropped[traffic.DropSeries] != 100 {
		t.Errorf("edges %d, dropped series %d; want 150 kept and 100 dropped (50 in each of two messages)", len(r.edges), r.dropped[traffic.DropSeries])
	}
	if _, err := first.CloseAndRecv(); err != nil {
		t.Fatal(err)
	}
	// With both streams gone, a new one keeps its series again.
	r = newRelay()
	testutil.EventuallyWhy(t, "a new stream's 100 edges after the streams ended", func() (bool, string) {
		streamAsEnvoy(t, conn, istioNode(t), fam("c", 1), fam("c", 2))
		rec.Flush(time.Now(), r)
		return len(r.edges) == 100, fmt.Sprintf("a new stream relayed %d edges, want 100", len(r.edges))
	})
}

// noStream is a relay without a stream: it sends nothing.
type noStream struct{}

func (noStream) SendTraffic(func(uint64) *relayv1.TrafficWindow) bool { return false }

// TestUnsentWindow: a window the agent could not send is reported in the
// next one, and its edges are named again.
func TestUnsentWindow(t *testing.T) {
	rec := agenttraffic.New(agenttraffic.Options{Cluster: "east"})
	conn := serve(t, rec)
	client := collectorv1.NewMetricsServiceClient(conn)
	if _, err := client.Export(context.Background(), otlpRequest("w", []string{"dns:///a.shop:1", "dns:///b.shop:1"}, 2)); err != nil {
		t.Fatal(err)
	}
	rec.Flush(time.Now(), noStream{})
	if _, err := client.Export(context.Background(), otlpRequest("w", []string{"dns:///a.shop:1"}, 3)); err != nil {
		t.Fatal(err)
	}
	r := newRelay()
	rec.Flush(time.Now(), r)
	if r.dropped[traffic.DropUnsent] != 2 {
		t.Errorf("dropped %v, want 2 unsent edges reported", r.dropped)
	}
	e := r.edges[traffic.Edge{SourceWorkload: "shop/w", DestinationCluster: "east", DestinationService: "shop/a", Protocol: "grpc"}]
	if e.Requests() != 3 {
		t.Errorf("the next window relayed %d requests of shop/a, want 3", e.Requests())
	}
}

// TestRestartedOTLPClient: a client that restarts sends cumulative points
// with a later start time, counting from zero again; its calls count in
// full even when its new totals already passed the old ones (any growth
// since the old totals would undercount them), and a late point from
// before the restart counts nothing.
func TestRestartedOTLPClient(t *testing.T) {
	rec := agenttraffic.New(agenttraffic.Options{Cluster: "east"})
	client := collectorv1.NewMetricsServiceClient(serve(t, rec))
	r := newRelay()
	started := uint64(time.Now().UnixNano())
	send := func(start, calls uint64) {
		t.Helper()
		req := otlpRequest("probe", []string{"dns:///api.shop:50051"}, calls)
		h := req.ResourceMetrics[0].ScopeMetrics[0].Metrics[0].GetHistogram()
		h.AggregationTemporality = metricsv1.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE
		h.DataPoints[0].StartTimeUnixNano = start
		if _, err := client.Export(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		rec.Flush(time.Now(), r)
	}
	requests := func() uint64 {
		var n uint64
		for _, s := range r.edges {
			n += s.Requests()
		}
		return n
	}
	for _, step := range []struct {
		start, calls, want uint64
		what               string
	}{
		{started, 75, 75, "the first client's 75 calls"},
		{started, 80, 80, "5 more from the same client"},
		{started + 1, 100, 180, "a restarted client's 100 calls"},
		{started + 1, 120, 200, "20 more from the restarted client"},
		{started, 90, 200, "a late point of the first client"},
	} {
		send(step.start, step.calls)
		if got := requests(); got != step.want {
			t.Errorf("after %s: %d requests relayed, want %d", step.what, got, step.want)
		}
	}
}
