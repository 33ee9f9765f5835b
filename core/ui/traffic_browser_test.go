package ui_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/meshrelay/meshrelay/core/store"
	"github.com/meshrelay/meshrelay/internal/demo"
)

// The fleet graph draws live workload → destination edges in Chromium:
// real grpc-go calls through grpc-go's OpenTelemetry plugin to the demo's
// east agent show up with their count, error rate and colour, and grow
// without a reload; the destination page lists the caller; the policy page
// shows the error rate after the policy's last change.
func TestBrowserTraffic(t *testing.T) {
	f := startFleet(t)
	b := browser(t)
	calls := func(n, failures int) {
		t.Helper()
		err := demo.CallsThrough(context.Background(), demo.Calls{
			Agent: f.traffic["east"], Namespace: "bookinfo", Client: "probe", Server: "reviews-v3", Service: "reviews.bookinfo.svc.cluster.local",
			Calls: n, Failures: failures,
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	calls(100, 25)
	refusedAPI(t, f, "Bearer wrong-token", "api/traffic", "api/traffic?destination=bookinfo/reviews", "api/traffic/policies/TrafficPolicy/bookinfo/reviews-split")
	refusedAPI(t, f, "", "api/traffic")

	ctx := tab(t, b)
	edge := `g.traffic-edge[data-traffic-edge="east/bookinfo/probe>east/bookinfo/reviews"]`
	do(t, ctx, "open the fleet graph", bearer(f.token), chromedp.Navigate(f.ui), chromedp.WaitVisible(chromedp.CSS("svg.graph")),
		waitJS(`!!document.querySelector(`+strconv.Quote(edge)+`)`))
	if got := attr(t, ctx, edge, "data-requests"); got != "100" {
		t.Errorf("the probe's edge counts %s requests, want 100", got)
	}
	if got := attr(t, ctx, edge, "data-error-rate"); got != "0.2500" {
		t.Errorf("the probe's edge has error rate %s, want 0.2500", got)
	}
	if cls := attr(t, ctx, edge, "class"); !strings.Contains(cls, "err-high") {
		t.Errorf("the probe's edge (25%% errors) is drawn %q, want err-high", cls)
	}
	if colour := get(t, ctx, "colour of the probe's edge", chromedp.Evaluate[string](`getComputedStyle(document.querySelector(`+strconv.Quote(edge+" path")+`)).stroke`)); colour != "rgb(198, 47, 59)" {
		t.Errorf("the failing edge is drawn %s, want the error colour", colour)
	}
	if label := get(t, ctx, "the label of the probe's edge", chromedp.Evaluate[string](`document.querySelector(`+strconv.Quote(edge+" text")+`).textContent`)); !strings.Contains(label, "25.0%") || !strings.Contains(label, "rps") || !strings.Contains(label, "p99") {
		t.Errorf("the probe's edge reads %q, want its rps, 25.0%% and p99", label)
	}
	// The demo's own calls, productpage → reviews, never fail.
	live := `g.traffic-edge[data-traffic-edge="east/bookinfo/productpage-v1>east/bookinfo/reviews"]`
	do(t, ctx, "see the demo's live edge", waitJS(`!!document.querySelector(`+strconv.Quote(live)+`)`))
	if cls := attr(t, ctx, live, "class"); !strings.Contains(cls, "err-none") {
		t.Errorf("the demo's edge without errors is drawn %q", cls)
	}
	screenshot(t, ctx, "traffic-graph")

	// More calls reach the open page without a reload.
	calls(100, 0)
	do(t, ctx, "see the edge grow live", waitJS(`document.querySelector(`+strconv.Quote(edge)+`)?.getAttribute("data-requests") == "200"`))
	if got := attr(t, ctx, edge, "data-error-rate"); got != "0.1250" {
		t.Errorf("after 200 calls, 25 failed, the edge has error rate %s, want 0.1250", got)
	}

	caller := `#callers tr[data-caller="east/bookinfo/probe>east"]`
	do(t, ctx, "open reviews' page", chromedp.Navigate(f.ui+"#/destinations/bookinfo/reviews"), waitJS(`!!document.querySelector(`+strconv.Quote(caller)+`)`))
	if got := attr(t, ctx, caller, "data-requests"); got != "200" {
		t.Errorf("reviews' page lists the probe with %s requests, want 200", got)
	}
	screenshot(t, ctx, "traffic-destination")

	// The demo edited reviews-split before serving: every call came after.
	// Its description is made to come after its traffic, as on a loaded
	// server: the traffic section answers before it joins the page, and
	// must keep polling once it has (the missing replica below).
	slow := `const f = window.fetch; window.fetch = (u, o) => String(u).startsWith("/api/policies/") ? new Promise((r) => setTimeout(r, 1500)).then(() => f(u, o)) : f(u, o); true`
	get(t, ctx, "slow the policy descriptions", chromedp.Evaluate[bool](slow))
	row := `#policy-traffic tr[data-destination="bookinfo/reviews"]`
	do(t, ctx, "open reviews-split's page", chromedp.Navigate(f.ui+"#/policies/TrafficPolicy/bookinfo/reviews-split"),
		waitJS(`!!document.querySelector(`+strconv.Quote(row)+`)`))
	if changed := attr(t, ctx, "#policy-changed", "data-changed"); changed == "" {
		t.Errorf("the policy page knows no change of reviews-split, which the demo edited")
	}
	after := attr(t, ctx, row, "data-after")
	errs, reqs, _ := strings.Cut(after, "/")
	if n, _ := strconv.Atoi(reqs); errs != "25" || n < 200 {
		t.Errorf("after the change, reviews had %s (errors/requests), want 25 of at least 200", after)
	}
	if before := attr(t, ctx, row, "data-before"); before != "0/0" {
		t.Errorf("before the change, reviews had %s, want no traffic (the demo's calls start after it)", before)
	}
	screenshot(t, ctx, "traffic-policy")

	// Another replica joins without an address its peers can reach: every
	// traffic view names it and still shows the edges this one answers.
	// It announces as many agents as the demo's, so nobody is asked to
	// move to it.
	if err := f.store.Announce(context.Background(), "demo-b", store.Replica{Agents: len(f.traffic)}, time.Minute); err != nil {
		t.Fatal(err)
	}
	missing := `[...document.querySelectorAll(".missing-replica")].some((e) => e.textContent.includes("server replica demo-b"))`
	do(t, ctx, "see the policy page name the missing replica", waitJS(missing+` && !!document.querySelector(`+strconv.Quote(row)+`)`))
	do(t, ctx, "see the graph name the missing replica", chromedp.Navigate(f.ui), waitJS(missing+` && !!document.querySelector(`+strconv.Quote(edge)+`)`))
	screenshot(t, ctx, "traffic-missing-replica")
	do(t, ctx, "see reviews' callers name the missing replica", chromedp.Navigate(f.ui+"#/destinations/bookinfo/reviews"), waitJS(missing+` && !!document.querySelector(`+strconv.Quote(caller)+`)`))
}
