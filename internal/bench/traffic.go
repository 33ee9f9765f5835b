package bench

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/meshrelay/meshrelay/core/traffic"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
)

// TrafficReport is the traffic phase (--traffic-edges): every agent relays
// the same edges with fresh counts every window.
type TrafficReport struct {
	EdgesPerAgent int     `json:"edges_per_agent"`
	Windows       int     `json:"windows"`
	WindowSeconds float64 `json:"window_seconds"`
	// EdgesKept is the edges the servers held at the end (their
	// meshrelay_traffic_edges); it should be agents × edges.
	EdgesKept int64 `json:"edges_kept"`
	// FirstWindowBytes is one agent's first window, which names its
	// edges; SteadyWindowBytes a later one's, which refers to them by id.
	FirstWindowBytes  float64 `json:"first_window_bytes_per_agent"`
	SteadyWindowBytes float64 `json:"steady_window_bytes_per_agent"`
	// CPUPer1000Edges is the servers' CPU seconds per window per 1,000
	// edges, net of idle; RSSPer1000Edges the growth of their RSS over
	// the phase per 1,000 edges kept.
	CPUPer1000Edges float64 `json:"server_cpu_seconds_per_window_per_1000_edges"`
	RSSPer1000Edges float64 `json:"server_rss_bytes_per_1000_edges"`
	// MemoryPerEdge is what the servers estimate they hold per edge
	// (meshrelay_traffic_memory_bytes / edges).
	MemoryPerEdge float64 `json:"server_estimated_bytes_per_edge"`
}

// trafficPhase relays opts.TrafficEdges edges from every agent every
// opts.TrafficWindow, opts.TrafficWindows times, and measures the bytes,
// the servers' CPU and their memory.
func (r *run) trafficPhase(ctx context.Context) error {
	opts := r.opts
	rep := &TrafficReport{EdgesPerAgent: opts.TrafficEdges, Windows: opts.TrafficWindows, WindowSeconds: opts.TrafficWindow.Seconds()}
	r.rep.Traffic = rep
	r.say("relaying %d edges from each agent every %s, %d windows", opts.TrafficEdges, opts.TrafficWindow, opts.TrafficWindows)
	encoders := make([]*traffic.Encoder, len(r.sims))
	edges := make([]map[traffic.Edge]*traffic.Stats, len(r.sims))
	for i, s := range r.sims {
		encoders[i] = &traffic.Encoder{MaxBytes: 64 << 10, MaxNames: 4 * opts.TrafficEdges}
		edges[i] = map[traffic.Edge]*traffic.Stats{}
		for e := range opts.TrafficEdges {
			edges[i][traffic.Edge{
				SourceWorkload: fmt.Sprintf("bench/client-%03d", e%20), DestinationCluster: s.cluster.Name,
				DestinationService: fmt.Sprintf("bench/svc-%03d", e), Protocol: "http",
			}] = &traffic.Stats{}
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	server0, _ := r.servers.totals()
	cpu0 := r.servers.cpu()
	start := time.Now()
	var firstBytes, steadyBytes int64
	for w := range opts.TrafficWindows {
		tick := start.Add(time.Duration(w) * opts.TrafficWindow)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Until(tick)):
		}
		for i, s := range r.sims {
			// Steady traffic: every edge a few hundred requests, some failing.
			for _, st := range edges[i] {
				*st = traffic.Stats{}
				n := uint64(200 + rng.IntN(200))
				st.Codes[traffic.Class2xx] = n
				st.Codes[traffic.Class5xx] = uint64(rng.IntN(3))
				st.Latency[traffic.Bucket(float64(2+rng.IntN(20)))] = n
				st.LatencySumMS = float64(n) * 8
			}
			before := s.agent.Stats.TrafficBytes.Load()
			enc, es := encoders[i], edges[i]
			if !s.agent.SendTraffic(func(stream uint64) *relayv1.TrafficWindow {
				return enc.Encode(stream, time.Now(), opts.TrafficWindow, es, nil)
			}) {
				enc.Reset()
			}
			sent := s.agent.Stats.TrafficBytes.Load() - before
			if w == 0 {
				firstBytes += sent
			} else {
				steadyBytes += sent
			}
		}
	}
	time.Sleep(opts.TrafficWindow)
	elapsed := time.Since(start).Seconds()
	cpu := r.servers.cpu() - cpu0 - r.rep.IdleCPUPerS*elapsed
	server1, _ := r.servers.totals()
	agents := float64(len(r.sims))
	rep.FirstWindowBytes = float64(firstBytes) / agents
	if opts.TrafficWindows > 1 {
		rep.SteadyWindowBytes = float64(steadyBytes) / agents / float64(opts.TrafficWindows-1)
	}
	var mem int64
	for _, p := range r.servers {
		m, err := scrapeGauges(ctx, p.metrics, "meshrelay_traffic_edges", "meshrelay_traffic_memory_bytes")
		if err != nil {
			return err
		}
		rep.EdgesKept += int64(m["meshrelay_traffic_edges"])
		mem += int64(m["meshrelay_traffic_memory_bytes"])
	}
	thousands := float64(opts.TrafficEdges) * agents / 1000
	rep.CPUPer1000Edges = cpu / float64(opts.TrafficWindows) / thousands
	if rep.EdgesKept > 0 {
		rep.RSSPer1000Edges = float64(server1.RSSBytes-server0.RSSBytes) / (float64(rep.EdgesKept) / 1000)
		rep.MemoryPerEdge = float64(mem) / float64(rep.EdgesKept)
	}
	r.say("traffic: %.0f B first window, %.0f B steady window per agent; %d edges kept; %.4f CPU s per window per 1,000 edges",
		rep.FirstWindowBytes, rep.SteadyWindowBytes, rep.EdgesKept, rep.CPUPer1000Edges)
	return nil
}

// scrapeGauges reads the values of the named unlabelled metrics from a
// server's /metrics.
func scrapeGauges(ctx context.Context, addr string, names ...string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", addr, err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		for _, n := range names {
			if name == n {
				out[n], _ = strconv.ParseFloat(value, 64)
			}
		}
	}
	return out, sc.Err()
}
