package traffic

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func edge(i int) Edge {
	return Edge{SourceWorkload: "shop/frontend", DestinationCluster: "east", DestinationService: "shop/svc-" + strconv.Itoa(i), Protocol: "grpc"}
}

func stats(ok, fail uint64) *Stats {
	s := &Stats{}
	s.Codes[ClassGRPCOK], s.Codes[ClassGRPCServerError] = ok, fail
	s.Latency[Bucket(20)] = ok + fail
	s.LatencySumMS = 20 * float64(ok+fail)
	return s
}

// TestEncodeDecode: edges are named once per stream; a new stream names
// them again.
func TestEncodeDecode(t *testing.T) {
	enc := Encoder{MaxBytes: 64 << 10, MaxNames: 100}
	dec := Decoder{Limits: DefaultLimits()}
	edges := map[Edge]*Stats{edge(1): stats(90, 10), edge(2): stats(5, 0)}
	first := enc.Encode(1, time.Now(), WindowLength, edges, nil)
	second := enc.Encode(1, time.Now(), WindowLength, edges, nil)
	if len(first.GetNames()) != 2 || len(second.GetNames()) != 0 {
		t.Errorf("names sent = %d then %d, want 2 then 0", len(first.GetNames()), len(second.GetNames()))
	}
	for _, w := range []*relayv1.TrafficWindow{first, second} {
		got, refused, err := dec.Decode(w)
		if err != nil || refused != 0 || len(got) != 2 {
			t.Fatalf("Decode = %v, %d refused, %v", got, refused, err)
		}
		for _, d := range got {
			if d.Stats != *edges[d.Edge] {
				t.Errorf("decoded %v = %+v, want %+v", d.Edge, d.Stats, *edges[d.Edge])
			}
		}
	}
	if third := enc.Encode(2, time.Now(), WindowLength, edges, nil); len(third.GetNames()) != 2 {
		t.Errorf("a new stream got %d names, want 2", len(third.GetNames()))
	}
	if enc.Encode(2, time.Now(), WindowLength, nil, nil) != nil {
		t.Errorf("an idle window was encoded")
	}
}

// TestSteadyWindowBytes: 200 steady edges take under 2 KiB a window once named.
func TestSteadyWindowBytes(t *testing.T) {
	enc := Encoder{MaxBytes: 64 << 10, MaxNames: 1000}
	edges := map[Edge]*Stats{}
	for i := range 200 {
		edges[edge(i)] = stats(uint64(50+i%7), uint64(i%3))
	}
	enc.Encode(1, time.Now(), WindowLength, edges, nil)
	w := enc.Encode(1, time.Now(), WindowLength, edges, nil)
	n := protoSize(w)
	t.Logf("200 steady edges: %d bytes a window (%.1f per edge)", n, float64(n)/200)
	if n > 2<<10 {
		t.Errorf("a steady window of 200 edges takes %d bytes, want under 2 KiB", n)
	}
}

// TestDecoderLimits: a server refuses a window over its limits, or whose
// counts do not parse, whole, and entries it cannot trust one by one.
func TestDecoderLimits(t *testing.T) {
	limits := Limits{MaxBytes: 4 << 10, MaxEdges: 10, MaxNames: 20}
	one := []uint64{1, 1, 5 << 3} // id 1, one code pair: 5 × 2xx
	many := []uint64{}
	for range 11 {
		many = append(many, 1, 1, 1<<3)
	}
	tests := map[string]struct {
		w           *relayv1.TrafficWindow
		err         bool
		refused, ok int
	}{
		"too many edges": {w: &relayv1.TrafficWindow{Names: []*relayv1.TrafficEdgeName{name(1)}, Edges: many}, err: true},
		"too many names": {w: &relayv1.TrafficWindow{Names: make([]*relayv1.TrafficEdgeName, 11)}, err: true},
		"too many bytes": {w: &relayv1.TrafficWindow{Names: []*relayv1.TrafficEdgeName{{Id: 1, SourceWorkload: strings.Repeat("x", 5000)}}}, err: true},
		"unknown id":     {w: &relayv1.TrafficWindow{Edges: []uint64{7, 1, 1 << 3}}, refused: 1},
		"truncated":      {w: &relayv1.TrafficWindow{Names: []*relayv1.TrafficEdgeName{name(1)}, Edges: []uint64{1, 2, 1 << 3}}, err: true},
		"bad bucket":     {w: &relayv1.TrafficWindow{Names: []*relayv1.TrafficEdgeName{name(1)}, Edges: []uint64{1, 1 << 4, 1<<4 | 15, 10}}, err: true},
		"bad header":     {w: &relayv1.TrafficWindow{Names: []*relayv1.TrafficEdgeName{name(1)}, Edges: []uint64{1, 1 << 12}}, err: true},
		"huge count":     {w: &relayv1.TrafficWindow{Names: []*relayv1.TrafficEdgeName{name(1)}, Edges: []uint64{1, 1, 1 << 50 << 3}}, err: true},
		"huge id":        {w: &relayv1.TrafficWindow{Names: []*relayv1.TrafficEdgeName{name(1)}, Edges: []uint64{1 << 40, 1, 1 << 3}}, refused: 1},
		"control characters": {w: &relayv1.TrafficWindow{Names: []*relayv1.TrafficEdgeName{{Id: 1, SourceWorkload: "a\x1b[31m", DestinationCluster: "e", DestinationService: "s", Protocol: "http"}},
			Edges: one}, refused: 2},
		"good": {w: &relayv1.TrafficWindow{Names: []*relayv1.TrafficEdgeName{name(1)}, Edges: one}, ok: 1},
	}
	for n, tc := range tests {
		t.Run(n, func(t *testing.T) {
			d := Decoder{Limits: limits}
			got, refused, err := d.Decode(tc.w)
			if tc.err != errors.Is(err, ErrRefused) || refused != tc.refused || len(got) != tc.ok {
				t.Errorf("Decode = %d edges, %d refused, %v; want %d, %d, refused whole %v", len(got), refused, err, tc.ok, tc.refused, tc.err)
			}
		})
	}
}

func name(id uint32) *relayv1.TrafficEdgeName {
	return &relayv1.TrafficEdgeName{Id: id, SourceWorkload: "a/b", DestinationCluster: "east", DestinationService: "a/c", Protocol: "http"}
}

// TestHourBounds: the hour keeps at most MaxEdges edges, counts the
// others dropped, and forgets edges idle for an hour.
func TestHourBounds(t *testing.T) {
	h := NewHour(3)
	now := time.Unix(1_800_000_000, 0)
	h.now = func() time.Time { return now }
	var ds []Decoded
	for i := range 5 {
		ds = append(ds, Decoded{Edge: edge(i), Stats: *stats(10, 0)})
	}
	h.Add("east", ds, map[string]uint64{"edges": 2, "made-up": 1})
	if h.Len() != 3 {
		t.Errorf("kept %d edges, want 3", h.Len())
	}
	if d := h.Dropped()["east"]; d[DropEdges] != 4 || d["other"] != 1 {
		t.Errorf("dropped = %v, want edges 4 (2 by the agent, 2 here), other 1", d)
	}
	now = now.Add(61 * time.Minute)
	h.Add("east", ds[3:], nil)
	if h.Len() != 2 {
		t.Errorf("after an hour kept %d edges, want the 2 new ones", h.Len())
	}
	t.Logf("%d bytes for %d edges", h.Bytes(), h.Len())
}

// TestHourRatesAndMetrics: rates, error rate and p99 over the last minute,
// and the series on /metrics.
func TestHourRatesAndMetrics(t *testing.T) {
	h := NewHour(100)
	now := time.Unix(1_800_000_000, 0)
	h.now = func() time.Time { return now }
	for range 6 {
		h.Add("west", []Decoded{{Edge: edge(1), Stats: *stats(90, 10)}}, nil)
		now = now.Add(WindowLength)
	}
	now = now.Add(-time.Second)
	v := h.Edges(Query{Window: time.Minute, Minutes: true})
	if len(v) != 1 {
		t.Fatalf("edges = %v", v)
	}
	if v[0].RPS() != 10 || v[0].ErrorRate() != 0.1 {
		t.Errorf("rps %v, error rate %v; want 10, 0.1", v[0].RPS(), v[0].ErrorRate())
	}
	if p := v[0].Stats.Quantile(0.99); p <= 10 || p > 25 {
		t.Errorf("p99 = %v, want in (10, 25]", p)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(h))
	want := `
# HELP meshrelay_edge_requests_total Requests from a workload to a destination service, by code class, as the agents relayed them to this replica.
# TYPE meshrelay_edge_requests_total counter
meshrelay_edge_requests_total{code_class="grpc_ok",destination_cluster="east",destination_service="shop/svc-1",protocol="grpc",source_cluster="west",source_workload="shop/frontend"} 540
meshrelay_edge_requests_total{code_class="grpc_server_error",destination_cluster="east",destination_service="shop/svc-1",protocol="grpc",source_cluster="west",source_workload="shop/frontend"} 60
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "meshrelay_edge_requests_total"); err != nil {
		t.Error(err)
	}
}

// TestAround: the minutes before a change, from its minute on, and the last ones.
func TestAround(t *testing.T) {
	at := time.Unix(60*1000, 0)
	changed := time.Unix(60*995+30, 0) // in minute 995
	var minutes []MinuteView
	for m := int64(980); m <= 1000; m++ {
		v := MinuteView{Minute: m, Requests: 100}
		if m >= 995 {
			v.Errors = 20
		}
		minutes = append(minutes, v)
	}
	before, after, now := Around(minutes, changed, at, 5)
	if before != (Counts{500, 0}) || after != (Counts{500, 100}) || now != (Counts{500, 100}) {
		t.Errorf("Around = before %v, after %v, now %v; want {500 0}, {500 100}, {500 100}", before, after, now)
	}
	before, after, _ = Around(minutes, time.Time{}, at, 5)
	if before != (Counts{}) || after != (Counts{}) {
		t.Errorf("Around without a change = %v, %v; want nothing", before, after)
	}
}
