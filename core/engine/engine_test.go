package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/pluginhost"
	"github.com/meshrelay/meshrelay/internal/testutil"
)

// counter is an in-process translator for engine logic tests: given the
// view, it emits for every target a ConfigMap counting the cluster's
// Services and the policies, and answers only the sets that changed since
// its last answer, as a plugin does. Like a host session, it answers
// nothing (Sent false) when the view is the one it answered last.
type counter struct {
	backend string

	mu    sync.Mutex
	views []pluginhost.View
	fail  error
	last  map[string]string
	held  *pluginhost.View
}

func newCounter(backend string) *counter {
	return &counter{backend: backend, last: map[string]string{}}
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

func (c *counter) Translate(_ context.Context, v pluginhost.View) (pluginhost.Result, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	// The engine changes the map in place in later cycles (InPlace): keep
	// the view as it is now.
	v.Clusters = maps.Clone(v.Clusters)
	if c.held != nil && sameView(*c.held, v) {
		return pluginhost.Result{}, nil
	}
	c.views = append(c.views, v)
	if c.fail != nil {
		c.held, c.last = nil, map[string]string{}
		return pluginhost.Result{}, c.fail
	}
	c.held = &v
	res := pluginhost.Result{Sent: true, Clusters: len(v.Clusters)}
	for name := range c.last {
		if _, ok := v.Clusters[name]; !ok || (v.Scoped && !slices.Contains(v.Targets, name)) {
			delete(c.last, name) // forgotten, as an SDK session forgets it
		}
	}
	for name, cl := range v.Clusters {
		if v.Scoped && !slices.Contains(v.Targets, name) {
			continue
		}
		services := 0
		for r := range cl.Input.All() {
			if r.ID.Kind == "Service" {
				services++
			}
		}
		body := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"count","namespace":"default"},"data":{"services":"%d","policies":"%d"}}`, services, v.Policies.Len())
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

func sameView(a, b pluginhost.View) bool {
	if len(a.Clusters) != len(b.Clusters) || a.Policies.Hash() != b.Policies.Hash() || a.Scoped != b.Scoped || !slices.Equal(a.Targets, b.Targets) {
		return false
	}
	for name, ca := range a.Clusters {
		cb, ok := b.Clusters[name]
		if !ok || ca.Input.Hash() != cb.Input.Hash() || ca.Stale != cb.Stale {
			return false
		}
	}
	return true
}

// calls returns the views the translator answered (or failed on).
func (c *counter) calls() []pluginhost.View {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.views)
}

// trackedView is a MemView whose owner names each changed cluster to the
// engine (Tracked), as the server does; fail makes a cluster's input
// unreadable.
type trackedView struct {
	*MemView
	mu   sync.Mutex
	fail map[string]bool
}

func (v *trackedView) Has(cluster string) bool {
	_, _, ok := v.MemView.Input(cluster)
	return ok
}

func (v *trackedView) Input(cluster string) (*snapshot.Snapshot, bool, bool) {
	v.mu.Lock()
	failing := v.fail[cluster]
	v.mu.Unlock()
	if failing {
		return nil, false, false
	}
	return v.MemView.Input(cluster)
}

// fleet is an engine over a Tracked MemView, delivering as the server
// does: each change names its cluster.
type fleet struct {
	*Engine
	view *trackedView
	// handed are the keys of every output handed on, in order.
	handed []string
	last   CycleStats
}

func newFleet(opts Options, translators ...pluginhost.Translator) *fleet {
	f := &fleet{view: &trackedView{MemView: NewMemView(), fail: map[string]bool{}}}
	opts.View = f.view
	f.Engine = New(translators, opts)
	return f
}

func (f *fleet) SetInput(cluster string, s *snapshot.Snapshot) {
	if f.view.SetInput(cluster, s) {
		f.RefreshCluster(cluster)
	}
}

func (f *fleet) SetStale(cluster string, stale bool) {
	if f.view.SetStale(cluster, stale) {
		f.RefreshCluster(cluster)
	}
}

func (f *fleet) SetLabels(cluster string, labels map[string]string) {
	if f.view.SetLabels(cluster, labels) {
		f.RefreshCluster(cluster)
	}
}

func (f *fleet) RemoveCluster(cluster string) {
	if f.view.RemoveCluster(cluster) {
		f.RefreshCluster(cluster)
	}
}

// SetFailing makes a cluster's input unreadable, or readable again; the
// view's owner does not know, and names nothing.
func (f *fleet) SetFailing(cluster string, failing bool) {
	f.view.mu.Lock()
	defer f.view.mu.Unlock()
	f.view.fail[cluster] = failing
}

// cycle runs one Step, delivers its outputs and returns its retry.
func (f *fleet) cycle(ctx context.Context) time.Duration {
	r := f.Step(ctx)
	f.deliver(r)
	return r.Retry
}

func (f *fleet) deliver(r Ready) {
	for _, o := range r.Outputs {
		f.handed = append(f.handed, o.Key.String())
	}
	f.last = r.Stats
	f.Advance(f.view.Deliver(r))
}

// output returns the delivered output of key.
func (f *fleet) output(key OutputKey) (*snapshot.Snapshot, bool) { return f.view.Output(key) }

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

func TestOnlyChangedOutputsAreHandedOn(t *testing.T) {
	ctx := context.Background()
	tr := newCounter("istio")
	f := newFleet(Options{}, tr)
	f.SetInput("east", input(t, 1, "istio", "a"))
	f.SetInput("west", input(t, 1, "istio", "b"))
	f.cycle(ctx)
	if diff := cmp.Diff([]string{"east/istio", "west/istio"}, f.handed); diff != "" {
		t.Fatalf("first cycle outputs (-want +got):\n%s", diff)
	}

	f.SetInput("east", input(t, 2, "istio", "a", "c"))
	f.cycle(ctx)
	if diff := cmp.Diff([]string{"east/istio", "west/istio", "east/istio"}, f.handed); diff != "" {
		t.Fatalf("after one cluster changed (-want +got):\n%s", diff)
	}
	if o, _ := f.output(OutputKey{"east", "istio"}); o.Version() != 2 {
		t.Errorf("east output version = %d, want 2", o.Version())
	}
	if m, _ := f.Mark(OutputKey{"east", "istio"}); m.Version != 2 || m.Hash != func() snapshot.Hash { o, _ := f.output(OutputKey{"east", "istio"}); return o.Hash() }() {
		t.Errorf("east mark = %+v, want version 2 and the delivered output's hash", m)
	}

	// The same input again changes nothing and hands on nothing.
	f.SetInput("east", input(t, 3, "istio", "a", "c"))
	f.cycle(ctx)
	if n := len(tr.calls()); n != 2 {
		t.Errorf("translator answered %d views, want 2", n)
	}
	if len(f.handed) != 3 {
		t.Errorf("handed on %v, want nothing more", f.handed)
	}
}

// runFleet runs f's engine until the test ends.
func runFleet(t *testing.T, f *fleet) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- f.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
}

// nextReady returns the next cycle's result, or fails the test with why
// when none comes within a minute.
func nextReady(t *testing.T, ready <-chan Ready, why string) Ready {
	t.Helper()
	select {
	case r := <-ready:
		return r
	case <-time.After(time.Minute):
		t.Fatal(why)
		return Ready{}
	}
}

// services returns the number of Services the output of east counted.
func services(t *testing.T, f *fleet) string {
	t.Helper()
	out, ok := f.output(OutputKey{"east", "istio"})
	if !ok {
		t.Fatal("no output for east")
	}
	for r := range out.All() {
		var cm struct{ Data map[string]string }
		if err := json.Unmarshal(r.Body, &cm); err != nil {
			t.Fatal(err)
		}
		return cm.Data["services"]
	}
	t.Fatal("an empty output for east")
	return ""
}

func TestRunTranslatesALoneChangeAtOnce(t *testing.T) {
	ready := make(chan Ready)
	// A window no test outlasts: a cycle that waited for it would never come.
	f := newFleet(Options{Ready: ready, Debounce: time.Hour}, newCounter("istio"))
	runFleet(t, f)
	f.SetInput("east", input(t, 1, "istio", "a"))
	f.deliver(nextReady(t, ready, "a change after a quiet window was not translated: it waits for the window"))
	if got := services(t, f); got != "1" {
		t.Errorf("east's output counts %s services, want 1", got)
	}
}

func TestRunCoalescesChanges(t *testing.T) {
	tr := newCounter("istio")
	ready := make(chan Ready)
	f := newFleet(Options{Ready: ready, Debounce: 2 * time.Second}, tr)
	runFleet(t, f)
	f.SetInput("east", input(t, 1, "istio"))
	f.deliver(<-ready)
	// Within the window after that cycle started: all wait for its end.
	for i := range 20 {
		svcs := make([]string, i+1)
		for j := range svcs {
			svcs[j] = fmt.Sprint("svc-", j)
		}
		f.SetInput("east", input(t, uint64(i+2), "istio", svcs...))
	}
	f.deliver(<-ready)
	if n := len(tr.calls()); n != 2 {
		t.Errorf("a change and then 20 quick ones gave %d translations, want 2", n)
	}
	if len(f.handed) != 2 {
		t.Errorf("handed on %v, want east twice", f.handed)
	}
	if got := services(t, f); got != "20" {
		t.Errorf("east's output counts %s services, want the last change's 20", got)
	}
}

func TestRunBoundsTheWaitForABurstToPause(t *testing.T) {
	ready := make(chan Ready)
	// A burst never pauses for an hour in a test: DebounceMax ends the wait.
	f := newFleet(Options{Ready: ready, Debounce: time.Hour, DebounceMax: 100 * time.Millisecond}, newCounter("istio"))
	runFleet(t, f)
	f.SetInput("east", input(t, 1, "istio"))
	f.deliver(<-ready)
	f.SetInput("east", input(t, 2, "istio", "a"))
	f.deliver(nextReady(t, ready, "a change right after a cycle waited for a pause of a window, unbounded"))
	if got := services(t, f); got != "1" {
		t.Errorf("east's output counts %s services, want 1", got)
	}
}

func TestFailedTranslatorKeepsLastOutputs(t *testing.T) {
	ctx := context.Background()
	tr := newCounter("istio")
	f := newFleet(Options{RetryBackoff: time.Millisecond}, tr)
	f.SetInput("east", input(t, 1, "istio", "a"))
	f.cycle(ctx)
	before, _ := f.output(OutputKey{"east", "istio"})

	tr.mu.Lock()
	tr.fail = errors.New("plugin crashed")
	tr.mu.Unlock()
	f.SetInput("east", input(t, 2, "istio", "a", "b"))
	if wait := f.cycle(ctx); wait <= 0 {
		t.Errorf("a cycle after a failure asks no retry")
	}
	after, _ := f.output(OutputKey{"east", "istio"})
	if after.Hash() != before.Hash() || len(f.handed) != 1 {
		t.Fatalf("a failed translator changed the outputs")
	}
	st := f.Status()
	if st[0].Healthy || st[0].Error == "" {
		t.Errorf("Status = %+v, want unhealthy with the error", st[0])
	}

	tr.mu.Lock()
	tr.fail = nil
	tr.mu.Unlock()
	testutil.Eventually(t, "the retry hands on east's new output", func() bool { f.cycle(ctx); return len(f.handed) == 2 })
	if !f.Status()[0].Healthy {
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
	f := newFleet(Options{RetryBackoff: time.Minute}, tr)
	f.SetInput("east", input(t, 1, "istio", "a"))
	f.cycle(ctx)
	tr.mu.Lock()
	tr.fail = errors.New("plugin crashed")
	tr.mu.Unlock()
	f.SetInput("east", input(t, 2, "istio", "a", "b"))
	if wait := f.cycle(ctx); wait <= 0 {
		t.Fatalf("a cycle after a failure asks no retry")
	}
	f.SetInput("west", input(t, 1, "istio", "c"))
	if wait := f.cycle(ctx); wait <= 0 || wait > time.Minute {
		t.Errorf("a cycle while the failed translator backs off asks a retry in %s, want one within its backoff (1m)", wait)
	}
	if n := len(tr.calls()); n != 2 {
		t.Errorf("the translator was called %d times, want 2: none while it backs off", n)
	}
}

func TestTranslatorsRunOnlyForTheirMeshes(t *testing.T) {
	ctx := context.Background()
	istio, cilium, custom := newCounter("istio"), newCounter("cilium"), newCounter("netpol")
	f := newFleet(Options{}, istio, cilium, custom)
	f.SetInput("east", input(t, 1, "istio", "a"))
	f.cycle(ctx)
	if len(istio.calls()) != 1 || len(cilium.calls()) != 0 || len(custom.calls()) != 1 {
		t.Errorf("calls istio=%d cilium=%d custom=%d, want 1, 0, 1", len(istio.calls()), len(cilium.calls()), len(custom.calls()))
	}
}

func TestDeterministicAcrossEngines(t *testing.T) {
	ctx := context.Background()
	hashes := func() map[string]snapshot.Hash {
		f := newFleet(Options{}, newCounter("istio"))
		f.SetInput("west", input(t, 1, "istio", "x", "y"))
		f.SetInput("east", input(t, 1, "istio", "a"))
		f.cycle(ctx)
		out := map[string]snapshot.Hash{}
		for _, c := range []string{"east", "west"} {
			o, _ := f.output(OutputKey{c, "istio"})
			out[c] = o.Hash()
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
	f := newFleet(Options{}, tr)
	f.SetInput("east", input(t, 1, "istio", "a"))
	f.SetInput("west", input(t, 1, "istio", "b"))
	f.cycle(ctx)
	f.RemoveCluster("west")
	f.cycle(ctx)
	if _, ok := f.Mark(OutputKey{"west", "istio"}); ok {
		t.Error("the engine keeps a mark of a removed cluster's output")
	}
	calls := tr.calls()
	if _, ok := calls[len(calls)-1].Clusters["west"]; ok || len(calls) != 2 {
		t.Errorf("the translator answered %d views, the last with west, want 2 and west gone", len(calls))
	}
}

func TestStaleClusterStaysInView(t *testing.T) {
	ctx := context.Background()
	tr := newCounter("istio")
	f := newFleet(Options{}, tr)
	f.SetInput("east", input(t, 1, "istio", "a"))
	f.cycle(ctx)
	f.SetStale("east", true)
	f.cycle(ctx)
	calls := tr.calls()
	if c, ok := calls[len(calls)-1].Clusters["east"]; !ok || !c.Stale {
		t.Fatalf("the view after stale has east %+v (present %v), want it marked stale", c, ok)
	}
	if _, ok := f.Mark(OutputKey{"east", "istio"}); !ok {
		t.Error("a stale cluster lost its outputs")
	}
}

func TestRefreshRunsACycleThatSeesTheView(t *testing.T) {
	ready := make(chan Ready)
	f := newFleet(Options{Ready: ready, Debounce: time.Millisecond}, newCounter("istio"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- f.Run(ctx) }()
	defer func() { cancel(); <-done }()
	before := f.Generation()
	f.Refresh()
	if r := <-ready; r.Stats.Generation <= before {
		t.Errorf("the cycle after Refresh is generation %d, want more than %d", r.Stats.Generation, before)
	}
}

func TestScopedEngineComputesOnlyItsTargets(t *testing.T) {
	c := newCounter("istio")
	f := newFleet(Options{Scoped: true}, c)
	ctx := context.Background()
	f.SetInput("a", input(t, 1, "istio", "s1"))
	f.SetInput("b", input(t, 1, "istio", "s1", "s2"))
	f.SetTarget("a", true)
	f.cycle(ctx)
	if _, ok := f.Mark(OutputKey{"a", "istio"}); !ok {
		t.Fatal("no output for target a")
	}
	if _, ok := f.Mark(OutputKey{"b", "istio"}); ok {
		t.Fatal("output for b, which is not a target")
	}
	last := c.calls()[len(c.calls())-1]
	if !last.Scoped || !slices.Equal(last.Targets, []string{"a"}) || len(last.Clusters) != 2 {
		t.Fatalf("view scoped %v targets %v with %d clusters, want scoped to [a] with both clusters' inputs", last.Scoped, last.Targets, len(last.Clusters))
	}

	// b becomes a target: a cycle runs though no input changed.
	f.SetTarget("b", true)
	f.cycle(ctx)
	if last := c.calls()[len(c.calls())-1]; !slices.Equal(last.Targets, []string{"a", "b"}) {
		t.Fatalf("view targets %v, want [a b]", last.Targets)
	}
	if _, ok := f.Mark(OutputKey{"b", "istio"}); !ok {
		t.Fatal("no output for b once it is a target")
	}

	// a stops being a target: its output is dropped, not kept stale.
	f.SetTarget("a", false)
	f.cycle(ctx)
	if _, ok := f.Mark(OutputKey{"a", "istio"}); ok {
		t.Error("a kept its output after it stopped being a target")
	}
	n := len(c.calls())
	f.cycle(ctx)
	if len(c.calls()) != n {
		t.Error("a cycle with nothing changed called the translator")
	}
}

// TestUnwrittenOutputIsHandedOnAgain: an output delivery hands back
// (its agent had left this replica) is handed on again while it is
// current and its cluster a target, though the translator answers
// nothing new; one superseded or of a cluster that stopped being a
// target is not.
func TestUnwrittenOutputIsHandedOnAgain(t *testing.T) {
	ctx := context.Background()
	c := newCounter("istio")
	f := newFleet(Options{Scoped: true, RetryBackoff: time.Millisecond}, c)
	f.SetInput("a", input(t, 1, "istio", "s1"))
	f.SetInput("b", input(t, 1, "istio", "s1"))
	f.SetTarget("a", true)
	f.SetTarget("b", true)
	r := f.Step(ctx)
	if len(r.Outputs) != 2 {
		t.Fatalf("first cycle handed on %d outputs, want 2", len(r.Outputs))
	}
	f.Advance(r.Outputs) // neither written
	f.SetTarget("b", false)

	r = f.Step(ctx)
	var keys []string
	for _, o := range r.Outputs {
		keys = append(keys, o.Key.String())
	}
	if diff := cmp.Diff([]string{"a/istio"}, keys); diff != "" {
		t.Fatalf("handed on again (-want +got):\n%s", diff)
	}
	if r.Outputs[0].Snapshot.Version() != 1 {
		t.Errorf("the output handed on again has version %d, want the same 1", r.Outputs[0].Snapshot.Version())
	}
	f.Advance(nil)
	if r := f.Step(ctx); len(r.Outputs) != 0 {
		t.Errorf("an output written is handed on again: %d outputs", len(r.Outputs))
	}

	// Superseded before the next cycle: only the newer one goes.
	f.SetInput("a", input(t, 2, "istio", "s1", "s2"))
	r = f.Step(ctx)
	f.Advance(r.Outputs)
	f.SetInput("a", input(t, 3, "istio", "s1", "s2", "s3"))
	r = f.Step(ctx)
	if len(r.Outputs) != 1 || r.Outputs[0].Snapshot.Version() != 3 {
		t.Fatalf("after a newer answer handed on %d outputs (want 1, version 3)", len(r.Outputs))
	}
}
