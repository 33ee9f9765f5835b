package ui

import (
	"context"
	"net/http"
	"strconv"

	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
)

// trafficRoutes serves the Traffic API: GET /api/traffic (the edges of the
// last minute; ?destination=NS/NAME, ?cluster=, ?window=SECONDS narrow it)
// and GET /api/traffic/policies/KIND/NS/NAME (?cluster= for a workload
// cluster's policy): the error rate of the destinations a policy selects,
// before and after its last change.
func (s *Server) trafficRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/traffic", s.get(func(ctx context.Context, r *http.Request) (any, error) {
		if s.opts.Traffic == nil {
			return &relayv1.ListEdgesResponse{}, nil
		}
		q := r.URL.Query()
		window, _ := strconv.ParseUint(q.Get("window"), 10, 32)
		return s.opts.Traffic.ListEdges(ctx, &relayv1.ListEdgesRequest{
			WindowSeconds: uint32(window), Cluster: q.Get("cluster"), Destination: q.Get("destination"),
		})
	}))
	mux.HandleFunc("GET /api/traffic/policies/{kind}/{namespace}/{name}", s.get(func(ctx context.Context, r *http.Request) (any, error) {
		if s.opts.Traffic == nil {
			return &relayv1.PolicyTraffic{}, nil
		}
		return s.opts.Traffic.GetPolicyTraffic(ctx, &relayv1.PolicyTrafficRequest{
			Kind: r.PathValue("kind"), Namespace: r.PathValue("namespace"), Name: r.PathValue("name"), Cluster: r.URL.Query().Get("cluster"),
		})
	}))
}
