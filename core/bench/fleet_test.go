package bench

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/meshrelay/meshrelay/core/engine"
	"github.com/meshrelay/meshrelay/core/pluginhost"
	"github.com/meshrelay/meshrelay/core/snapshot"
	"github.com/meshrelay/meshrelay/plugins/istio"
)

// TestChangesReachTheirOutputs checks the benchmark's premise: a Change
// reaches its own cluster's Istio output and no other, and a policy edit
// reaches every cluster's, each carrying its marker.
func TestChangesReachTheirOutputs(t *testing.T) {
	l, err := pluginhost.InProcess(istio.New(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var handed []engine.Output
	e := engine.New([]engine.Translator{l}, engine.Options{OnOutput: func(o engine.Output) { handed = append(handed, o) }})
	clusters := make([]*Cluster, 3)
	for i := range clusters {
		c, err := NewCluster(i, 4)
		if err != nil {
			t.Fatal(err)
		}
		s, err := c.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		clusters[i] = c
		e.SetInput(c.Name, s)
	}
	e.SetPolicies(policies(t, "p0"))
	cycle := func() map[string]*snapshot.Snapshot {
		t.Helper()
		handed = nil
		e.Cycle(context.Background())
		out := map[string]*snapshot.Snapshot{}
		for _, o := range handed {
			if o.Key.Backend != "istio" {
				t.Errorf("output for backend %q, want istio", o.Key.Backend)
			}
			out[o.Key.Cluster] = o.Snapshot
		}
		return out
	}
	contains := func(s *snapshot.Snapshot, marker string) bool {
		for r := range s.All() {
			if strings.Contains(string(r.Body), marker) {
				return true
			}
		}
		return false
	}

	if got := cycle(); len(got) != len(clusters) {
		t.Fatalf("first cycle gave outputs for %d clusters, want %d", len(got), len(clusters))
	}
	s, err := clusters[1].Change(2, "m1x")
	if err != nil {
		t.Fatal(err)
	}
	e.SetInput(clusters[1].Name, s)
	got := cycle()
	if len(got) != 1 || got[clusters[1].Name] == nil || !contains(got[clusters[1].Name], `"m1x"`) {
		t.Errorf("after Change in %s, outputs changed for %v, want only it, with marker m1x", clusters[1].Name, keys(got))
	}
	e.SetPolicies(policies(t, "p1"))
	got = cycle()
	for _, c := range clusters {
		if s := got[c.Name]; s == nil || !contains(s, `"/p1/*"`) {
			t.Errorf("after the policy edit, %s's output lacks the marker", c.Name)
		}
	}
}

func keys(m map[string]*snapshot.Snapshot) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestSummarize(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	got := summarize(ds)
	if want := (Latency{Count: 100, P50: 51, P99: 100, Max: 100}); got != want {
		t.Errorf("summarize(1..100ms) = %+v, want %+v", got, want)
	}
	if got := summarize(nil); got != (Latency{}) {
		t.Errorf("summarize(nil) = %+v, want zero", got)
	}
}
