package server

import (
	"cmp"
	"context"
	"time"

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
