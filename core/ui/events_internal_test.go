package ui

import (
	"context"
	"testing"
	"time"

	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// countingAdmin answers GetStatus with a new server ID each call.
type countingAdmin struct {
	relayv1.UnimplementedAdminServer
	calls int
}

func (a *countingAdmin) GetStatus(context.Context, *relayv1.GetStatusRequest) (*relayv1.Status, error) {
	a.calls++
	return &relayv1.Status{ServerId: string(rune('a' + a.calls))}, nil
}

// The event streams share one status while it is younger than the max
// age, and ask again once it is older.
func TestStatusCache(t *testing.T) {
	admin := &countingAdmin{}
	var c statusCache
	first, sum1, err := c.get(context.Background(), admin, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		st, sum, _ := c.get(context.Background(), admin, time.Hour)
		if st != first || sum != sum1 {
			t.Fatalf("get within the max age = %v, want the cached %v", st, first)
		}
	}
	if admin.calls != 1 {
		t.Errorf("11 gets within the max age asked the admin API %d times, want 1", admin.calls)
	}
	st, sum, _ := c.get(context.Background(), admin, 0)
	if admin.calls != 2 || st == first || sum == sum1 {
		t.Errorf("a get past the max age = %v (calls %d), want a new status", st, admin.calls)
	}
}

// The fingerprint ignores the heartbeat times and sees everything else.
func TestFingerprint(t *testing.T) {
	st := &relayv1.Status{Clusters: []*relayv1.ClusterStatus{{Name: "east", Connected: true}}}
	base := fingerprint(st)
	st.Clusters[0].LastSeen = timestamppb.Now()
	if fingerprint(st) != base {
		t.Error("a new last-seen time changed the fingerprint")
	}
	st.Clusters[0].Stale = true
	if fingerprint(st) == base {
		t.Error("a cluster turning stale left the fingerprint as it was")
	}
}
