package xds_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshrelay/meshrelay/api/snapshot"
	xdsapi "github.com/meshrelay/meshrelay/api/xds"
	"github.com/meshrelay/meshrelay/core/agent/xds"
	"github.com/meshrelay/meshrelay/internal/testutil"
	"github.com/meshrelay/meshrelay/plugins/envoy"
)

// acme is a backend other than envoy: a user's plugin emitting xDS.
const acme = "acme"

// hostService is what a plugin emits for gRPC clients of node to reach
// host at addr: an api_listener named host routing to an EDS Cluster
// named cluster, and its ClusterLoadAssignment, under service name eds.
func hostService(t *testing.T, node, host, cluster, eds, addr string) []snapshot.Resource {
	t.Helper()
	ip, portText, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		t.Fatal(err)
	}
	hcm := &hcmv3.HttpConnectionManager{
		StatPrefix: host,
		RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: &routev3.RouteConfiguration{
			Name: host,
			VirtualHosts: []*routev3.VirtualHost{{Name: host, Domains: []string{host}, Routes: []*routev3.Route{{
				Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
				Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: cluster}}},
			}}}},
		}},
		HttpFilters: []*hcmv3.HttpFilter{{Name: envoy.RouterFilter, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(t, &routerv3.Router{})}}},
	}
	ads := &corev3.ConfigSource{ResourceApiVersion: corev3.ApiVersion_V3, ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}}
	return []snapshot.Resource{
		resourceOf(t, node, &listenerv3.Listener{Name: host, ApiListener: &listenerv3.ApiListener{ApiListener: mustAny(t, hcm)}}),
		resourceOf(t, node, &clusterv3.Cluster{
			Name:                 cluster,
			ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
			EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{EdsConfig: ads, ServiceName: eds},
			LbPolicy:             clusterv3.Cluster_ROUND_ROBIN,
		}),
		resourceOf(t, node, &endpointv3.ClusterLoadAssignment{ClusterName: eds, Endpoints: []*endpointv3.LocalityLbEndpoints{{
			Locality:            &corev3.Locality{Region: "r", Zone: "z"},
			LoadBalancingWeight: wrapperspb.UInt32(1),
			LbEndpoints: []*endpointv3.LbEndpoint{{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
					Address: ip, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(port)},
				}}},
			}}}},
		}}}),
	}
}

func snapshotOf(t *testing.T, version uint64, rs ...[]snapshot.Resource) *snapshot.Snapshot {
	t.Helper()
	s, err := snapshot.New(version, slices.Concat(rs...))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// clusterNames asks a new stream for node's Clusters and returns their
// names, sorted.
func clusterNames(ctx context.Context, t *testing.T, conn *grpc.ClientConn, node string) []string {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	_, resp := askClusters(ctx, t, conn, node)
	var names []string
	for _, a := range resp.GetResources() {
		c := &clusterv3.Cluster{}
		if err := a.UnmarshalTo(c); err != nil {
			t.Fatal(err)
		}
		names = append(names, c.GetName())
	}
	slices.Sort(names)
	return names
}

// Two backends serving one node keep their resources apart: applying
// one, even empty, never removes the other's.
func TestBackendsKeptApart(t *testing.T) {
	srv, conn := startServer(t, xds.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	envoyOut := fixtureSnapshot(t, "../../../plugins/envoy/testdata/virtualdestination.yaml", "east")
	envoyClusters := []string{"vd|ratings.global|80", "vd|reviews.global|9080"}
	acmeOut := snapshotOf(t, 1, hostService(t, "frontend", "acme.test", "acme|c", "acme|c", "127.0.0.1:1"))
	for _, step := range []struct {
		backend string
		out     *snapshot.Snapshot
		prune   bool
		want    []string
	}{
		{envoy.Backend, envoyOut, true, envoyClusters},
		{acme, acmeOut, true, append([]string{"acme|c"}, envoyClusters...)},
		// Without pruning, acme's empty output removes nothing.
		{acme, snapshot.Empty, false, append([]string{"acme|c"}, envoyClusters...)},
		{acme, snapshot.Empty, true, envoyClusters},
		{acme, acmeOut, true, append([]string{"acme|c"}, envoyClusters...)},
		{envoy.Backend, snapshot.Empty, true, []string{"acme|c"}},
	} {
		if errs, err := srv.Apply(ctx, step.backend, step.out, step.prune); err != nil || len(errs) > 0 {
			t.Fatalf("Apply(%s) = %v, %v", step.backend, errs, err)
		}
		if got := clusterNames(ctx, t, conn, "frontend"); !slices.Equal(got, step.want) {
			t.Fatalf("after %s applied %d resources (prune %v): frontend's clusters = %v, want %v", step.backend, step.out.Len(), step.prune, got, step.want)
		}
	}
}

// A resource two backends emit is served from the first backend in name
// order; the other backend hears that its copy is not served, and what
// its copy referenced is dropped rather than served inconsistently.
func TestBackendsSharingANameServeOne(t *testing.T) {
	srv, conn := startServer(t, xds.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	envoyOut := fixtureSnapshot(t, "../../../plugins/envoy/testdata/virtualdestination.yaml", "east")
	if errs, err := srv.Apply(ctx, envoy.Backend, envoyOut, true); err != nil || len(errs) > 0 {
		t.Fatalf("Apply(envoy) = %v, %v", errs, err)
	}
	// acme's Cluster of the same name loads other endpoints.
	const shared = "vd|reviews.global|9080"
	acmeOut := snapshotOf(t, 1, hostService(t, "frontend", "acme.test", shared, "acme-endpoints", "127.0.0.1:1"))
	if errs, err := srv.Apply(ctx, acme, acmeOut, true); err != nil || len(errs) > 0 {
		t.Fatalf("Apply(acme) = %v, %v; want acme's resources served", errs, err)
	}
	errs, err := srv.Apply(ctx, envoy.Backend, envoyOut.WithVersion(2), true)
	if err != nil {
		t.Fatalf("Apply(envoy) again = %v", err)
	}
	var notServed []string
	for id, e := range errs {
		if id.Namespace != "frontend" || !strings.Contains(id.Name, "reviews.global") {
			t.Errorf("Apply(envoy) error for %s, which acme does not emit: %v", id, e)
		}
		notServed = append(notServed, id.Kind)
		if id.Kind == xdsapi.KindCluster && !strings.Contains(e.Error(), `backend "acme"`) {
			t.Errorf("Apply(envoy) error for its shadowed Cluster = %v, want it to name backend acme", e)
		}
	}
	slices.Sort(notServed)
	// The Cluster acme replaced, and the assignment only it used.
	if want := []string{xdsapi.KindCluster, xdsapi.KindClusterLoadAssignment}; !slices.Equal(notServed, want) {
		t.Errorf("Apply(envoy) errors = %v, want one for each of %v", errs, want)
	}
	if got, want := clusterNames(ctx, t, conn, "frontend"), []string{"vd|ratings.global|80", shared}; !slices.Equal(got, want) {
		t.Errorf("frontend's clusters = %v, want %v", got, want)
	}
}

// A NACK is reported to the backend whose output carried the rejected
// resource, with that resource's own ID.
func TestNackReportedToItsBackend(t *testing.T) {
	var mu sync.Mutex
	reports := map[string][]snapshot.ID{}
	srv, conn := startServer(t, xds.Options{Report: func(backend string, rejected map[snapshot.ID]error) {
		mu.Lock()
		defer mu.Unlock()
		for id, err := range rejected {
			if err == nil || !strings.Contains(err.Error(), "bad cluster") {
				panic(fmt.Sprintf("report for %s: %v, want the proxy's error", id, err))
			}
		}
		reports[backend] = append(reports[backend], slices.SortedFunc(maps.Keys(rejected), snapshot.ID.Compare)...)
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	envoyOut := fixtureSnapshot(t, "../../../plugins/envoy/testdata/virtualdestination.yaml", "east")
	acmeOut := snapshotOf(t, 1, hostService(t, "frontend", "acme.test", "acme|c", "acme|c", "127.0.0.1:1"))
	for backend, out := range map[string]*snapshot.Snapshot{envoy.Backend: envoyOut, acme: acmeOut} {
		if errs, err := srv.Apply(ctx, backend, out, true); err != nil || len(errs) > 0 {
			t.Fatalf("Apply(%s) = %v, %v", backend, errs, err)
		}
	}
	idOf := func(s *snapshot.Snapshot, name string) snapshot.ID {
		for r := range s.All() {
			res, err := xdsapi.Decode(r.Body)
			if err != nil {
				t.Fatal(err)
			}
			if res.NodeID == "frontend" && res.TypeURL == xdsapi.ClusterType && res.Name == name {
				return r.ID
			}
		}
		t.Fatalf("no Cluster %q for frontend", name)
		return snapshot.ID{}
	}

	for _, tc := range []struct {
		cluster, backend string
		id               snapshot.ID
	}{
		{"acme|c", acme, idOf(acmeOut, "acme|c")},
		{"vd|reviews.global|9080", envoy.Backend, idOf(envoyOut, "vd|reviews.global|9080")},
	} {
		nackCluster(ctx, t, conn, "frontend", tc.cluster)
		var got map[string][]snapshot.ID
		testutil.EventuallyWhy(t, "a report to "+tc.backend, func() (bool, string) {
			mu.Lock()
			got = maps.Clone(reports)
			clear(reports)
			mu.Unlock()
			return len(got) > 0, fmt.Sprintf("reports = %v", got)
		})
		want := map[string][]snapshot.ID{tc.backend: {tc.id}}
		if !maps.EqualFunc(got, want, slices.Equal) {
			t.Errorf("NACK of %s reported %v, want %v", tc.cluster, got, want)
		}
		if tc.id.Group != xdsapi.Group || tc.id.Version != xdsapi.Version {
			t.Errorf("reported ID %s, want group %s and version %s", tc.id, xdsapi.Group, xdsapi.Version)
		}
	}
}

// askClusters opens a stream and asks for node's Clusters of the given
// names (all without names), returning the stream and its first response.
func askClusters(ctx context.Context, t *testing.T, conn *grpc.ClientConn, node string, names ...string) (discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient, *discoveryv3.DiscoveryResponse) {
	t.Helper()
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: node}, TypeUrl: xdsapi.ClusterType, ResourceNames: names}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	return stream, resp
}

// nackCluster asks a new stream for one of node's Clusters and rejects
// the response.
func nackCluster(ctx context.Context, t *testing.T, conn *grpc.ClientConn, node, name string) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, resp := askClusters(ctx, t, conn, node, name)
	if n := len(resp.GetResources()); n != 1 {
		t.Fatalf("response to a request for Cluster %q has %d resources, want 1", name, n)
	}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{
		TypeUrl: xdsapi.ClusterType, ResponseNonce: resp.GetNonce(), ResourceNames: []string{name},
		ErrorDetail: &statuspb.Status{Code: 3, Message: "bad cluster"},
	}); err != nil {
		t.Fatal(err)
	}
	// The server answers a NACK with what it has: wait for that, so the
	// NACK was seen before the stream closes.
	if _, err := stream.Recv(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}
