package xds_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rbacfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	xdsapi "github.com/meshrelay/meshrelay/api/xds"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/agent/xds"
	"github.com/meshrelay/meshrelay/internal/testutil"
	"github.com/meshrelay/meshrelay/plugins/envoy"
	"github.com/meshrelay/meshrelay/sdk/sdktest"
)

func resourceOf(t *testing.T, node string, m proto.Message) snapshot.Resource {
	t.Helper()
	obj, err := xdsapi.Encode(node, m)
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	r, err := snapshot.FromJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func mustAny(t *testing.T, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// badListener is an api_listener that Envoy's validation accepts and
// grpc-go rejects: grpc-go has no client-side RBAC filter.
func badListener(t *testing.T, node, name string) []snapshot.Resource {
	t.Helper()
	hcm := &hcmv3.HttpConnectionManager{
		StatPrefix: name,
		RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: &routev3.RouteConfiguration{
			Name: name,
			VirtualHosts: []*routev3.VirtualHost{{Name: name, Domains: []string{"*"}, Routes: []*routev3.Route{{
				Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
				Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: "vd|reviews.global|9080"}}},
			}}}},
		}},
		HttpFilters: []*hcmv3.HttpFilter{
			{Name: envoy.RBACFilter, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(t, &rbacfilterv3.RBAC{})}},
			{Name: envoy.RouterFilter, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(t, &routerv3.Router{})}},
		},
	}
	l := &listenerv3.Listener{Name: name, ApiListener: &listenerv3.ApiListener{ApiListener: mustAny(t, hcm)}}
	return []snapshot.Resource{resourceOf(t, node, l)}
}

func fixtureSnapshot(t *testing.T, fixture, cluster string) *snapshot.Snapshot {
	t.Helper()
	res := sdktest.Run(t, envoy.New(), fixture)
	var rs []snapshot.Resource
	for _, o := range res.Outputs {
		if o.Cluster != cluster {
			continue
		}
		r, err := snapshot.FromJSON(o.Body)
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	snap, err := snapshot.New(1, rs)
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// adsClient opens a state-of-the-world ADS stream to a test server.
func startServer(t *testing.T, opts xds.Options) (*xds.Server, *grpc.ClientConn) {
	t.Helper()
	srv := xds.New(opts)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve() = %v", err)
		}
	})
	return srv, conn
}

func TestApplyReportsBadResources(t *testing.T) {
	srv, _ := startServer(t, xds.Options{})
	good := fixtureSnapshot(t, "../../../plugins/envoy/testdata/virtualdestination.yaml", "east")
	rs := good.Resources()

	notXDS, err := snapshot.FromJSON([]byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","namespace":"y"}}`))
	if err != nil {
		t.Fatal(err)
	}
	// A ClusterLoadAssignment that fails validation (a locality weight of 0
	// is allowed, a priority gap is not checked: use an empty address).
	invalid := resourceOf(t, "backend", &endpointv3.ClusterLoadAssignment{
		ClusterName: "broken",
		Endpoints: []*endpointv3.LocalityLbEndpoints{{LbEndpoints: []*endpointv3.LbEndpoint{{
			HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: &corev3.Address{}}},
		}}}},
	})
	orphan := resourceOf(t, "backend", &endpointv3.ClusterLoadAssignment{ClusterName: "orphan"})
	rs = append(rs, notXDS, invalid, orphan)
	snap, err := snapshot.New(2, rs)
	if err != nil {
		t.Fatal(err)
	}
	errs, err := srv.Apply(context.Background(), envoy.Backend, snap, true)
	if err != nil {
		t.Fatalf("Apply() error = %v", err)
	}
	for _, want := range []snapshot.Resource{notXDS, invalid, orphan} {
		if errs[want.ID] == nil {
			t.Errorf("Apply() gave no error for %s", want.ID)
		}
	}
	if len(errs) != 3 {
		t.Errorf("Apply() = %d errors (%v), want 3", len(errs), errs)
	}
	if !errors.Is(errs[notXDS.ID], xdsapi.ErrNotXDS) {
		t.Errorf("Apply() error for a ConfigMap = %v, want ErrNotXDS", errs[notXDS.ID])
	}
}

// TestStateOfTheWorldAndNack fetches over a state-of-the-world ADS stream,
// checks versions follow content, prune semantics, and that a NACK reaches
// OnNack with the rejected names.
func TestStateOfTheWorldAndNack(t *testing.T) {
	type nack struct {
		node, typeURL string
		names         []string
	}
	var mu sync.Mutex
	var nacks []nack
	srv, conn := startServer(t, xds.Options{OnNack: func(node, typeURL string, names []string, err error) {
		mu.Lock()
		defer mu.Unlock()
		nacks = append(nacks, nack{node, typeURL, names})
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	snap := fixtureSnapshot(t, "../../../plugins/envoy/testdata/virtualdestination.yaml", "east")
	if errs, err := srv.Apply(ctx, envoy.Backend, snap, true); err != nil || len(errs) > 0 {
		t.Fatalf("Apply() = %v, %v", errs, err)
	}

	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	node := &corev3.Node{Id: "frontend"}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: xdsapi.ClusterType}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetResources()) != 2 {
		t.Fatalf("clusters for frontend = %d, want 2", len(resp.GetResources()))
	}
	first := resp.GetVersionInfo()

	// The same content again keeps the version: nothing is pushed.
	if _, err := srv.Apply(ctx, envoy.Backend, snap.WithVersion(7), true); err != nil {
		t.Fatal(err)
	}
	// NACK the response.
	if err := stream.Send(&discoveryv3.DiscoveryRequest{
		TypeUrl: xdsapi.ClusterType, ResponseNonce: resp.GetNonce(),
		ErrorDetail: &statuspb.Status{Code: 3, Message: "bad cluster"},
	}); err != nil {
		t.Fatal(err)
	}
	var got []nack
	testutil.EventuallyWhy(t, "one NACK", func() (bool, string) {
		mu.Lock()
		got = append([]nack(nil), nacks...)
		mu.Unlock()
		return len(got) == 1, fmt.Sprintf("NACKs = %+v", got)
	})
	want := nack{"frontend", xdsapi.ClusterType, []string{"vd|ratings.global|80", "vd|reviews.global|9080"}}
	if got[0].node != want.node || got[0].typeURL != want.typeURL || strings.Join(got[0].names, ",") != strings.Join(want.names, ",") {
		t.Errorf("NACK = %+v, want %+v", got[0], want)
	}

	// The server answers a NACK with what it has; acknowledge that.
	resp, err = stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetVersionInfo() != first {
		t.Errorf("version after re-applying the same content = %q, want %q", resp.GetVersionInfo(), first)
	}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: xdsapi.ClusterType, ResponseNonce: resp.GetNonce(), VersionInfo: first}); err != nil {
		t.Fatal(err)
	}

	// Without pruning, a desired set without frontend keeps frontend's resources.
	var others []snapshot.Resource
	for r := range snap.All() {
		if r.ID.Namespace != "frontend" {
			others = append(others, r)
		}
	}
	partial, err := snapshot.New(3, others)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Apply(ctx, envoy.Backend, partial, false); err != nil {
		t.Fatal(err)
	}
	if n := fetchClusters(ctx, t, conn, "frontend"); n != 2 {
		t.Errorf("clusters for frontend after Apply without pruning = %d, want 2 (kept)", n)
	}
	// Pruning removes them: the stream gets an empty cluster list.
	if _, err := srv.Apply(ctx, envoy.Backend, partial, true); err != nil {
		t.Fatal(err)
	}
	resp, err = stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetResources()) != 0 || resp.GetVersionInfo() == first {
		t.Errorf("after pruning: %d clusters at version %q, want none at a new version", len(resp.GetResources()), resp.GetVersionInfo())
	}
}

func TestDelta(t *testing.T) {
	srv, conn := startServer(t, xds.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	snap := fixtureSnapshot(t, "../../../plugins/envoy/testdata/virtualdestination.yaml", "east")
	if _, err := srv.Apply(ctx, envoy.Backend, snap, true); err != nil {
		t.Fatal(err)
	}
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&discoveryv3.DeltaDiscoveryRequest{
		Node: &corev3.Node{Id: "frontend"}, TypeUrl: xdsapi.EndpointType,
		ResourceNamesSubscribe: []string{"vd|reviews.global|9080"},
	}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetResources()) != 1 || resp.GetResources()[0].GetName() != "vd|reviews.global|9080" {
		t.Fatalf("delta response = %v, want the reviews.global assignment", resp.GetResources())
	}
	cla := &endpointv3.ClusterLoadAssignment{}
	if err := resp.GetResources()[0].GetResource().UnmarshalTo(cla); err != nil {
		t.Fatal(err)
	}
	if n := len(cla.GetEndpoints()); n != 4 {
		t.Errorf("localities = %d, want 4 (two zones in each of two clusters)", n)
	}
}

// fetchClusters asks a new stream for node's Clusters and counts them.
func fetchClusters(ctx context.Context, t *testing.T, conn *grpc.ClientConn, node string) int {
	t.Helper()
	return len(clusterNames(ctx, t, conn, node))
}

func TestApplyWithoutPruneDeletesNothing(t *testing.T) {
	srv, conn := startServer(t, xds.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	full := fixtureSnapshot(t, "../../../plugins/envoy/testdata/virtualdestination.yaml", "east")
	if errs, err := srv.Apply(ctx, envoy.Backend, full, true); err != nil || len(errs) > 0 {
		t.Fatalf("Apply() = %v, %v", errs, err)
	}
	// frontend no longer wants ratings.global.
	var fewer []snapshot.Resource
	for r := range full.All() {
		if r.ID.Namespace == "frontend" && strings.Contains(r.ID.Name, "ratings.global") {
			continue
		}
		fewer = append(fewer, r)
	}
	snap, err := snapshot.New(2, fewer)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		prune bool
		want  int
	}{{false, 2}, {true, 1}} {
		errs, err := srv.Apply(ctx, envoy.Backend, snap, tc.prune)
		if err != nil || len(errs) > 0 {
			t.Fatalf("Apply(prune=%v) = %v, %v", tc.prune, errs, err)
		}
		if got := fetchClusters(ctx, t, conn, "frontend"); got != tc.want {
			t.Errorf("after Apply(prune=%v): frontend has %d clusters, want %d", tc.prune, got, tc.want)
		}
	}
}
