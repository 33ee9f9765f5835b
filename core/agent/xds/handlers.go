package xds

import (
	"context"

	clusterservice "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	endpointservice "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	listenerservice "github.com/envoyproxy/go-control-plane/envoy/service/listener/v3"
	routeservice "github.com/envoyproxy/go-control-plane/envoy/service/route/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	deltav3 "github.com/envoyproxy/go-control-plane/pkg/server/delta/v3"
	sotwv3 "github.com/envoyproxy/go-control-plane/pkg/server/sotw/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// handlers binds go-control-plane's state-of-the-world and delta stream
// handlers to the ADS, LDS, RDS, CDS and EDS services. (go-control-plane's
// own combined server also serves rate-limit configuration, which the
// agent does not need.)
type handlers struct {
	sotw  sotwv3.Server
	delta deltav3.Server
}

var (
	_ discoveryv3.AggregatedDiscoveryServiceServer   = (*handlers)(nil)
	_ listenerservice.ListenerDiscoveryServiceServer = (*handlers)(nil)
	_ routeservice.RouteDiscoveryServiceServer       = (*handlers)(nil)
	_ clusterservice.ClusterDiscoveryServiceServer   = (*handlers)(nil)
	_ endpointservice.EndpointDiscoveryServiceServer = (*handlers)(nil)
)

func (h *handlers) StreamAggregatedResources(s discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	return h.sotw.StreamHandler(s, resourcev3.AnyType)
}

func (h *handlers) DeltaAggregatedResources(s discoveryv3.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	return h.delta.DeltaStreamHandler(s, resourcev3.AnyType)
}

func (h *handlers) StreamListeners(s listenerservice.ListenerDiscoveryService_StreamListenersServer) error {
	return h.sotw.StreamHandler(s, resourcev3.ListenerType)
}

func (h *handlers) DeltaListeners(s listenerservice.ListenerDiscoveryService_DeltaListenersServer) error {
	return h.delta.DeltaStreamHandler(s, resourcev3.ListenerType)
}

func (h *handlers) StreamRoutes(s routeservice.RouteDiscoveryService_StreamRoutesServer) error {
	return h.sotw.StreamHandler(s, resourcev3.RouteType)
}

func (h *handlers) DeltaRoutes(s routeservice.RouteDiscoveryService_DeltaRoutesServer) error {
	return h.delta.DeltaStreamHandler(s, resourcev3.RouteType)
}

func (h *handlers) StreamClusters(s clusterservice.ClusterDiscoveryService_StreamClustersServer) error {
	return h.sotw.StreamHandler(s, resourcev3.ClusterType)
}

func (h *handlers) DeltaClusters(s clusterservice.ClusterDiscoveryService_DeltaClustersServer) error {
	return h.delta.DeltaStreamHandler(s, resourcev3.ClusterType)
}

func (h *handlers) StreamEndpoints(s endpointservice.EndpointDiscoveryService_StreamEndpointsServer) error {
	return h.sotw.StreamHandler(s, resourcev3.EndpointType)
}

func (h *handlers) DeltaEndpoints(s endpointservice.EndpointDiscoveryService_DeltaEndpointsServer) error {
	return h.delta.DeltaStreamHandler(s, resourcev3.EndpointType)
}

// Fetch (REST-style polling) is not served: every consumer streams.

func (h *handlers) FetchListeners(context.Context, *discoveryv3.DiscoveryRequest) (*discoveryv3.DiscoveryResponse, error) {
	return nil, errFetch
}

func (h *handlers) FetchRoutes(context.Context, *discoveryv3.DiscoveryRequest) (*discoveryv3.DiscoveryResponse, error) {
	return nil, errFetch
}

func (h *handlers) FetchClusters(context.Context, *discoveryv3.DiscoveryRequest) (*discoveryv3.DiscoveryResponse, error) {
	return nil, errFetch
}

func (h *handlers) FetchEndpoints(context.Context, *discoveryv3.DiscoveryRequest) (*discoveryv3.DiscoveryResponse, error) {
	return nil, errFetch
}

var errFetch = status.Error(codes.Unimplemented, "xds fetch is not served; use a stream")
