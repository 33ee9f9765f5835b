package ui

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshrelay/meshrelay/internal/testutil"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// graphAdmin counts the graph's computations and refuses any token but
// "good".
type graphAdmin struct {
	relayv1.UnimplementedAdminServer
	lists atomic.Int32
	// gate, when set, holds each computation until it is closed.
	gate chan struct{}
}

func (a *graphAdmin) ListClusters(ctx context.Context, _ *relayv1.ListClustersRequest) (*relayv1.ListClustersResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("authorization"); len(v) != 1 || v[0] != "Bearer good" {
		return nil, status.Error(codes.Unauthenticated, "bad token")
	}
	return &relayv1.ListClustersResponse{}, nil
}

func (a *graphAdmin) List(context.Context, *relayv1.ListRequest) (*relayv1.ListResponse, error) {
	a.lists.Add(1)
	if a.gate != nil {
		<-a.gate
	}
	return &relayv1.ListResponse{Destinations: []*relayv1.Destination{{Cluster: "c10"}, {Cluster: "c9"}}}, nil
}

func (a *graphAdmin) GetStatus(context.Context, *relayv1.GetStatusRequest) (*relayv1.Status, error) {
	return &relayv1.Status{}, nil
}

// The graph is computed once for its viewers while it is young; an older
// one is served marked stale while one new computation runs; every caller's
// token is checked, whatever the cache holds.
func TestGraphCache(t *testing.T) {
	a := &graphAdmin{}
	s := &Server{admin: a, log: slog.New(slog.DiscardHandler)}
	good := adminContext(context.Background(), "good")
	for range 3 {
		g, err := s.cachedGraph(good)
		if err != nil {
			t.Fatal(err)
		}
		if g.Stale || len(g.Destinations) != 2 || g.Destinations[0].Cluster != "c9" {
			t.Errorf("graph = %+v, want current, with c9 before c10", g)
		}
	}
	if n := a.lists.Load(); n != 1 {
		t.Errorf("three viewers computed the graph %d times, want once", n)
	}
	if _, err := s.cachedGraph(adminContext(context.Background(), "bad")); status.Code(err) != codes.Unauthenticated {
		t.Errorf("a bad token gets the cached graph: %v", err)
	}

	a.gate = make(chan struct{})
	s.shared.mu.Lock()
	s.shared.entries[graphKey].at = time.Now().Add(-sharedMaxAge)
	s.shared.mu.Unlock()
	for range 3 {
		g, err := s.cachedGraph(good)
		if err != nil {
			t.Fatal(err)
		}
		if !g.Stale {
			t.Errorf("an old graph is served without being marked stale")
		}
	}
	close(a.gate)
	testutil.Eventually(t, "the new graph", func() bool {
		g, err := s.cachedGraph(good)
		return err == nil && !g.Stale
	})
	if n := a.lists.Load(); n != 2 {
		t.Errorf("the graph was computed %d times, want twice", n)
	}
}

// outlineAdmin has a management AccessPolicy admitting east's clients to
// reviews in west, and describes it only in outline: its full description,
// with the fleet's outputs, is refused.
type outlineAdmin struct {
	graphAdmin
	outlines atomic.Int32
}

func (a *outlineAdmin) List(context.Context, *relayv1.ListRequest) (*relayv1.ListResponse, error) {
	return &relayv1.ListResponse{Destinations: []*relayv1.Destination{{Cluster: "west", Namespace: "bookinfo", Name: "reviews"}}}, nil
}

func (a *outlineAdmin) GetStatus(context.Context, *relayv1.GetStatusRequest) (*relayv1.Status, error) {
	return &relayv1.Status{Policies: []*relayv1.PolicyStatus{{Kind: "AccessPolicy", Namespace: "bookinfo", Name: "reviews-access"}}}, nil
}

func (a *outlineAdmin) DescribePolicy(_ context.Context, req *relayv1.DescribeRequest) (*relayv1.PolicyDescription, error) {
	if !req.GetOutline() {
		return nil, status.Error(codes.ResourceExhausted, "the graph asked for every output of the policy")
	}
	a.outlines.Add(1)
	return &relayv1.PolicyDescription{Body: `{"apiVersion":"policy.meshrelay.io/v1alpha1","kind":"AccessPolicy","metadata":{"name":"reviews-access","namespace":"bookinfo"},
"spec":{"destinationSelectors":[{"namespaces":["bookinfo"],"names":["reviews"]}],"action":"Allow","from":[{"clusters":["east"]}]}}`}, nil
}

// The graph reads each policy's outline, not its description with every
// output of the fleet, which it does not draw.
func TestGraphReadsPolicyOutlines(t *testing.T) {
	a := &outlineAdmin{}
	s := &Server{admin: a, log: slog.New(slog.DiscardHandler)}
	g, err := s.cachedGraph(adminContext(context.Background(), "good"))
	if err != nil {
		t.Fatal(err)
	}
	want := graphEdge{From: "east", To: "west", Destination: "bookinfo/reviews", Kind: "AccessPolicy", Policy: "AccessPolicy/bookinfo/reviews-access"}
	if len(g.Edges) != 1 || g.Edges[0] != want {
		t.Errorf("edges = %+v, want %+v", g.Edges, want)
	}
	if n := a.outlines.Load(); n != 1 {
		t.Errorf("the graph read %d outlines, want 1", n)
	}
}
