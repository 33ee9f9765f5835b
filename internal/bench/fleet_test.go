package bench

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/engine"
	"github.com/meshrelay/meshrelay/core/pluginhost"
	"github.com/meshrelay/meshrelay/plugins/istio"
)

// TestChangesReachTheirOutputs checks the benchmark's premise: a Change
// reaches its own cluster's Istio output and no other, and a policy edit
// reaches every cluster's, each carrying its marker.
func TestChangesReachTheirOutputs(t *testing.T) {
	e, clusters, cycle := istioFleet(t, NewCluster)
	e.SetPolicies(policies(t, "p0"))
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

// TestChangeEndpoint checks that an endpoint change rewrites exactly the
// changed service's EndpointSlice, giving its first endpoint the address.
func TestChangeEndpoint(t *testing.T) {
	c, err := NewGlobalCluster(7, 5)
	if err != nil {
		t.Fatal(err)
	}
	before, err := c.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	addr := EndpointAddress(70000)
	after, err := c.ChangeEndpoint(3, addr)
	if err != nil {
		t.Fatal(err)
	}
	d := snapshot.Diff(before, after)
	if len(d.Deletes) != 0 || len(d.Upserts) != 1 {
		t.Fatalf("ChangeEndpoint(3) changed %d and deleted %d resources, want 1 and 0", len(d.Upserts), len(d.Deletes))
	}
	got := d.Upserts[0]
	want := snapshot.ID{Group: "discovery.k8s.io", Version: "v1", Kind: "EndpointSlice", Namespace: Namespace, Name: ServiceName(3) + "-1"}
	if got.ID != want {
		t.Errorf("ChangeEndpoint(3) changed %v, want %v", got.ID, want)
	}
	if !strings.Contains(string(got.Body), `"`+addr+`"`) {
		t.Errorf("the changed EndpointSlice lacks the address %s: %s", addr, got.Body)
	}
	old, _ := before.Get(want)
	if n := strings.Count(string(old.Body), `"ready":true`); n != 2 || strings.Count(string(got.Body), `"ready":true`) != n {
		t.Errorf("the change altered the endpoints' readiness: before %s, after %s", old.Body, got.Body)
	}
	// A second change of the same slice replaces the address again.
	again, err := c.ChangeEndpoint(3, EndpointAddress(70001))
	if err != nil {
		t.Fatal(err)
	}
	if d := snapshot.Diff(after, again); len(d.Upserts) != 1 || d.Upserts[0].ID != want || len(d.Deletes) != 0 {
		t.Errorf("a second ChangeEndpoint(3) gave %d upserts and %d deletes, want only the slice", len(d.Upserts), len(d.Deletes))
	}
}

func TestEndpointAddressIsUnique(t *testing.T) {
	seen := map[string]int{}
	for seq := range 1 << 18 {
		a := EndpointAddress(seq)
		if prev, ok := seen[a]; ok {
			t.Fatalf("EndpointAddress(%d) = EndpointAddress(%d) = %s", seq, prev, a)
		}
		if net.ParseIP(a) == nil {
			t.Fatalf("EndpointAddress(%d) = %q, not an IP address", seq, a)
		}
		seen[a] = seq
	}
}

// TestGlobalChangesReachTheirOutputs checks the global scenario's premise:
// the VirtualDestination gives every cluster a ServiceEntry that reaches
// every other cluster's gateway, and an endpoint change reaches its own
// cluster's Istio output.
func TestGlobalChangesReachTheirOutputs(t *testing.T) {
	e, clusters, cycle := istioFleet(t, NewGlobalCluster)
	vd, err := snapshot.FromYAML(GlobalPolicyYAML())
	if err != nil {
		t.Fatal(err)
	}
	access, err := snapshot.FromYAML(PolicyYAML("p0"))
	if err != nil {
		t.Fatal(err)
	}
	pol, err := snapshot.New(0, []snapshot.Resource{access, vd})
	if err != nil {
		t.Fatal(err)
	}
	e.SetPolicies(pol)
	serviceEntry := func(s *snapshot.Snapshot) string {
		for r := range s.All() {
			if r.ID.Kind == "ServiceEntry" && strings.Contains(string(r.Body), `"svc-000.bench.global"`) {
				return string(r.Body)
			}
		}
		return ""
	}
	got := cycle()
	// Every cluster's gateway makes every backend reachable: no warnings
	// (without gateways, each cluster would warn about every other).
	for _, d := range e.Diagnostics() {
		t.Errorf("diagnostic from %s on %s: %s %s (%s)", d.Plugin, d.Policy, d.Severity, d.Summary, d.Detail)
	}
	for i, c := range clusters {
		se := serviceEntry(got[c.Name])
		if se == "" {
			t.Fatalf("%s has no ServiceEntry for svc-000.bench.global", c.Name)
		}
		for k := range clusters {
			gw := fmt.Sprintf(`"198.18.0.%d"`, k)
			if k != i && !strings.Contains(se, gw) {
				t.Errorf("%s's ServiceEntry lacks the gateway %s of %s: %s", c.Name, gw, clusters[k].Name, se)
			}
		}
	}
	addr := EndpointAddress(1)
	s, err := clusters[1].ChangeEndpoint(0, addr)
	if err != nil {
		t.Fatal(err)
	}
	e.SetInput(clusters[1].Name, s)
	got = cycle()
	if out := got[clusters[1].Name]; out == nil || !strings.Contains(serviceEntry(out), `"`+addr+`"`) {
		t.Errorf("after ChangeEndpoint in %s, its ServiceEntry lacks the address %s", clusters[1].Name, addr)
	}
}

// istioFleet returns an engine over the in-process Istio translator with
// three clusters of 4 services made by newCluster as its inputs, and a
// cycle that runs it and returns the Istio outputs it handed on, by
// cluster.
func istioFleet(t *testing.T, newCluster func(i, services int) (*Cluster, error)) (memFleet, []*Cluster, func() map[string]*snapshot.Snapshot) {
	t.Helper()
	l, err := pluginhost.InProcess(istio.New(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	e := newMemFleet(l)
	clusters := make([]*Cluster, 3)
	for i := range clusters {
		c, err := newCluster(i, 4)
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
	cycle := func() map[string]*snapshot.Snapshot {
		t.Helper()
		out := map[string]*snapshot.Snapshot{}
		for _, o := range e.cycle(context.Background()).Outputs {
			if o.Key.Backend != "istio" {
				t.Errorf("output for backend %q, want istio", o.Key.Backend)
			}
			out[o.Key.Cluster] = o.Snapshot
		}
		return out
	}
	return e, clusters, cycle
}

// memFleet is an engine over a MemView, delivering as offline translation
// does.
type memFleet struct {
	*engine.Engine
	view *engine.MemView
}

func newMemFleet(translators ...pluginhost.Translator) memFleet {
	view := engine.NewMemView()
	return memFleet{Engine: engine.New(translators, engine.Options{View: view}), view: view}
}

// SetInput sets a cluster's input; the next cycle reads it.
func (f memFleet) SetInput(cluster string, s *snapshot.Snapshot) { f.view.SetInput(cluster, s) }

// cycle runs one translation, delivers it and returns it.
func (f memFleet) cycle(ctx context.Context) engine.Ready {
	r := f.Step(ctx)
	f.Advance(f.view.Deliver(r))
	return r
}
