package server

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/meshrelay/meshrelay/core/pki"
	"github.com/meshrelay/meshrelay/internal/testutil"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// withSharedToken starts a server that accepts a new shared token, and
// returns the token through tok.
func withSharedToken(t *testing.T, tok *string) serverOption {
	t.Helper()
	shared, err := pki.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	*tok = shared
	return func(o *Options) { o.SharedToken = shared }
}

// The shared token cannot take a cluster over from its agent: while the
// agent's certificate is valid, registrations with the shared token are
// refused with FailedPrecondition, however many; the agent's certificate
// stays one of the cluster's, its stream is not cut, and describe cluster
// tells the operator the shared token registered the cluster.
func TestSharedTokenCannotEvictAgent(t *testing.T) {
	var shared string
	ts := startServer(t, nil, "", withSharedToken(t, &shared))
	ts.registerWith(&relayv1.RegisterClusterRequest{Cluster: "west", AllowSharedToken: true})
	west := startAgent(t, ts, "west", shared)
	west.src.set(t, "a")
	testutil.Eventually(t, "west's outputs", func() bool { return slices.Equal(west.sink.names(), []string{"a"}) })
	ctx := context.Background()
	before, err := ts.store.GetCluster(ctx, "west")
	if err != nil {
		t.Fatal(err)
	}
	ts.mu.Lock()
	stream := ts.streams["west"]
	ts.mu.Unlock()

	for i := range 5 {
		_, err := ts.certificate("west", shared)
		code := status.Code(err)
		if code != codes.FailedPrecondition && (i == 0 || code != codes.ResourceExhausted) {
			t.Fatalf("registration %d with the shared token while west's agent holds a valid certificate = %v, want FailedPrecondition", i+1, err)
		}
	}
	after, err := ts.store.GetCluster(ctx, "west")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(after.Serials, before.Serials) {
		t.Errorf("west's serials changed from %v to %v", before.Serials, after.Serials)
	}
	west.src.set(t, "a", "b")
	testutil.Eventually(t, "west's outputs after the refused registrations", func() bool {
		return slices.Equal(west.sink.names(), []string{"a", "b"})
	})
	ts.mu.Lock()
	same := ts.streams["west"] == stream
	ts.mu.Unlock()
	if !same {
		t.Error("west's stream was replaced: its agent was cut off")
	}

	desc, err := relayv1.NewAdminClient(ts.dial(nil)).DescribeCluster(ts.adminCtx(), &relayv1.DescribeRequest{Name: "west"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(desc.GetDiagnostics(), func(d *relayv1.Diagnostic) bool {
		return d.GetSummary() == "registered with the shared token"
	}) {
		t.Errorf("describe cluster west: diagnostics %v lack the shared token's registration", desc.GetDiagnostics())
	}
}

// Callers racing to register a cluster with the shared token get one
// certificate between them; once it expired, the shared token registers
// the cluster again only after sharedTokenInterval.
func TestSharedTokenOncePerInterval(t *testing.T) {
	var shared string
	ts := startServer(t, nil, "", withSharedToken(t, &shared), func(o *Options) { o.CertTTL = time.Second })
	ts.registerWith(&relayv1.RegisterClusterRequest{Cluster: "west", AllowSharedToken: true})
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		certs int
	)
	for range 5 {
		wg.Go(func() {
			_, err := ts.certificate("west", shared)
			mu.Lock()
			defer mu.Unlock()
			switch status.Code(err) {
			case codes.OK:
				certs++
			case codes.FailedPrecondition, codes.ResourceExhausted:
			default:
				t.Errorf("racing registration with the shared token = %v", err)
			}
		})
	}
	wg.Wait()
	if certs != 1 {
		t.Fatalf("5 racing registrations with the shared token got %d certificates, want 1", certs)
	}
	rec, err := ts.store.GetCluster(context.Background(), "west")
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "west's certificate to expire", func() bool { return time.Now().After(rec.CertExpires) })
	if _, err := ts.certificate("west", shared); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("the shared token again within %s = %v, want ResourceExhausted", sharedTokenInterval, err)
	}
}
