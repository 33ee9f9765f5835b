package ui

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshrelay/meshrelay/internal/testutil"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// versionAdmin answers GetStatus with the status of its version, a new
// last-seen time each call, and counts the calls.
type versionAdmin struct {
	relayv1.UnimplementedAdminServer
	mu      sync.Mutex
	version string
	calls   int
}

func (a *versionAdmin) GetStatus(context.Context, *relayv1.GetStatusRequest) (*relayv1.Status, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls++
	return &relayv1.Status{ServerId: "s-" + a.version, Version: a.version, Clusters: []*relayv1.ClusterStatus{{Name: "east", LastSeen: timestamppb.Now()}}}, nil
}

func (a *versionAdmin) set(version string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.version = version
}

func (a *versionAdmin) polls() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.calls
}

// The event streams share one status while it is younger than the max
// age, and ask again once it is older.
func TestStatusCache(t *testing.T) {
	admin := &versionAdmin{version: "v1"}
	var c statusCache
	v1, data, err := c.get(context.Background(), admin, time.Hour, "")
	if err != nil || v1 != "v1" || !strings.Contains(string(data), `"s-v1"`) {
		t.Fatalf("get = %q, %s, %v; want v1 as JSON", v1, data, err)
	}
	for range 10 {
		if v, data, _ := c.get(context.Background(), admin, time.Hour, v1); v != v1 || data != nil {
			t.Fatalf("get of a known version within the max age = %q, %s; want v1 without its JSON", v, data)
		}
	}
	if admin.polls() != 1 {
		t.Errorf("11 gets within the max age asked the admin API %d times, want 1", admin.polls())
	}
	admin.set("v2")
	if v, data, _ := c.get(context.Background(), admin, 0, v1); admin.polls() != 2 || v != "v2" || !strings.Contains(string(data), `"s-v2"`) {
		t.Errorf("a get past the max age = %q, %s (calls %d), want v2 as JSON", v, data, admin.polls())
	}
}

// recordedEvents is what a stream sent, as streamStatus's send gets it.
type recordedEvents struct {
	mu     sync.Mutex
	status [][]byte // the data of each status event
}

func (r *recordedEvents) send(format string, args ...any) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if strings.HasPrefix(format, "event: status") {
		r.status = append(r.status, args[0].([]byte))
	}
	return nil
}

func (r *recordedEvents) statuses() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]byte(nil), r.status...)
}

// An event stream sends the status once, then nothing while its version
// stays the same (only the heartbeats' times change), and again once it
// changes; the streams share one JSON of each version.
func TestEventsSendOnlyChangedStatus(t *testing.T) {
	admin := &versionAdmin{version: "v1"}
	s := &Server{admin: admin, opts: Options{Poll: time.Millisecond, StreamLife: time.Hour}}
	ctx, cancel := context.WithCancel(context.Background())
	streams := []*recordedEvents{{}, {}}
	var wg sync.WaitGroup
	for _, r := range streams {
		version, data, _ := s.status.get(ctx, admin, 0, "")
		wg.Go(func() { s.streamStatus(ctx, version, data, func() bool { return true }, r.send) })
	}
	defer func() {
		cancel()
		wg.Wait()
	}()
	testutil.Eventually(t, "50 polls", func() bool { return admin.polls() >= 50 })
	for i, r := range streams {
		if got := r.statuses(); len(got) != 1 {
			t.Fatalf("stream %d sent %d statuses over 50 polls of one version, want 1", i, len(got))
		}
	}
	admin.set("v2")
	testutil.Eventually(t, "the new status sent by each stream", func() bool {
		return len(streams[0].statuses()) == 2 && len(streams[1].statuses()) == 2
	})
	a, b := streams[0].statuses()[1], streams[1].statuses()[1]
	if !strings.Contains(string(a), `"s-v2"`) || &a[0] != &b[0] {
		t.Errorf("the streams sent %s and %s; want v2, serialised once for both", a, b)
	}
	polls := admin.polls()
	testutil.Eventually(t, "50 more polls", func() bool { return admin.polls() >= polls+50 })
	for i, r := range streams {
		if got := r.statuses(); len(got) != 2 {
			t.Errorf("stream %d sent %d statuses, want 2", i, len(got))
		}
	}
}
