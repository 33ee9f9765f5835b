package server

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/traffic"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// newTraffic returns the replica's hour of traffic, its edges exposed on
// /metrics.
func newTraffic(opts Options, reg prometheus.Registerer) *traffic.Hour {
	h := traffic.NewHour(cmp.Or(opts.TrafficMaxEdges, DefaultOptions().TrafficMaxEdges))
	reg.MustRegister(traffic.NewCollector(h))
	return h
}

// trafficDecoder returns the decoder of one stream's traffic windows.
func (s *Server) trafficDecoder() *traffic.Decoder {
	return &traffic.Decoder{Limits: traffic.DefaultLimits()}
}

// acceptTraffic records one window of cluster's traffic. A window over
// the limits is dropped whole and counted, as are its entries that do not
// decode; the stream goes on.
func (s *Server) acceptTraffic(cluster string, dec *traffic.Decoder, w *relayv1.TrafficWindow) {
	edges, refused, err := dec.Decode(w)
	if err != nil {
		s.traffic.Drop(cluster, traffic.DropRefused, 1)
		s.log.Warn("traffic window refused", "cluster", cluster, "error", err)
		return
	}
	if refused > 0 {
		s.traffic.Drop(cluster, traffic.DropRefused, uint64(refused))
	}
	s.traffic.Add(cluster, edges, w.GetDropped())
}

// trafficService serves the Traffic API to administrators.
type trafficService struct {
	relayv1.UnimplementedTrafficServer
	s *Server
}

// TrafficServer returns the Traffic API's implementation for callers in
// the same process, such as the web UI; every call authorizes the bearer
// token of the context as a call over gRPC does.
func (s *Server) TrafficServer() relayv1.TrafficServer { return &trafficService{s: s} }

// ListEdges returns the edges of the request's window.
func (t *trafficService) ListEdges(ctx context.Context, req *relayv1.ListEdgesRequest) (*relayv1.ListEdgesResponse, error) {
	if err := (&admin{s: t.s}).authorize(ctx); err != nil {
		return nil, err
	}
	window := time.Duration(req.GetWindowSeconds()) * time.Second
	if window == 0 {
		window = time.Minute
	}
	if window > time.Hour {
		return nil, status.Error(codes.InvalidArgument, "list edges: window_seconds is at most 3600")
	}
	t.s.traffic.Expire()
	views := t.s.traffic.Edges(traffic.Query{Window: window, Cluster: req.GetCluster(), Destination: req.GetDestination(), Minutes: req.GetMinutes()})
	resp := &relayv1.ListEdgesResponse{ServerId: t.s.opts.ServerID}
	for i := range views {
		resp.Edges = append(resp.Edges, EdgeProto(&views[i], window <= time.Minute))
	}
	for cluster, reasons := range t.s.traffic.Dropped() {
		if req.GetCluster() == "" || req.GetCluster() == cluster {
			resp.Dropped = append(resp.Dropped, &relayv1.TrafficDrops{Cluster: cluster, Dropped: reasons})
		}
	}
	if req.GetLocal() {
		return resp, nil
	}
	answers, missing := t.s.peers.listEdges(ctx, req)
	resp = MergeEdges(append([]*relayv1.ListEdgesResponse{resp}, answers...))
	resp.Missing = append(resp.Missing, missing...)
	return resp, nil
}

// EdgeProto returns the API's form of an edge's view; codes says whether
// its counts by code class are meaningful (windows of a minute or less).
func EdgeProto(v *traffic.View, codes bool) *relayv1.Edge {
	e := &relayv1.Edge{
		SourceCluster: v.SourceCluster, SourceWorkload: v.SourceWorkload,
		DestinationCluster: v.DestinationCluster, DestinationService: v.DestinationService, Protocol: v.Protocol,
		Requests: v.Stats.Requests(), Errors: v.Stats.Errors(), Rps: v.RPS(), ErrorRate: v.ErrorRate(),
		P50Ms: v.Stats.Quantile(0.5), P99Ms: v.Stats.Quantile(0.99),
		BytesSent: v.Stats.BytesSent, BytesReceived: v.Stats.BytesReceived,
		LastSeen: timestamppb.New(v.LastSeen),
	}
	if codes {
		e.Codes = map[string]uint64{}
		for c, n := range v.Stats.Codes {
			if n > 0 {
				e.Codes[traffic.Class(c).String()] = n
			}
		}
	}
	for _, m := range v.Minutes {
		e.Minutes = append(e.Minutes, &relayv1.EdgeMinute{UnixMinute: m.Minute, Requests: m.Requests, Errors: m.Errors})
	}
	return e
}

// policyChanges records when this replica saw each management policy's
// body change. The policies it loads first have no change time.
type policyChanges struct {
	mu     sync.Mutex
	seeded bool
	hashes map[string]snapshot.Hash
	at     map[string]time.Time
}

// note compares the policies to the last ones and stamps those that
// changed, or appeared, with now.
func (c *policyChanges) note(p *snapshot.Snapshot, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hashes == nil {
		c.hashes, c.at = map[string]snapshot.Hash{}, map[string]time.Time{}
	}
	seen := map[string]bool{}
	for r := range p.All() {
		k := policyKey(r.ID)
		seen[k] = true
		if old, ok := c.hashes[k]; c.seeded && (!ok || old != r.Hash) {
			c.at[k] = now
		}
		c.hashes[k] = r.Hash
	}
	for k := range c.hashes {
		if !seen[k] {
			delete(c.hashes, k)
			delete(c.at, k)
		}
	}
	c.seeded = true
}

// changedAt returns when the policy "Kind/namespace/name" last changed.
func (c *policyChanges) changedAt(key string) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.at[key]
	return t, ok
}

// GetPolicyTraffic returns the error rate of the destinations a policy
// selects, before and after its last change.
func (t *trafficService) GetPolicyTraffic(ctx context.Context, req *relayv1.PolicyTrafficRequest) (*relayv1.PolicyTraffic, error) {
	s := t.s
	if err := (&admin{s: s}).authorize(ctx); err != nil {
		return nil, err
	}
	span := cmp.Or(req.GetMinutes(), 10)
	if span > 30 {
		return nil, status.Error(codes.InvalidArgument, "policy traffic: minutes is at most 30")
	}
	q, err := parsePolicyName(&relayv1.DescribeRequest{Kind: req.GetKind(), Namespace: req.GetNamespace(), Name: req.GetName(), Cluster: req.GetCluster()})
	if err != nil {
		return nil, err
	}
	ps, err := q.find(s.policyStatuses(ctx))
	if err != nil {
		return nil, err
	}
	var src *policySource
	for _, p := range s.policySources() {
		if p.cluster == ps.ref.Cluster && policyKey(p.res.ID) == ps.ref.Key() {
			src = &p
			break
		}
	}
	out := &relayv1.PolicyTraffic{Minutes: span}
	if src == nil {
		return out, nil
	}
	changed, known := time.Time{}, false
	if ps.ref.Cluster == "" {
		changed, known = s.policyChanges.changedAt(ps.ref.Key())
	}
	if known {
		out.ChangedAt = timestamppb.New(changed)
	}
	// The destinations it selects, each with its clusters.
	byName := map[[2]string]map[string]*relayv1.Destination{}
	fleet, err := s.currentCatalog(ctx)
	if err != nil {
		return nil, err
	}
	for _, c := range fleet.Clusters {
		for _, d := range c.Destinations {
			k := [2]string{d.Namespace, d.Name}
			if byName[k] == nil {
				byName[k] = map[string]*relayv1.Destination{}
			}
			byName[k][c.Name] = destinationProto(d, fleet)
		}
	}
	now := time.Now()
	var hour *relayv1.ListEdgesResponse // the fleet's last hour, read once
	for k, clusters := range byName {
		if !selectsDestination(*src, k[0], k[1], clusters, s.clusterLabels) {
			continue
		}
		if hour == nil {
			if hour, err = t.ListEdges(ctx, &relayv1.ListEdgesRequest{WindowSeconds: 3600, Minutes: true}); err != nil {
				return nil, err
			}
			out.Missing = hour.GetMissing()
		}
		var minutes []traffic.MinuteView
		for _, e := range hour.GetEdges() {
			if e.GetDestinationService() != k[0]+"/"+k[1] {
				continue
			}
			for _, m := range e.GetMinutes() {
				minutes = append(minutes, traffic.MinuteView{Minute: m.GetUnixMinute(), Requests: m.GetRequests(), Errors: m.GetErrors()})
			}
		}
		before, after, last := traffic.Around(minutes, changed, now, int64(out.Minutes))
		dt := &relayv1.DestinationTraffic{
			Namespace: k[0], Name: k[1],
			BeforeRequests: before.Requests, BeforeErrors: before.Errors,
			AfterRequests: after.Requests, AfterErrors: after.Errors,
			NowRequests: last.Requests, NowErrors: last.Errors,
		}
		out.Destinations = append(out.Destinations, dt)
	}
	slices.SortFunc(out.Destinations, func(a, b *relayv1.DestinationTraffic) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return out, nil
}
