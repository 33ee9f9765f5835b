package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/pluginhost"
	"github.com/meshrelay/meshrelay/internal/testutil"
)

// counter is an in-process translator for engine logic tests: it keeps the
// view from its updates like a plugin session does, and emits for every
// cluster a ConfigMap counting the cluster's Services and the policies.
type counter struct {
	backend string

	mu       sync.Mutex
	view     map[string]map[snapshot.ID]bool
	policies map[snapshot.ID]bool
	updates  []pluginhost.Update
	fail     error
	last     map[string]string
}

func newCounter(backend string) *counter {
	return &counter{backend: backend, view: map[string]map[snapshot.ID]bool{}, policies: map[snapshot.ID]bool{}, last: map[string]string{}}
}

func (c *counter) Name() string       { return "counter-" + c.backend }
func (c *counter) Backends() []string { return []string{c.backend} }

// Meshes declares the backend a mesh, as the Istio and Cilium translators
// do, except the custom backend netpol, which runs for every cluster.
func (c *counter) Meshes() []string {
	if c.backend == "netpol" {
		return nil
	}
	return []string{c.backend}
}

func (c *counter) OutputKinds() []string { return []string{"/ConfigMap"} }
func (c *counter) InputKinds() []string  { return nil }

func (c *counter) Translate(_ context.Context, u pluginhost.Update) (pluginhost.Result, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.updates = append(c.updates, u)
	if c.fail != nil {
		return pluginhost.Result{}, c.fail
	}
	if u.Full {
		c.view = map[string]map[snapshot.ID]bool{}
		c.policies = map[snapshot.ID]bool{}
		c.last = map[string]string{}
	}
	for _, cu := range u.Clusters {
		if cu.Removed {
			delete(c.view, cu.Name)
			continue
		}
		if c.view[cu.Name] == nil {
			c.view[cu.Name] = map[snapshot.ID]bool{}
		}
		for _, r := range cu.Upserts {
			c.view[cu.Name][r.ID] = true
		}
		for _, id := range cu.Deletes {
			delete(c.view[cu.Name], id)
		}
	}
	for _, r := range u.PolicyUpserts {
		c.policies[r.ID] = true
	}
	for _, id := range u.PolicyDeletes {
		delete(c.policies, id)
	}
	var res pluginhost.Result
	for name, objs := range c.view {
		if u.Scoped && !slices.Contains(u.Targets, name) {
			delete(c.last, name) // forgotten, as an SDK session forgets it
			continue
		}
		services := 0
		for id := range objs {
			if id.Kind == "Service" {
				services++
			}
		}
		body := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"count","namespace":"default"},"data":{"services":"%d","policies":"%d"}}`, services, len(c.policies))
		if c.last[name] == body {
			continue
		}
		c.last[name] = body
		r, err := snapshot.FromJSON([]byte(body))
		if err != nil {
			return res, err
		}
		res.Outputs = append(res.Outputs, pluginhost.ClusterOutput{Cluster: name, Backend: c.backend, Resources: []snapshot.Resource{r}})
	}
	return res, nil
}

func (c *counter) calls() []pluginhost.Update {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]pluginhost.Update(nil), c.updates...)
}

func mesh(t testing.TB, typ string) snapshot.Resource {
	r, err := snapshot.FromJSON([]byte(`{"apiVersion":"discovery.meshrelay.io/v1alpha1","kind":"Mesh","metadata":{"name":"` + typ + `"},"spec":{"type":"` + typ + `"}}`))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func service(t testing.TB, name string) snapshot.Resource {
	r, err := snapshot.FromJSON([]byte(`{"apiVersion":"v1","kind":"Service","metadata":{"name":"` + name + `","namespace":"default"}}`))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func input(t testing.TB, version uint64, meshType string, services ...string) *snapshot.Snapshot {
	rs := []snapshot.Resource{mesh(t, meshType)}
	for _, s := range services {
		rs = append(rs, service(t, s))
	}
	s, err := snapshot.New(version, rs)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

type recorder struct {
	mu   sync.Mutex
	outs []Output
}

func (r *recorder) record(o Output) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.outs = append(r.outs, o)
}

func (r *recorder) keys() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ks []string
	for _, o := range r.outs {
		ks = append(ks, o.Key.String())
	}
	return ks
}

func TestOnlyChangedOutputsAreHandedOn(t *testing.T) {
	ctx := context.Background()
	tr := newCounter("istio")
	var rec recorder
	e := New([]pluginhost.Translator{tr}, Options{OnOutput: rec.record})
	e.SetInput("east", input(t, 1, "istio", "a"))
	e.SetInput("west", input(t, 1, "istio", "b"))
	e.Cycle(ctx)
	if diff := cmp.Diff([]string{"east/istio", "west/istio"}, rec.keys()); diff != "" {
		t.Fatalf("first cycle outputs (-want +got):\n%s", diff)
	}

	e.SetInput("east", input(t, 2, "istio", "a", "c"))
	e.Cycle(ctx)
	if diff := cmp.Diff([]string{"east/istio", "west/istio", "east/istio"}, rec.keys()); diff != "" {
		t.Fatalf("after one cluster changed (-want +got):\n%s", diff)
	}
	calls := tr.calls()
	last := calls[len(calls)-1]
	if last.Full || len(last.Clusters) != 1 || last.Clusters[0].Name != "east" || len(last.Clusters[0].Upserts) != 1 {
		t.Fatalf("second update = %+v, want only east's one new Service", last)
	}
	o, _ := e.Output(OutputKey{"east", "istio"})
	if o.Snapshot.Version() != 2 {
		t.Errorf("east output version = %d, want 2", o.Snapshot.Version())
	}

	// The same input again changes nothing and calls nobody.
	e.SetInput("east", input(t, 3, "istio", "a", "c"))
	e.Cycle(ctx)
	if n := len(tr.calls()); n != 2 {
		t.Errorf("translator called %d times, want 2", n)
	}
}

func TestRunCoalescesChanges(t *testing.T) {
	tr := newCounter("istio")
	var rec recorder
	e := New([]pluginhost.Translator{tr}, Options{OnOutput: rec.record, Debounce: 200 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- e.Run(ctx) }()
	for i := range 20 {
		e.SetInput("east", input(t, uint64(i+1), "istio", fmt.Sprint("svc-", i)))
	}
	testutil.Eventually(t, "the condition", func() bool { return len(rec.keys()) == 1 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := len(tr.calls()); n != 1 {
		t.Errorf("20 quick changes gave %d translations, want 1", n)
	}
}

func TestFailedTranslatorKeepsLastOutputs(t *testing.T) {
	ctx := context.Background()
	tr := newCounter("istio")
	var rec recorder
	e := New([]pluginhost.Translator{tr}, Options{OnOutput: rec.record, RetryBackoff: time.Millisecond})
	e.SetInput("east", input(t, 1, "istio", "a"))
	e.Cycle(ctx)
	before, _ := e.Output(OutputKey{"east", "istio"})

	tr.mu.Lock()
	tr.fail = errors.New("plugin crashed")
	tr.mu.Unlock()
	e.SetInput("east", input(t, 2, "istio", "a", "b"))
	if wait := e.Cycle(ctx); wait <= 0 {
		t.Errorf("Cycle after a failure asks no retry")
	}
	after, _ := e.Output(OutputKey{"east", "istio"})
	if after.Snapshot.Hash() != before.Snapshot.Hash() || len(rec.keys()) != 1 {
		t.Fatalf("a failed translator changed the outputs")
	}
	st := e.Status()
	if st[0].Healthy || st[0].Error == "" {
		t.Errorf("Status = %+v, want unhealthy with the error", st[0])
	}

	tr.mu.Lock()
	tr.fail = nil
	tr.mu.Unlock()
	testutil.Eventually(t, "the condition", func() bool { e.Cycle(ctx); return len(rec.keys()) == 2 })
	calls := tr.calls()
	if !calls[len(calls)-1].Full {
		t.Errorf("retry after a failure must resend the full view")
	}
	if !e.Status()[0].Healthy {
		t.Errorf("translator still unhealthy after success")
	}
}

// TestRetryOutlivesCyclesDuringBackoff fails a translator, then runs a
// cycle for another change while it backs off, then changes nothing
// more: its retry must still come, or its clusters keep stale outputs
// until the next change.
func TestRetryOutlivesCyclesDuringBackoff(t *testing.T) {
	ctx := context.Background()
	tr := newCounter("istio")
	e := New([]pluginhost.Translator{tr}, Options{RetryBackoff: time.Minute})
	e.SetInput("east", input(t, 1, "istio", "a"))
	e.Cycle(ctx)
	tr.mu.Lock()
	tr.fail = errors.New("plugin crashed")
	tr.mu.Unlock()
	e.SetInput("east", input(t, 2, "istio", "a", "b"))
	if wait := e.Cycle(ctx); wait <= 0 {
		t.Fatalf("Cycle after a failure asks no retry")
	}
	e.SetInput("west", input(t, 1, "istio", "c"))
	if wait := e.Cycle(ctx); wait <= 0 || wait > time.Minute {
		t.Errorf("a cycle while the failed translator backs off asks a retry in %s, want one within its backoff (1m)", wait)
	}
	if n := len(tr.calls()); n != 2 {
		t.Errorf("the translator was called %d times, want 2: none while it backs off", n)
	}
}

// needFull answers ErrNeedFull to the first delta after a restart, as a
// restarted plugin does.
type needFull struct {
	*counter
	restarted bool
}

func (n *needFull) Translate(ctx context.Context, u pluginhost.Update) (pluginhost.Result, error) {
	if n.restarted && !u.Full {
		n.restarted = false
		return pluginhost.Result{}, pluginhost.ErrNeedFull
	}
	return n.counter.Translate(ctx, u)
}

func TestNeedFullResendsEverything(t *testing.T) {
	ctx := context.Background()
	tr := &needFull{counter: newCounter("istio")}
	e := New([]pluginhost.Translator{tr}, Options{})
	e.SetInput("east", input(t, 1, "istio", "a"))
	e.SetInput("west", input(t, 1, "istio", "b"))
	e.Cycle(ctx)
	tr.restarted = true
	e.SetInput("east", input(t, 2, "istio", "a", "c"))
	e.Cycle(ctx)
	calls := tr.calls()
	last := calls[len(calls)-1]
	if !last.Full || len(last.Clusters) != 2 {
		t.Fatalf("after ErrNeedFull the update = full %v with %d clusters, want full with 2", last.Full, len(last.Clusters))
	}
}

func TestTranslatorsRunOnlyForTheirMeshes(t *testing.T) {
	ctx := context.Background()
	istio, cilium, custom := newCounter("istio"), newCounter("cilium"), newCounter("netpol")
	e := New([]pluginhost.Translator{istio, cilium, custom}, Options{})
	e.SetInput("east", input(t, 1, "istio", "a"))
	e.Cycle(ctx)
	if len(istio.calls()) != 1 || len(cilium.calls()) != 0 || len(custom.calls()) != 1 {
		t.Errorf("calls istio=%d cilium=%d custom=%d, want 1, 0, 1", len(istio.calls()), len(cilium.calls()), len(custom.calls()))
	}
}

func TestDeterministicAcrossEngines(t *testing.T) {
	ctx := context.Background()
	hashes := func() map[string]snapshot.Hash {
		e := New([]pluginhost.Translator{newCounter("istio")}, Options{})
		e.SetInput("west", input(t, 1, "istio", "x", "y"))
		e.SetInput("east", input(t, 1, "istio", "a"))
		e.Cycle(ctx)
		out := map[string]snapshot.Hash{}
		for _, c := range []string{"east", "west"} {
			o, _ := e.Output(OutputKey{c, "istio"})
			out[c] = o.Snapshot.Hash()
		}
		return out
	}
	if diff := cmp.Diff(hashes(), hashes()); diff != "" {
		t.Errorf("same view gave different outputs (-first +second):\n%s", diff)
	}
}

func TestRemovedClusterLosesOutputs(t *testing.T) {
	ctx := context.Background()
	tr := newCounter("istio")
	e := New([]pluginhost.Translator{tr}, Options{})
	e.SetInput("east", input(t, 1, "istio", "a"))
	e.SetInput("west", input(t, 1, "istio", "b"))
	e.Cycle(ctx)
	e.RemoveCluster("west")
	e.Cycle(ctx)
	if _, ok := e.Output(OutputKey{"west", "istio"}); ok {
		t.Error("a removed cluster still has outputs")
	}
	calls := tr.calls()
	last := calls[len(calls)-1]
	if len(last.Clusters) != 1 || !last.Clusters[0].Removed {
		t.Errorf("update after removal = %+v, want west removed", last.Clusters)
	}
}

func TestStaleClusterStaysInView(t *testing.T) {
	ctx := context.Background()
	tr := newCounter("istio")
	e := New([]pluginhost.Translator{tr}, Options{})
	e.SetInput("east", input(t, 1, "istio", "a"))
	e.Cycle(ctx)
	e.SetStale("east", true)
	e.Cycle(ctx)
	calls := tr.calls()
	last := calls[len(calls)-1]
	if len(last.Clusters) != 1 || !last.Clusters[0].Stale || last.Clusters[0].Removed {
		t.Fatalf("update after stale = %+v, want east marked stale, not removed", last.Clusters)
	}
	if _, ok := e.Output(OutputKey{"east", "istio"}); !ok {
		t.Error("a stale cluster lost its outputs")
	}
}

func TestRefreshRunsACycleThatSeesTheView(t *testing.T) {
	var gens []uint64
	var mu sync.Mutex
	e := New([]pluginhost.Translator{newCounter("istio")}, Options{Debounce: time.Millisecond, OnCycle: func(c CycleStats) {
		mu.Lock()
		gens = append(gens, c.Generation)
		mu.Unlock()
	}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- e.Run(ctx) }()
	defer func() { cancel(); <-done }()
	before := e.Generation()
	e.Refresh()
	testutil.Eventually(t, "the condition", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(gens) > 0 && gens[len(gens)-1] > before
	})
}

func TestScopedEngineComputesOnlyItsTargets(t *testing.T) {
	c := newCounter("istio")
	e := New([]pluginhost.Translator{c}, Options{Scoped: true})
	ctx := context.Background()
	e.SetInput("a", input(t, 1, "istio", "s1"))
	e.SetInput("b", input(t, 1, "istio", "s1", "s2"))
	e.SetTarget("a", true)
	e.Cycle(ctx)
	if _, ok := e.Output(OutputKey{"a", "istio"}); !ok {
		t.Fatal("no output for target a")
	}
	if _, ok := e.Output(OutputKey{"b", "istio"}); ok {
		t.Fatal("output for b, which is not a target")
	}
	last := c.calls()[len(c.calls())-1]
	if !last.Scoped || !slices.Equal(last.Targets, []string{"a"}) || len(last.Clusters) != 2 {
		t.Fatalf("update scoped %v targets %v with %d clusters, want scoped to [a] with both clusters' inputs", last.Scoped, last.Targets, len(last.Clusters))
	}

	// b becomes a target: a cycle runs though no input changed.
	e.SetTarget("b", true)
	e.Cycle(ctx)
	if last := c.calls()[len(c.calls())-1]; !slices.Equal(last.Targets, []string{"a", "b"}) || len(last.Clusters) != 0 {
		t.Fatalf("update targets %v with %d clusters, want [a b] and no input", last.Targets, len(last.Clusters))
	}
	if _, ok := e.Output(OutputKey{"b", "istio"}); !ok {
		t.Fatal("no output for b once it is a target")
	}

	// a stops being a target: its output is dropped, not kept stale.
	e.SetTarget("a", false)
	e.Cycle(ctx)
	if _, ok := e.Output(OutputKey{"a", "istio"}); ok {
		t.Error("a kept its output after it stopped being a target")
	}
	n := len(c.calls())
	e.Cycle(ctx)
	if len(c.calls()) != n {
		t.Error("a cycle with nothing changed called the translator")
	}
}
