package ui_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/pluginhost"
	"github.com/meshrelay/meshrelay/core/server"
	"github.com/meshrelay/meshrelay/core/store"
	"github.com/meshrelay/meshrelay/core/store/memory"
	"github.com/meshrelay/meshrelay/internal/adminclient"
	"github.com/meshrelay/meshrelay/internal/demo"
	"github.com/meshrelay/meshrelay/internal/testenv"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"google.golang.org/grpc/metadata"
)

// ArtifactsEnv names the directory where the browser tests save their
// screenshots; the test's temporary directory when unset.
const ArtifactsEnv = "MESHRELAY_UI_ARTIFACTS"

// fleet is the demo fleet running with its UI for the browser tests.
type fleet struct {
	ui, token, policies string
	// admin calls the demo server's admin API.
	admin *adminclient.Client
	// traffic holds each agent's traffic receiver address, by cluster.
	traffic map[string]string
	// store is the demo server's store.
	store store.Store
}

// startFleet runs the demo with the real plugin binaries and keeps it
// serving until the test ends.
func startFleet(t *testing.T) fleet {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	if _, err := pluginhost.BuildBinaries(context.Background(), root, bin, demo.Plugins); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "demo")
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan *demo.Report, 1)
	done := make(chan error, 1)
	go func() {
		_, err := demo.Run(ctx, demo.Options{
			Root: root, Out: out, PluginDir: bin, Serve: true,
			Ready: func(r *demo.Report) { served <- r },
		})
		done <- err
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("demo: %v", err)
		}
	})
	var report *demo.Report
	select {
	case report = <-served:
	case err := <-done:
		t.Fatalf("demo ended before serving: %v", err)
	}
	tok, err := os.ReadFile(filepath.Join(out, "server", "admin-token"))
	if err != nil {
		t.Fatal(err)
	}
	admin, err := adminclient.Dial(adminclient.Options{Addr: report.ServerAddr, CAFile: report.CABundlePath, TokenFile: report.AdminTokenPath})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	return fleet{ui: report.UI, token: strings.TrimSpace(string(tok)), policies: filepath.Join(out, "policies"), admin: admin, traffic: report.Traffic, store: report.Store}
}

// browser starts headless Chromium and returns a context for its first tab.
//
// Chromium on a loaded machine now and then dies as it starts, before it
// serves DevTools (its crash handler starts instead): such a start is
// tried again, up to three times in all.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(testenv.Chromium(t)),
		chromedp.NoSandbox,
		chromedp.WindowSize(1400, 1000),
	)
	var err error
	for range 3 {
		alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
		ctx, cancel := chromedp.NewContext(alloc)
		if err = chromedp.Do(ctx); err == nil {
			t.Cleanup(cancelAlloc)
			t.Cleanup(cancel)
			return ctx
		}
		cancel()
		cancelAlloc()
		t.Logf("start chromium: %v; trying again", err)
	}
	t.Fatalf("start chromium: %v", err)
	return nil
}

// tab opens a new tab of the browser of ctx.
func tab(t *testing.T, ctx context.Context) context.Context {
	t.Helper()
	tctx, cancel := chromedp.NewContext(ctx)
	t.Cleanup(cancel)
	// The first run opens the tab for the context's life: never under a
	// deadline, which would close it.
	if err := chromedp.Do(tctx); err != nil {
		t.Fatalf("open tab: %v", err)
	}
	return tctx
}

// do runs browser actions with a deadline; a failure saves a screenshot.
func do(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	get(t, ctx, what, chromedp.Steps(steps...))
}

// get runs a browser action with a deadline and returns its value.
func get[T any](t *testing.T, ctx context.Context, what string, action chromedp.Action[T]) T {
	t.Helper()
	return getWithin(t, ctx, time.Minute, what, action)
}

// getWithin is get with its own deadline.
func getWithin[T any](t *testing.T, ctx context.Context, timeout time.Duration, what string, action chromedp.Action[T]) T {
	t.Helper()
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	v, err := chromedp.Run(actx, action)
	if err != nil {
		screenshot(t, ctx, "failed-"+strings.ReplaceAll(what, " ", "-"))
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// clusterColour returns the colour of a cluster's outline in the graph.
func clusterColour(t *testing.T, ctx context.Context, cluster string) string {
	t.Helper()
	return get(t, ctx, "colour of "+cluster, chromedp.Evaluate[string](
		`getComputedStyle(document.querySelector('g.cluster[data-cluster="`+cluster+`"] rect')).stroke`))
}

// bearer makes the tab send "Authorization: Bearer TOKEN" with every
// request, as an authenticating proxy in front of the UI would.
func bearer(token string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{
			Headers: network.Headers{"Authorization": "Bearer " + token},
		})
		return err
	})
}

// waitJS waits until a JavaScript expression is true.
func waitJS(expr string) chromedp.Action[chromedp.Void] {
	return waitJSWithin(time.Minute, expr)
}

// waitJSWithin waits until a JavaScript expression is true, for at most
// timeout.
func waitJSWithin(timeout time.Duration, expr string) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(timeout))
}

// clickLive clicks the element sel selects once it exists, finding and
// clicking it in one step in the page: the live view redraws as the fleet
// changes, and a node found in one step may be gone by the next.
func clickLive(sel string) chromedp.Action[chromedp.Void] {
	return waitJS(`(() => {
		const e = document.querySelector(` + strconv.Quote(sel) + `);
		if (!e) return false;
		if (e.click) e.click(); else e.dispatchEvent(new MouseEvent("click", {bubbles: true, cancelable: true, view: window}));
		return true;
	})()`)
}

// attr returns an element's attribute.
//
// Live updates redraw pages, replacing their elements: the element is
// waited for, then read in one step of the page's script, from whichever
// element matches then, not from a node the redraw may have removed.
func attr(t *testing.T, ctx context.Context, sel, name string) string {
	t.Helper()
	do(t, ctx, "wait for "+sel, chromedp.WaitReady(chromedp.CSS(sel)))
	return get(t, ctx, "read "+name+" of "+sel, chromedp.Evaluate[string](`document.querySelector(`+strconv.Quote(sel)+`).getAttribute(`+strconv.Quote(name)+`) ?? ""`))
}

// text returns an element's visible text, read as attr reads.
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	do(t, ctx, "wait for "+sel, chromedp.WaitVisible(chromedp.CSS(sel)))
	return get(t, ctx, "read the text of "+sel, chromedp.Evaluate[string](`document.querySelector(`+strconv.Quote(sel)+`).innerText`))
}

// screenshot saves the tab's page as NAME.png among the artifacts.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv(ArtifactsEnv)
	if dir == "" {
		dir = t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(sctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Errorf("screenshot %s: %v", name, err)
		return
	}
	path := filepath.Join(dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

// The UI against the demo fleet in a real Chromium: a wrong token gets the
// login page and no data, the right one the fleet graph with its three
// clusters and cross-cluster edges; a policy edit shows up live; a
// destination's page and a cluster's outputs open.
func TestBrowser(t *testing.T) {
	f := startFleet(t)
	b := browser(t)

	t.Run("wrong token", func(t *testing.T) {
		refusedAPI(t, f, "Bearer wrong-token")
		refusedAPI(t, f, "")
		ctx := tab(t, b)
		do(t, ctx, "send a wrong bearer header", bearer("wrong-token"))
		do(t, ctx, "load with a wrong bearer header", chromedp.Navigate(f.ui), chromedp.WaitVisible(chromedp.CSS("form#login")))
		body := text(t, ctx, "body")
		screenshot(t, ctx, "wrong-token")
		for _, secret := range []string{"east", "west", "central", "reviews", "bookinfo"} {
			if strings.Contains(body, secret) {
				t.Errorf("the login page shows %q to a wrong token:\n%s", secret, body)
			}
		}
		ctx = tab(t, b)
		do(t, ctx, "log in with a wrong token",
			chromedp.Navigate(f.ui),
			chromedp.WaitVisible(chromedp.CSS("form#login")),
			chromedp.SendKeys(chromedp.CSS("#token"), "wrong-token"),
			chromedp.Click(chromedp.CSS("form#login button")),
			waitJS(`document.querySelector("#login-error").textContent.length > 0`),
		)
		if msg := text(t, ctx, "#login-error"); !strings.Contains(msg, "admin token") {
			t.Errorf("login with a wrong token says %q, want the admin API's refusal", msg)
		}
	})

	ctx := tab(t, b)
	t.Run("graph", func(t *testing.T) {
		do(t, ctx, "log in",
			chromedp.Navigate(f.ui),
			chromedp.WaitVisible(chromedp.CSS("form#login")),
			chromedp.SendKeys(chromedp.CSS("#token"), f.token),
			chromedp.Click(chromedp.CSS("form#login button")),
			chromedp.WaitVisible(chromedp.CSS("svg.graph")),
			waitJS(`document.querySelector("#live").textContent == "live"`),
		)
		for _, c := range []string{"east", "west", "central", "north"} {
			if state := attr(t, ctx, fmt.Sprintf(`g.cluster[data-cluster=%q]`, c), "data-state"); state != "connected" {
				t.Errorf("cluster %s is drawn %q, want connected", c, state)
			}
			if colour := clusterColour(t, ctx, c); colour != "rgb(46, 157, 91)" {
				t.Errorf("connected cluster %s is drawn %s", c, colour)
			}
		}
		// reviews-global sends east's and west's clients to reviews in
		// both; reviews-from-productpage admits each one's productpage to
		// the other's reviews.
		for _, e := range []string{
			`g.edge[data-kind="VirtualDestination"][data-edge="east>west"][data-policy="VirtualDestination/bookinfo/reviews-global"]`,
			`g.edge[data-kind="VirtualDestination"][data-edge="west>east"][data-policy="VirtualDestination/bookinfo/reviews-global"]`,
			`g.edge[data-kind="AccessPolicy"][data-edge="east>west"][data-policy="AccessPolicy/bookinfo/reviews-from-productpage"]`,
			`g.edge[data-kind="AccessPolicy"][data-edge="west>east"][data-policy="AccessPolicy/bookinfo/reviews-from-productpage"]`,
		} {
			do(t, ctx, "edge "+e, chromedp.WaitVisible(chromedp.CSS(e)))
		}
		if n := get(t, ctx, "count edges", chromedp.Evaluate[int](`document.querySelectorAll("g.edge").length`)); n != 4 {
			t.Errorf("the graph has %d cross-cluster edges, want 4", n)
		}
		screenshot(t, ctx, "fleet")
	})

	t.Run("destination and outputs", func(t *testing.T) {
		do(t, ctx, "open reviews from the graph",
			clickLive(`g.destination[data-destination="west/bookinfo/reviews"]`),
			chromedp.WaitVisible(chromedp.CSS(`#destination[data-destination="bookinfo/reviews"]`)),
		)
		for _, sel := range []string{
			`#services tr[data-cluster="east"]`, `#services tr[data-cluster="west"]`,
			`#destination tr[data-policy="VirtualDestination/bookinfo/reviews-global"]`,
			`#destination tr[data-policy="TrafficPolicy/bookinfo/reviews-split"]`,
			`#destination tr[data-output^="east/istio/VirtualService/"]`,
		} {
			do(t, ctx, "destination shows "+sel, chromedp.WaitVisible(chromedp.CSS(sel)))
		}
		screenshot(t, ctx, "destination")
		do(t, ctx, "open east's page",
			clickLive(`#services tr[data-cluster="east"] a`),
			chromedp.WaitVisible(chromedp.CSS(`#cluster[data-cluster="east"]`)),
		)
		if l := text(t, ctx, "#labels"); l != "-" {
			t.Errorf("east, unlabelled, shows labels %q", l)
		}
		if _, err := f.admin.LabelCluster(f.admin.Context(context.Background()), &relayv1.LabelClusterRequest{
			Cluster: "east", Set: map[string]string{"region": "eu-west", "env": "prod"},
		}); err != nil {
			t.Fatalf("LabelCluster: %v", err)
		}
		do(t, ctx, "east's labels show without a reload",
			chromedp.WaitVisible(chromedp.CSS(`#labels .label[data-label="region"]`)),
		)
		if l := text(t, ctx, "#labels"); l != "env=prodregion=eu-west" {
			t.Errorf("east's labels show as %q, want env=prod then region=eu-west", l)
		}
		screenshot(t, ctx, "cluster")
		do(t, ctx, "open east's istio outputs",
			clickLive(`#outputs tr[data-backend="istio"] a`),
			chromedp.WaitVisible(chromedp.CSS(`#output[data-cluster="east"][data-backend="istio"] pre`)),
		)
		yaml := text(t, ctx, "#output pre")
		for _, want := range []string{"kind: VirtualService", "kind: ServiceEntry", "reviews.global", "TrafficPolicy/bookinfo/reviews-split"} {
			if !strings.Contains(yaml, want) {
				t.Errorf("east's istio outputs lack %q:\n%s", want, yaml)
			}
		}
		screenshot(t, ctx, "outputs")
		do(t, ctx, "back to the fleet", clickLive(`#nav a[href="#/"]`), chromedp.WaitVisible(chromedp.CSS("#policies")))
	})

	t.Run("live policy status", func(t *testing.T) {
		const row = `tr[data-policy="TrafficPolicy/bookinfo/reviews-split"]`
		do(t, ctx, "mark the page", chromedp.Evaluate[chromedp.Void](`window.notReloaded = true`))
		if before := attr(t, ctx, row, "data-state"); before != "Accepted" {
			t.Fatalf("reviews-split is %q before the edit, want Accepted", before)
		}
		editPolicy(t, filepath.Join(f.policies, "reviews-traffic.yaml"), "weight: 80", "weight: 70")
		do(t, ctx, "the edit shows without a reload",
			waitJS(`document.querySelector('`+row+`').dataset.state == "Invalid"`),
			waitJS(`window.notReloaded === true`),
		)
		if notes := text(t, ctx, row); !strings.Contains(notes, "weights must sum to 100") {
			t.Errorf("the Invalid policy's row does not say why: %q", notes)
		}
		screenshot(t, ctx, "policy-invalid")
	})
}

// The graph colours clusters by state, live. After a cold start every
// registered cluster is in safe mode, until its agent reports or the
// safe-start window ends; then a cluster with an input from before is
// stale, one without disconnected, and a deregistered one revoked.
func TestClusterStates(t *testing.T) {
	b := browser(t)

	waiting := coldStart(t, b, 0)
	for _, c := range []string{"east", "west"} {
		if state := attr(t, waiting.tab, fmt.Sprintf(`g.cluster[data-cluster=%q]`, c), "data-state"); state != "safe-mode" {
			t.Errorf("cluster %s during safe mode is drawn %q", c, state)
		}
	}
	if c := clusterColour(t, waiting.tab, "east"); c != "rgb(107, 79, 216)" {
		t.Errorf("a cluster in safe mode is drawn %s", c)
	}
	screenshot(t, waiting.tab, "safe-mode")

	ended := coldStart(t, b, time.Millisecond)
	do(t, ended.tab, "east turns stale and west disconnected when safe mode ends",
		waitJS(`document.querySelector('g.cluster[data-cluster="east"]').dataset.state == "stale"`),
		waitJS(`document.querySelector('g.cluster[data-cluster="west"]').dataset.state == "disconnected"`),
	)
	if c := clusterColour(t, ended.tab, "east"); c != "rgb(217, 142, 4)" {
		t.Errorf("a stale cluster is drawn %s", c)
	}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+ended.token))
	if _, err := ended.srv.AdminServer().DeregisterCluster(ctx, &relayv1.DeregisterClusterRequest{Cluster: "east"}); err != nil {
		t.Fatal(err)
	}
	do(t, ended.tab, "east turns revoked", waitJS(`document.querySelector('g.cluster[data-cluster="east"]').dataset.state == "revoked"`))
	screenshot(t, ended.tab, "states")
}

// coldStarted is a server started on a store holding two registered
// clusters, east with an input, and a browser tab showing its UI.
type coldStarted struct {
	env
	tab context.Context
}

// coldStart starts a server with the safe-start window (0: wait for every
// cluster) on such a store and opens its UI with the admin token.
func coldStart(t *testing.T, b context.Context, window time.Duration) coldStarted {
	t.Helper()
	st := memory.New()
	ctx := context.Background()
	for _, c := range []string{"east", "west"} {
		if _, err := store.UpdateCluster(ctx, st, c, func(*store.Cluster, bool) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	in, err := snapshot.New(1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.PutInput(ctx, "east", in); err != nil {
		t.Fatal(err)
	}
	opts := server.DefaultOptions()
	opts.SafeStartWindow, opts.Heartbeat = window, 100*time.Millisecond
	e := startOn(t, st, opts, nil)
	tb := tab(t, b)
	do(t, tb, "load with the admin token", bearer(e.token), chromedp.Navigate(e.ui.URL()), chromedp.WaitVisible(chromedp.CSS(`g.cluster[data-cluster="west"]`)))
	return coldStarted{env: e, tab: tb}
}

// refusedAPI checks that every JSON endpoint, or those of paths, refuses
// an authorization header ("" for none) with 401 and no fleet data.
func refusedAPI(t *testing.T, f fleet, auth string, paths ...string) {
	t.Helper()
	if len(paths) == 0 {
		paths = []string{
			"api/status", "api/graph", "api/events", "api/list/clusters", "api/list/outputs", "api/clusters/east",
			"api/clusters/east/outputs/istio", "api/destinations/bookinfo/reviews", "api/policies/TrafficPolicy/bookinfo/reviews-split",
		}
	}
	for _, path := range paths {
		req, err := http.NewRequest(http.MethodGet, f.ui+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || strings.Contains(string(body), "reviews") {
			t.Errorf("GET /%s with %q = %d %s, want 401 without data", path, auth, resp.StatusCode, body)
		}
	}
}

func editPolicy(t *testing.T, path, old, new string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), old) {
		t.Fatalf("%s has no %q", path, old)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strings.Replace(string(data), old, new, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// Services of the graph tests' clusters besides reviewsService.
const (
	ratingsService = `{apiVersion: v1, kind: Service, metadata: {name: ratings, namespace: bookinfo}, spec: {ports: [{name: http, port: 9080}]}}`
	cartService    = `{apiVersion: v1, kind: Service, metadata: {name: cart, namespace: shop}, spec: {ports: [{name: http, port: 8080}]}}`
)

// offscreen returns the graph's nodes (groups, clusters, destinations)
// whose boxes reach past the left or right edge of the window, once the
// graph is laid out to the width it has.
func offscreen(t *testing.T, ctx context.Context) []string {
	t.Helper()
	do(t, ctx, "the graph is laid out to its width", waitJS(`(() => {
		const w = document.querySelector(".graph-wrap"), s = w?.querySelector("svg.graph");
		return !!s && Math.abs(s.width.baseVal.value - w.clientWidth) < 1;
	})()`))
	return get(t, ctx, "nodes past the window's edges", chromedp.Evaluate[[]string](`(() => {
		const w = document.documentElement.clientWidth;
		const out = [];
		for (const n of document.querySelectorAll("svg.graph g.group, svg.graph g.cluster, svg.graph g.destination")) {
			const r = n.getBoundingClientRect();
			if (r.left < 0 || r.right > w) out.push((n.dataset.group ?? n.dataset.cluster ?? n.dataset.destination) + " " + Math.round(r.left) + ".." + Math.round(r.right) + " of " + w);
		}
		return out;
	})()`))
}

// strings returns a JavaScript expression's array of strings.
func stringsOf(t *testing.T, ctx context.Context, what, expr string) []string {
	t.Helper()
	return get(t, ctx, what, chromedp.Evaluate[[]string](expr))
}

// drawn returns the clusters drawn, in the order they are drawn.
func drawn(t *testing.T, ctx context.Context, within string) []string {
	t.Helper()
	return stringsOf(t, ctx, "clusters drawn", `[...document.querySelectorAll(`+strconv.Quote(within+" g.cluster")+`)].map(g => g.dataset.cluster)`)
}

// setInput sets an input's or a select's value as the reader would.
func setInput(sel, value string) chromedp.Action[chromedp.Void] {
	return chromedp.Evaluate[chromedp.Void](`(() => {
		const e = document.querySelector(` + strconv.Quote(sel) + `);
		e.value = ` + strconv.Quote(value) + `;
		e.dispatchEvent(new Event(e.tagName === "SELECT" ? "change" : "input", {bubbles: true}));
	})()`)
}

// naturally sorts cluster names cN by N, as the graph orders them.
func naturally(names []string) []string {
	out := slices.Clone(names)
	slices.SortFunc(out, func(a, b string) int {
		x, _ := strconv.Atoi(strings.TrimPrefix(a, "c"))
		y, _ := strconv.Atoi(strings.TrimPrefix(b, "c"))
		return x - y
	})
	return out
}

// The graph of 30 clusters labelled by region: a collapsed node per
// region with its clusters' counts and states, the policy's edges between
// the groups, expanding and collapsing on click, natural order (c2 before
// c10), no node past the window's right edge, and the filters by
// cluster, namespace and destination.
func TestGraphGroups(t *testing.T) {
	st := memory.New()
	ctx := context.Background()
	const n = 30
	type counts struct{ clusters, destinations, down, edges int }
	want := map[string]*counts{}
	members := map[string][]string{}
	var shop []string
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("c%d", i)
		group := []string{"eu", "us", "ap"}[i%3]
		if i == n {
			group = "-" // no region label
		}
		if _, err := store.UpdateCluster(ctx, st, name, func(c *store.Cluster, _ bool) error {
			if group != "-" {
				c.Labels = map[string]string{"region": group, "env": "prod"}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if want[group] == nil {
			want[group] = &counts{}
		}
		w := want[group]
		w.clusters++
		members[group] = append(members[group], name)
		if i == 7 { // no input: disconnected
			w.down++
			continue
		}
		docs := []string{reviewsService, ratingsService}
		if i%5 == 0 {
			docs = append(docs, cartService)
			shop = append(shop, name)
		}
		w.destinations += len(docs)
		if group != "us" { // c1, in us, reaches every other cluster's reviews
			w.edges++
		}
		if err := st.PutInput(ctx, name, objects(t, docs...)); err != nil {
			t.Fatal(err)
		}
	}
	opts := server.DefaultOptions()
	opts.SafeStartWindow = time.Millisecond
	e := startWith(t, server.Deps{Store: st, Policies: staticPolicies{objects(t, accessPolicy("c1"))}}, opts, nil)
	b := browser(t)
	tb := tab(t, b)
	do(t, tb, "load the graph of 30 clusters", bearer(e.token), chromedp.Navigate(e.ui.URL()),
		waitJS(`document.querySelectorAll("g.group").length == 4 && document.querySelector('g.group[data-group="us"]')?.dataset.down == "1"`),
		waitJS(`document.querySelectorAll("g.edge").length == 3`))
	screenshot(t, tb, "groups-30")

	groups := stringsOf(t, tb, "groups", `[...document.querySelectorAll("g.group")].map(g => g.dataset.group + " " + g.dataset.expanded)`)
	if !slices.Equal(groups, []string{"ap false", "eu false", "us false", "- false"}) {
		t.Errorf("groups drawn %q, want ap, eu, us and the unlabelled, collapsed", groups)
	}
	for g, w := range want {
		sel := fmt.Sprintf(`g.group[data-group=%q]`, g)
		for a, v := range map[string]int{"data-clusters": w.clusters, "data-destinations": w.destinations, "data-down": w.down} {
			if got := attr(t, tb, sel, a); got != strconv.Itoa(v) {
				t.Errorf("group %s has %s=%s, want %d", g, a, got, v)
			}
		}
		if g == "us" {
			continue
		}
		if got := attr(t, tb, fmt.Sprintf(`g.edge[data-edge="group:us>group:%s"]`, g), "data-count"); got != strconv.Itoa(w.edges) {
			t.Errorf("the edge from us to %s stands for %s edges, want %d", g, got, w.edges)
		}
	}
	if off := offscreen(t, tb); len(off) > 0 {
		t.Errorf("collapsed groups past the window: %q", off)
	}

	t.Run("expand and collapse", func(t *testing.T) {
		do(t, tb, "expand eu", clickLive(`g.group[data-group="eu"] rect`), waitJS(`document.querySelector('g.group[data-group="eu"]').dataset.expanded == "true"`))
		if got, w := drawn(t, tb, `g.group[data-group="eu"]`), naturally(members["eu"]); !slices.Equal(got, w) {
			t.Errorf("eu draws %q, want %q", got, w)
		}
		do(t, tb, "an edge ends at c3's reviews", chromedp.WaitVisible(chromedp.CSS(`g.edge[data-edge="group:us>c3"]`)))
		if off := offscreen(t, tb); len(off) > 0 {
			t.Errorf("nodes past the window with eu expanded: %q", off)
		}
		screenshot(t, tb, "groups-30-eu")
		do(t, tb, "collapse eu", clickLive(`g.group[data-group="eu"] .group-head`), waitJS(`document.querySelector('g.group[data-group="eu"]').dataset.expanded == "false"`))
		if got := drawn(t, tb, ""); len(got) != 0 {
			t.Errorf("collapsed groups draw clusters %q", got)
		}
	})

	t.Run("no grouping", func(t *testing.T) {
		do(t, tb, "show every cluster", setInput("#group-by", "none"), clickLive("#expand-all"),
			waitJS(`document.querySelectorAll("g.cluster").length == 30`))
		all := drawn(t, tb, "")
		if w := naturally(all); !slices.Equal(all, w) || all[1] != "c2" || all[9] != "c10" {
			t.Errorf("clusters drawn in the order %q, want %q", all, w)
		}
		if off := offscreen(t, tb); len(off) > 0 {
			t.Errorf("clusters past the window: %q", off)
		}
		screenshot(t, tb, "groups-30-all")
		do(t, tb, "group by region again", setInput("#group-by", "label:region"), waitJS(`document.querySelectorAll("g.group").length == 4`))
	})

	t.Run("filters", func(t *testing.T) {
		do(t, tb, "filter by cluster", setInput("#filter-cluster", "c1"), waitJS(`document.querySelectorAll("g.cluster").length == 11`))
		got := drawn(t, tb, "")
		slices.Sort(got)
		if w := []string{"c1", "c10", "c11", "c12", "c13", "c14", "c15", "c16", "c17", "c18", "c19"}; !slices.Equal(got, w) {
			t.Errorf("filter c1 draws %q, want %q", got, w)
		}
		if n := get(t, tb, "count edges", chromedp.Evaluate[int](`document.querySelectorAll("g.edge").length`)); n == 0 {
			t.Errorf("c1's edges to the clusters shown are not drawn")
		}
		do(t, tb, "filter by cluster c3", setInput("#filter-cluster", "c3"), waitJS(`document.querySelectorAll("g.cluster").length == 2`))
		if n := get(t, tb, "count edges", chromedp.Evaluate[int](`document.querySelectorAll("g.edge").length`)); n != 0 {
			t.Errorf("%d edges drawn from c1, which the filter hides", n)
		}
		do(t, tb, "filter by namespace", setInput("#filter-cluster", ""), setInput("#filter-namespace", "shop"),
			waitJS(`document.querySelectorAll("g.cluster").length == `+strconv.Itoa(len(shop))))
		got = drawn(t, tb, "")
		slices.Sort(got)
		slices.Sort(shop)
		if !slices.Equal(got, shop) {
			t.Errorf("filter shop draws %q, want %q", got, shop)
		}
		for _, d := range stringsOf(t, tb, "destinations drawn", `[...document.querySelectorAll("g.destination")].map(g => g.dataset.destination)`) {
			if !strings.HasSuffix(d, "/shop/cart") {
				t.Errorf("filter shop draws destination %s", d)
			}
		}
		do(t, tb, "filter by destination", setInput("#filter-namespace", ""), setInput("#filter-destination", "ratings"),
			waitJS(`document.querySelector("#graph-summary").textContent.includes("29 clusters of 30")`))
		for g, w := range want {
			if got := attr(t, tb, fmt.Sprintf(`g.group[data-group=%q]`, g), "data-destinations"); got != strconv.Itoa(w.clusters-w.down) {
				t.Errorf("filter ratings: group %s shows %s destinations, want %d", g, got, w.clusters-w.down)
			}
		}
		screenshot(t, tb, "groups-30-filtered")
	})
}
