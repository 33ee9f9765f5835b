package ui_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/pluginhost"
	"github.com/meshrelay/meshrelay/core/server"
	"github.com/meshrelay/meshrelay/core/store"
	"github.com/meshrelay/meshrelay/core/store/memory"
	"github.com/meshrelay/meshrelay/core/ui"
	"github.com/meshrelay/meshrelay/internal/bench"
	"github.com/meshrelay/meshrelay/internal/testenv"
	"github.com/meshrelay/meshrelay/internal/testutil"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// coldWait bounds the wait for the UI's first graph and first policy
// description of the bench fleet.
const coldWait = 10 * time.Minute

// Bench fleet's size: the fleet benchmark's 1,000 clusters of 50 services.
// Under the race detector, which makes building and translating it ten
// times slower, the fleet is 240 clusters: the behaviour asserted is the
// same, and the figures logged are those of a run without -race
// (docs/performance.md).
var benchClusters = map[bool]int{false: 1000, true: 240}[raceDetector]

const (
	benchServices = 50
	benchRegions  = 4
)

// scaledNames names the clusters that would be number i of 1,000 in the
// bench fleet's size, so that filters pick the same spread of clusters at
// either size.
func scaledNames(ids ...int) []string {
	out := make([]string, len(ids))
	for k, i := range ids {
		out[k] = bench.ClusterName(i * benchClusters / 1000)
	}
	return out
}

// thousands writes n as the UI does, with a comma every three digits.
func thousands(n int) string {
	if n < 1000 {
		return strconv.Itoa(n)
	}
	return thousands(n/1000) + fmt.Sprintf(",%03d", n%1000)
}

// benchFleet is the server of the benchmark's fleet, with its UI, and the
// clusters' inputs, which a test changes as agents would.
type benchFleet struct {
	env
	store    store.Store
	clusters []*bench.Cluster
}

// edgePolicyYAML admits the clients of bench-00000 and bench-00001 to
// svc-001 in every cluster: 2 × (benchClusters - 1) cross-cluster edges.
const edgePolicyYAML = `apiVersion: policy.meshrelay.io/v1alpha1
kind: AccessPolicy
metadata: {name: svc-001-from-first, namespace: bench}
spec:
  destinationSelectors: [{namespaces: [bench], names: [svc-001]}]
  action: Allow
  from: [{clusters: [bench-00000, bench-00001]}]
`

// startBenchFleet runs a server with the real Istio plugin on a store
// holding the benchmark's clusters (internal/bench), labelled with
// region-(i mod 4), under the benchmark's fleet-wide AccessPolicy and
// edgePolicyYAML, and waits until every cluster has its outputs. No agent
// is connected: every cluster is stale.
func startBenchFleet(t *testing.T, change func(*ui.Options)) benchFleet {
	t.Helper()
	ctx := context.Background()
	start := time.Now()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bins, err := pluginhost.BuildBinaries(ctx, root, t.TempDir(), []string{"istio"})
	if err != nil {
		t.Fatal(err)
	}
	plugins := filepath.Join(t.TempDir(), "plugins")
	logger := slog.New(slog.DiscardHandler)
	if _, err := pluginhost.InstallContext(ctx, plugins, bins["istio"], "", logger); err != nil {
		t.Fatal(err)
	}
	host, err := pluginhost.New(plugins, logger, pluginhost.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { host.Close() })
	if err := host.Start(ctx); err != nil {
		t.Fatal(err)
	}
	var translators []pluginhost.Translator
	for _, p := range host.Plugins() {
		translators = append(translators, p)
	}

	st := memory.New()
	clusters := make([]*bench.Cluster, benchClusters)
	for i := range benchClusters {
		c, err := bench.NewCluster(i, benchServices)
		if err != nil {
			t.Fatal(err)
		}
		clusters[i] = c
		snap, err := c.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.UpdateCluster(ctx, st, c.Name, func(r *store.Cluster, _ bool) error {
			r.Labels = map[string]string{"region": fmt.Sprintf("region-%d", i%benchRegions), "env": []string{"prod", "staging"}[min(i%10, 1)]}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if err := st.PutInput(ctx, c.Name, snap); err != nil {
			t.Fatal(err)
		}
	}
	var docs []snapshot.Resource
	for _, y := range [][]byte{bench.PolicyYAML("p0"), []byte(edgePolicyYAML)} {
		r, err := snapshot.FromYAML(y)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, r)
	}
	policies, err := snapshot.New(1, docs)
	if err != nil {
		t.Fatal(err)
	}
	opts := server.DefaultOptions()
	// No agent connects: the server computes every cluster's outputs.
	opts.SafeStartWindow, opts.Targets = time.Millisecond, server.TargetsAll
	e := startWith(t, server.Deps{Store: st, Translators: translators, Policies: staticPolicies{policies}}, opts, change)
	admin := metadata.NewIncomingContext(ctx, metadata.Pairs("authorization", "Bearer "+e.token))
	// Translating 1,000 clusters takes seconds, minutes under the race
	// detector on a loaded machine.
	testutil.EventuallyWithin(t, 10*time.Minute, "every cluster has its outputs", func() (bool, string) {
		s, err := e.srv.AdminServer().GetStatus(admin, &relayv1.GetStatusRequest{})
		if err != nil {
			return false, err.Error()
		}
		why := fmt.Sprintf("%d policies:", len(s.GetPolicies()))
		ok := len(s.GetPolicies()) == 2
		for _, p := range s.GetPolicies() {
			why += fmt.Sprintf(" %s %s %d/%d", p.GetName(), p.GetState(), p.GetAppliedClusters(), p.GetTargetClusters())
			ok = ok && p.GetTargetClusters() == int32(benchClusters)
		}
		return ok, why
	})
	t.Logf("fleet of %d clusters × %d services ready in %s", benchClusters, benchServices, time.Since(start).Round(time.Millisecond))
	return benchFleet{env: e, store: st, clusters: clusters}
}

// measureScript runs before the UI's own: it records, in milliseconds
// since the navigation started, when the graph's first group and the
// policy page's first cluster row appear, the graph's redraws, and the
// page's long tasks (over 50 ms of script without a frame).
const measureScript = `window.__m = { t: {}, long: [], redraws: 0 };
new PerformanceObserver((l) => { for (const e of l.getEntries()) window.__m.long.push(e.duration); }).observe({ type: "longtask", buffered: true });
new MutationObserver((records) => {
	const m = window.__m;
	if (m.t.graph === undefined && document.querySelector("svg.graph g.group")) m.t.graph = performance.now();
	if (m.t.edges === undefined && document.querySelector("svg.graph g.edge")) m.t.edges = performance.now();
	if (m.t.policy === undefined && document.querySelector("#policy-clusters tr[data-cluster]")) m.t.policy = performance.now();
	for (const r of records) if (r.target.classList?.contains("graph-wrap")) m.redraws++;
}).observe(document, { childList: true, subtree: true });`

// measured opens a tab that runs measureScript on every page it loads.
func measured(t *testing.T, b context.Context, token string) context.Context {
	t.Helper()
	ctx := tab(t, b)
	do(t, ctx, "install the measurements", bearer(token), chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: measureScript})
		return err
	}))
	return ctx
}

// interactions is what the page measured while live updates arrived.
type interactions struct {
	// Latencies are, per filter typed, the milliseconds until the page
	// showed its answer.
	Latencies []float64 `json:"latencies"`
	// MaxFrameGap is the longest time without a frame, in milliseconds.
	MaxFrameGap float64 `json:"maxFrameGap"`
	Frames      int     `json:"frames"`
	Seconds     float64 `json:"seconds"`
	Redraws     int     `json:"redraws"`
	LongTasks   int     `json:"longTasks"`
	LongestTask float64 `json:"longestTask"`
}

func (m interactions) String() string {
	s := slices.Clone(m.Latencies)
	slices.Sort(s)
	return fmt.Sprintf("filter answered in median %.0f ms, max %.0f ms (%d filters); %d frames in %.1f s, longest gap %.0f ms; %d graph redraws; %d long tasks, longest %.0f ms",
		s[len(s)/2], s[len(s)-1], len(s), m.Frames, m.Seconds, m.MaxFrameGap, m.Redraws, m.LongTasks, m.LongestTask)
}

// interact types each filter into input and waits, frame by frame, until
// done(filter) is true, then clears it and waits until cleared() is; it
// measures the latencies and the frames meanwhile.
func interact(t *testing.T, ctx context.Context, input string, filters []string, done, cleared string) interactions {
	t.Helper()
	names, _ := jsonString(filters)
	return get(t, ctx, "interact with "+input, chromedp.Evaluate[interactions](`(async () => {
		const m = window.__m; m.long = []; const r0 = m.redraws;
		let last = performance.now(), maxGap = 0, frames = 0, running = true;
		const tick = (t) => { maxGap = Math.max(maxGap, t - last); last = t; frames++; if (running) requestAnimationFrame(tick); };
		requestAnimationFrame(tick);
		const until = (cond) => new Promise((res) => { const c = () => (cond() ? res() : requestAnimationFrame(c)); c(); });
		const input = document.querySelector(`+strconv.Quote(input)+`);
		const set = (v) => { input.value = v; input.dispatchEvent(new Event("input", { bubbles: true })); };
		const lat = [];
		const t0all = performance.now();
		for (const f of `+names+`) {
			const t0 = performance.now();
			set(f);
			await until(() => (`+done+`)(f));
			lat.push(performance.now() - t0);
			set("");
			await until(() => `+cleared+`);
			await new Promise((r) => setTimeout(r, 400));
		}
		running = false;
		return { latencies: lat, maxFrameGap: maxGap, frames, seconds: (performance.now() - t0all) / 1000, redraws: m.redraws - r0, longTasks: m.long.length, longestTask: Math.max(0, ...m.long) };
	})()`, chromedp.EvalAwaitPromise))
}

func jsonString(ss []string) (string, error) {
	out := "["
	for i, s := range ss {
		if i > 0 {
			out += ","
		}
		out += strconv.Quote(s)
	}
	return out + "]", nil
}

// fetches says when the page's calls to the UI's API started and ended
// and when their first byte came, in milliseconds since the navigation
// started: what the server took and what the browser did after.
func fetches(t *testing.T, ctx context.Context) string {
	t.Helper()
	return get(t, ctx, "resource timings", chromedp.Evaluate[string](`performance.getEntriesByType("resource").filter((e) => e.name.includes("/api/")).map((e) => `+"`"+`${new URL(e.name).pathname.replace(/^\/api\//, "")} ${e.startTime.toFixed(0)}–${e.responseStart.toFixed(0)}–${e.responseEnd.toFixed(0)}`+"`"+`).join(", ")`))
}

// fetchTiming is when the page started an API call and when its answer
// began, in milliseconds since the navigation started.
type fetchTiming struct {
	Start    float64 `json:"start"`
	Answered float64 `json:"answered"`
}

func (f *fetchTiming) String() string {
	if f == nil {
		return "never"
	}
	return fmt.Sprintf("%.0f–%.0f ms", f.Start, f.Answered)
}

// firstFetches returns the timing of the first call of each API path the
// page made, by path.
func firstFetches(t *testing.T, ctx context.Context) map[string]*fetchTiming {
	t.Helper()
	return get(t, ctx, "resource timings", chromedp.Evaluate[map[string]*fetchTiming](`(() => {
		const out = {};
		for (const e of performance.getEntriesByType("resource")) {
			const path = new URL(e.name).pathname;
			if (path.startsWith("/api/") && !(path in out)) out[path] = { start: e.startTime, answered: e.responseStart };
		}
		return out;
	})()`))
}

// apiTime logs how long a UI API call takes and how much it answers.
func apiTime(t *testing.T, e env, path string) {
	t.Helper()
	start := time.Now()
	resp, body := request(t, http.DefaultClient, "GET", e.ui.URL()+path, "Bearer "+e.token, "", "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /%s = %d %s", path, resp.StatusCode, body)
	}
	t.Logf("GET /%s: %s, %d KiB", path, time.Since(start).Round(time.Millisecond), len(body)>>10)
}

// The graph and policy pages of the benchmark's fleet, 1,000 clusters of
// 50 services, in Chromium: the graph shows a collapsed node per region
// with its counts, expands one region (its first clusters, naturally
// ordered, nothing past the window's edge), and filters to one cluster;
// the policy page draws its first clusters and outputs and filters them.
// Live updates arrive throughout: ten input changes a second, as the
// benchmark's churn, and status events every 250 ms. The test logs how
// long each page takes to draw, cold (the UI's first graph and
// description) and again (from sharedCache), and to answer a filter; it
// asserts none of the times.
func TestLargeFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a fleet of 1,000 clusters")
	}
	b := browser(t)
	f := startBenchFleet(t, func(o *ui.Options) { o.Poll = 250 * time.Millisecond })
	e := f.env
	admin := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+e.token))
	start := time.Now()
	desc, err := e.srv.AdminServer().DescribePolicy(admin, &relayv1.DescribeRequest{Kind: "AccessPolicy", Namespace: bench.Namespace, Name: "bench-access"})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("DescribePolicy(bench-access) in process: %s, %d outputs, %d KiB", time.Since(start).Round(time.Millisecond), len(desc.GetOutputs()), proto.Size(desc)>>10)
	// A List never waits for the fleet's discovery objects to be derived:
	// it answers the last ones derived, or Unavailable before the first.
	start = time.Now()
	dests, err := e.srv.AdminServer().List(admin, &relayv1.ListRequest{Kind: "destinations"})
	t.Logf("List(destinations) in process: %s, %d destinations, error %v", time.Since(start).Round(time.Millisecond), len(dests.GetDestinations()), err)
	testutil.EventuallyWithin(t, 10*time.Minute, "every destination listed", func() (bool, string) {
		dests, err := e.srv.AdminServer().List(admin, &relayv1.ListRequest{Kind: "destinations"})
		return err == nil && len(dests.GetDestinations()) == benchClusters*benchServices, fmt.Sprintf("%d destinations, error %v", len(dests.GetDestinations()), err)
	})
	t.Logf("every destination listed %s after the fleet was ready", time.Since(start).Round(time.Millisecond))

	// Live updates: the inputs of one cluster after another change.
	var changed atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			snap, err := f.clusters[i*37%benchClusters].Change(i%benchServices, fmt.Sprintf("live%d", i))
			if err == nil && f.store.PutInput(context.Background(), f.clusters[i*37%benchClusters].Name, snap) == nil {
				changed.Add(1)
			}
		}
	}()
	t.Cleanup(func() {
		close(stop)
		<-done
	})

	t.Run("graph", func(t *testing.T) {
		ctx := measured(t, b, e.token)
		// The UI's first graph takes the admin API seconds, minutes under
		// the race detector.
		getWithin(t, ctx, coldWait, "load the fleet graph", chromedp.Steps(chromedp.Navigate(e.ui.URL()),
			waitJSWithin(coldWait, `document.querySelectorAll("svg.graph g.group").length == 4 && document.querySelectorAll("svg.graph g.edge").length > 0`)))
		load := get(t, ctx, "load time", chromedp.Evaluate[[]float64](`[window.__m.t.graph, window.__m.t.edges]`))
		t.Logf("graph of %d clusters, cold: groups drawn %.0f ms, destinations and edges %.0f ms after the navigation started; calls started–answered–received: %s", benchClusters, load[0], load[1], fetches(t, ctx))
		warm := measured(t, b, e.token)
		do(t, warm, "load the fleet graph again", chromedp.Navigate(e.ui.URL()),
			waitJS(`document.querySelectorAll("svg.graph g.group").length == 4 && document.querySelectorAll("svg.graph g.edge").length > 0`))
		load = get(t, warm, "load time", chromedp.Evaluate[[]float64](`[window.__m.t.graph, window.__m.t.edges]`))
		t.Logf("graph of %d clusters, again: groups drawn %.0f ms, destinations and edges %.0f ms after the navigation started; calls started–answered–received: %s", benchClusters, load[0], load[1], fetches(t, warm))
		screenshot(t, ctx, "fleet-1000")
		for r := range benchRegions {
			sel := fmt.Sprintf(`g.group[data-group="region-%d"]`, r)
			if got := attr(t, ctx, sel, "data-clusters"); got != strconv.Itoa(benchClusters/benchRegions) {
				t.Errorf("%s holds %s clusters, want %d", sel, got, benchClusters/benchRegions)
			}
			if got := attr(t, ctx, sel, "data-destinations"); got != strconv.Itoa(benchClusters/benchRegions*benchServices) {
				t.Errorf("%s holds %s destinations, want %d", sel, got, benchClusters/benchRegions*benchServices)
			}
			if got := attr(t, ctx, sel, "data-stale"); got != strconv.Itoa(benchClusters/benchRegions) {
				t.Errorf("%s has %s stale clusters, want all %d", sel, got, benchClusters/benchRegions)
			}
		}
		// bench-00000 (region-0) and bench-00001 (region-1) reach svc-001
		// everywhere: from each, one edge per other region.
		if got := attr(t, ctx, `g.edge[data-edge="group:region-0>group:region-2"]`, "data-count"); got != strconv.Itoa(benchClusters/benchRegions) {
			t.Errorf("the edge from region-0 to region-2 stands for %s edges, want %d", got, benchClusters/benchRegions)
		}

		do(t, ctx, "expand region-1", clickLive(`g.group[data-group="region-1"] rect`),
			waitJS(`document.querySelector('g.group[data-group="region-1"]')?.dataset.expanded == "true"`))
		got := drawn(t, ctx, `g.group[data-group="region-1"]`)
		var want []string
		for i := 1; len(want) < len(got); i += benchRegions {
			want = append(want, bench.ClusterName(i))
		}
		if len(got) == 0 || len(got) >= benchClusters/benchRegions || !slices.Equal(got, want) {
			t.Errorf("region-1 expanded draws %q, want its first clusters in order", got)
		}
		if n := get(t, ctx, "more clusters", chromedp.Evaluate[int](`document.querySelectorAll('g.group[data-group="region-1"] .more-clusters').length`)); n != 1 {
			t.Errorf("region-1 does not say it has more clusters than it draws")
		}
		if off := offscreen(t, ctx); len(off) > 0 {
			t.Errorf("nodes past the window: %q", off)
		}
		screenshot(t, ctx, "fleet-1000-region-1")
		do(t, ctx, "collapse region-1", clickLive(`g.group[data-group="region-1"] .group-head`),
			waitJS(`document.querySelectorAll("g.cluster").length == 0`))

		m := interact(t, ctx, "#filter-cluster", scaledNames(42, 500, 999, 7, 333, 640, 128, 871),
			`(f) => { const cs = document.querySelectorAll("g.cluster"); return cs.length === 1 && cs[0].dataset.cluster === f; }`,
			`document.querySelectorAll("g.cluster").length === 0 && document.querySelectorAll("g.group").length === 4`)
		t.Logf("graph under live updates: %s", m)
		if m.Redraws == 0 {
			t.Errorf("no live update redrew the graph while %d inputs changed", changed.Load())
		}
	})

	t.Run("policy", func(t *testing.T) {
		ctx := measured(t, b, e.token)
		getWithin(t, ctx, coldWait, "load the policy page", chromedp.Steps(chromedp.Navigate(e.ui.URL()+"#/policies/AccessPolicy/bench/bench-access"),
			waitJSWithin(coldWait, `document.querySelectorAll("#policy-clusters tr[data-cluster]").length > 0`)))
		load := get(t, ctx, "load time", chromedp.Evaluate[float64](`window.__m.t.policy`))
		t.Logf("policy page of %d clusters, cold: drawn %.0f ms after the navigation started; calls started–answered–received: %s", benchClusters, load, fetches(t, ctx))
		// The page asks for the policy beside the status, not after it. A
		// call's timing is recorded once its answer ends, and the page may
		// draw before the status's answer has: wait for it.
		do(t, ctx, "wait for the status's answer", waitJS(`performance.getEntriesByType("resource").some((e) => new URL(e.name).pathname == "/api/status")`))
		first := firstFetches(t, ctx)
		asked, st := first["/api/policies/AccessPolicy/bench/bench-access"], first["/api/status"]
		if asked == nil || st == nil || asked.Start > st.Answered {
			t.Errorf("the policy page's first description was asked for at %v, the status answered at %v: want it asked before", asked, st)
		}
		warm := measured(t, b, e.token)
		do(t, warm, "load the policy page again", chromedp.Navigate(e.ui.URL()+"#/policies/AccessPolicy/bench/bench-access"),
			waitJS(`document.querySelectorAll("#policy-clusters tr[data-cluster]").length > 0`))
		load = get(t, warm, "load time", chromedp.Evaluate[float64](`window.__m.t.policy`))
		t.Logf("policy page of %d clusters, again: drawn %.0f ms after the navigation started; calls started–answered–received: %s", benchClusters, load, fetches(t, warm))
		rows := stringsOf(t, ctx, "cluster rows", `[...document.querySelectorAll("#policy-clusters tr[data-cluster]")].map(r => r.dataset.cluster)`)
		if len(rows) != 100 || rows[0] != bench.ClusterName(0) || rows[99] != bench.ClusterName(99) {
			t.Errorf("the policy page draws the clusters %q, want the first 100 in order", rows)
		}
		// Read at once: a live update may redraw the counts between finding
		// the node and reading it.
		if got := get(t, ctx, "policy counts", chromedp.Evaluate[string](`document.querySelector("#policy-counts")?.innerText ?? ""`)); got != "0 applied · "+thousands(benchClusters)+" pending · 0 failed" {
			t.Errorf("the policy page counts %q", got)
		}
		if n := get(t, ctx, "outputs drawn", chromedp.Evaluate[int](`document.querySelectorAll("table.outputs tr[data-output]").length`)); n != min(100, len(desc.GetOutputs())) {
			t.Errorf("the policy page draws %d outputs, want the first %d of %d", n, min(100, len(desc.GetOutputs())), len(desc.GetOutputs()))
		}
		do(t, ctx, "show more", clickLive(`[data-more="clusters"] button`), waitJS(`document.querySelectorAll("#policy-clusters tr[data-cluster]").length == 200`))
		screenshot(t, ctx, "policy-1000")
		one := scaledNames(777)[0]
		do(t, ctx, "filter the outputs", setInput("#policy-filter", one),
			waitJS(`[...document.querySelectorAll("table.outputs tr[data-output]")].every(r => r.dataset.output.startsWith(`+strconv.Quote(one+"/")+`)) && document.querySelectorAll("table.outputs tr[data-output]").length > 0`),
			setInput("#policy-filter", ""))
		m := interact(t, ctx, "#policy-filter", scaledNames(42, 500, 999, 7, 333, 640),
			`(f) => { const rs = document.querySelectorAll("#policy-clusters tr[data-cluster]"); return rs.length === 1 && rs[0].dataset.cluster === f; }`,
			`document.querySelectorAll("#policy-clusters tr[data-cluster]").length >= 100`)
		t.Logf("policy page under live updates: %s", m)
	})
	t.Logf("%d inputs changed during the test", changed.Load())
	for _, path := range []string{"api/status", "api/graph", "api/policies/AccessPolicy/bench/bench-access"} {
		apiTime(t, e, path)
	}
}
