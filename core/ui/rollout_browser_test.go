package ui_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/meshrelay/meshrelay/core/rollout"
	"github.com/meshrelay/meshrelay/core/server"
	"github.com/meshrelay/meshrelay/core/store"
	"github.com/meshrelay/meshrelay/core/store/memory"
	"github.com/meshrelay/meshrelay/internal/testutil"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"google.golang.org/grpc/metadata"
)

// demoStrategy stages the demo fleet's policy changes: east first, then,
// once an administrator approves, the other three.
const demoStrategy = `apiVersion: policy.meshrelay.io/v1alpha1
kind: RolloutStrategy
metadata: {name: fleet, namespace: meshrelay}
spec:
  minHealthy: 1s
  progressDeadline: 10m
  stages:
  - name: canary
    clusters: [east]
  - name: main
    clusters: [west, central, north]
    approval: true
`

// The rollout page follows a real staged rollout of the demo fleet (real
// agents acking, real plugin processes) in Chromium: before any, it says
// there is none; after a policy edit under a two-stage strategy it shows
// the rollout at its gated stage with its counts, each stage's clusters
// and their states, the gate and the traffic around the change; an
// approval through the admin API carries it to completion on the open
// page, without a reload; the next edit's rollout follows on the same
// page, and an edit during it shows as queued.
func TestBrowserRollout(t *testing.T) {
	f := startFleet(t)
	b := browser(t)
	refusedAPI(t, f, "Bearer wrong-token", "api/rollout")
	refusedAPI(t, f, "", "api/rollout")

	ctx := tab(t, b)
	do(t, ctx, "open the rollout page from the fleet's", bearer(f.token), chromedp.Navigate(f.ui), chromedp.WaitVisible(chromedp.CSS("svg.graph")),
		clickLive("#nav-rollout"), waitJS(`!!document.querySelector("#rollout-none")`))

	testutil.WriteFile(t, filepath.Join(f.policies, "rollout-strategy.yaml"), demoStrategy)
	admin := f.admin.Context(context.Background())
	testutil.EventuallyWhy(t, "the server holds the RolloutStrategy", func() (bool, string) {
		st, err := f.admin.GetStatus(admin, &relayv1.GetStatusRequest{})
		if err != nil {
			return false, err.Error()
		}
		for _, p := range st.GetPolicies() {
			if p.GetKind() == "RolloutStrategy" {
				return p.GetState() == "Accepted", p.GetState()
			}
		}
		return false, "no RolloutStrategy in the status"
	})
	editPolicy(t, filepath.Join(f.policies, "reviews-traffic.yaml"), "timeout: 3s", "timeout: 4s")

	gated := `details.stage[data-stage="main"][data-state="AwaitingApproval"]`
	do(t, ctx, "see the rollout reach its gate", waitJS(`!!document.querySelector(`+strconv.Quote(`#rollout[data-rollout="1"][data-stage="main"] `+gated)+`)`),
		chromedp.Evaluate[chromedp.Void](`window.__page = document.querySelector("#rollout")`))
	for name, want := range map[string]string{"data-total": "4", "data-released": "1", "data-healthy": "1", "data-failed": "0", "data-pending": "3"} {
		if got := liveAttr(t, ctx, "#rollout-counts", name); got != want {
			t.Errorf("at the gate the counts' %s is %s, want %s", name, got, want)
		}
	}
	if got := liveText(t, ctx, "#rollout-phase"); got != "Progressing" {
		t.Errorf("the rollout's phase reads %q, want Progressing", got)
	}
	if got := liveText(t, ctx, "#rollout-reason"); got != "stage main waits for approval" {
		t.Errorf("the rollout's reason reads %q, want the gate", got)
	}
	if got := liveAttr(t, ctx, `details.stage[data-stage="canary"]`, "data-state"); got != "Done" {
		t.Errorf("stage canary is %s, want Done", got)
	}
	states := func() map[string]string {
		t.Helper()
		names := stringsOf(t, ctx, "the clusters listed", `[...document.querySelectorAll("#rollout-stages tr[data-cluster]")].map((r) => r.closest("details").dataset.stage + "/" + r.dataset.cluster + "=" + r.dataset.state)`)
		out := map[string]string{}
		for _, n := range names {
			k, v, _ := strings.Cut(n, "=")
			out[k] = v
		}
		return out
	}
	want := map[string]string{"canary/east": "Succeeded", "main/west": "Pending", "main/central": "Pending", "main/north": "Pending"}
	if got := states(); !maps.Equal(got, want) {
		t.Errorf("at the gate the page lists %v, want %v", got, want)
	}
	if got := liveAttr(t, ctx, `#rollout-stages details.stage[data-stage="main"] .stage-counts`, "data-pending"); got != "3" {
		t.Errorf("stage main counts %s pending, want 3", got)
	}
	if got := liveText(t, ctx, `p.gate[data-gate="main"] code`); got != "meshrelay rollout approve main" {
		t.Errorf("the gate reads %q, want the command that approves it", got)
	}
	traffic := `.policy-traffic[data-policy="TrafficPolicy/bookinfo/reviews-split"]`
	do(t, ctx, "see the traffic around reviews-split's change", waitJS(`!!document.querySelector(`+strconv.Quote(traffic+` tr[data-destination="bookinfo/reviews"]`)+`)`))
	if changed := liveAttr(t, ctx, traffic+" p.changed", "data-changed"); changed == "" {
		t.Errorf("the rollout page knows no change of reviews-split, which it carries")
	}
	screenshot(t, ctx, "rollout-gated")

	// The fleet page says a rollout runs, and the policy it carries names
	// it, each linking to the rollout page.
	fleetTab := tab(t, b)
	row := `#policies tr[data-policy="TrafficPolicy/bookinfo/reviews-split"] li.rollout a[href="#/rollout"]`
	do(t, fleetTab, "open the fleet page", bearer(f.token), chromedp.Navigate(f.ui), waitJS(`!!document.querySelector(`+strconv.Quote(row)+`)`))
	// The page's first status may be the server's shared one from up to
	// half a poll before (statusCache): it shows the stage within a poll.
	if got := waitText(t, fleetTab, row, "rollout 1 Progressing at stage main: 1/4 released"); !strings.HasPrefix(got, "rollout 1 Progressing at stage main: 1/4 released") {
		t.Errorf("the fleet page's policies list reviews-split with %q, want rollout 1 at stage main", got)
	}
	if got := liveText(t, fleetTab, "#rollout-banner a"); !strings.HasPrefix(got, "rollout 1 Progressing") {
		t.Errorf("the fleet page's banner reads %q, want rollout 1", got)
	}

	if _, err := f.admin.ActOnRollout(admin, &relayv1.RolloutActionRequest{Action: relayv1.RolloutActionRequest_ACTION_APPROVE, Stage: "main"}); err != nil {
		t.Fatal(err)
	}
	do(t, ctx, "see the rollout complete live", waitJS(`document.querySelector("#rollout")?.dataset.phase === "Completed"`))
	if same := get(t, ctx, "the page kept", chromedp.Evaluate[bool](`window.__page === document.querySelector("#rollout")`)); !same {
		t.Errorf("the page was reloaded or redrawn anew to show the approval, want it updated in place")
	}
	for name, want := range map[string]string{"data-total": "4", "data-released": "4", "data-healthy": "4", "data-pending": "0"} {
		if got := liveAttr(t, ctx, "#rollout-counts", name); got != want {
			t.Errorf("after completion the counts' %s is %s, want %s", name, got, want)
		}
	}
	want = map[string]string{"canary/east": "Succeeded", "main/west": "Succeeded", "main/central": "Succeeded", "main/north": "Succeeded"}
	if got := states(); !maps.Equal(got, want) {
		t.Errorf("after completion the page lists %v, want %v", got, want)
	}
	if n := get(t, ctx, "the gates left", chromedp.Evaluate[int](`document.querySelectorAll("p.gate").length`)); n != 0 {
		t.Errorf("after completion the page shows %d gates, want none", n)
	}
	if got := liveAttr(t, ctx, `details.stage[data-stage="main"]`, "data-state"); got != "Done" {
		t.Errorf("stage main is %s after completion, want Done", got)
	}
	// The policies a rollout carried stay on its page after it ends.
	do(t, ctx, "still see reviews-split's traffic", waitJS(`!!document.querySelector(`+strconv.Quote(traffic)+`)`))
	screenshot(t, ctx, "rollout-completed")

	// The next edit starts rollout 2, which the open page follows to its
	// gate; an edit during it waits, and the page says a revision is queued.
	if got := liveAttr(t, ctx, "#rollout-queued", "data-queued"); got != "false" {
		t.Errorf("a completed rollout has a queued revision: %s", got)
	}
	editPolicy(t, filepath.Join(f.policies, "reviews-traffic.yaml"), "timeout: 4s", "timeout: 5s")
	do(t, ctx, "see rollout 2 reach its gate", waitJS(`!!document.querySelector(`+strconv.Quote(`#rollout[data-rollout="2"][data-stage="main"] `+gated)+`)`))
	editPolicy(t, filepath.Join(f.policies, "reviews-traffic.yaml"), "timeout: 5s", "timeout: 6s")
	do(t, ctx, "see the next revision queued", waitJS(`document.querySelector("#rollout-queued")?.dataset.queued === "true"`))
	if same := get(t, ctx, "the page kept", chromedp.Evaluate[bool](`window.__page === document.querySelector("#rollout")`)); !same {
		t.Errorf("the page was made anew to show rollout 2, want it updated in place")
	}
	do(t, ctx, "see reviews-split's traffic for rollout 2", waitJS(`!!document.querySelector(`+strconv.Quote(traffic)+`)`))
	screenshot(t, ctx, "rollout-queued")
}

// liveText returns an element's text, found and read in one step: the
// pages redraw as live updates arrive, and a node found in one step may be
// gone by the next. No element reads as "".
func liveText(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	return get(t, ctx, "read the text of "+sel, chromedp.Evaluate[string](`document.querySelector(`+strconv.Quote(sel)+`)?.textContent ?? ""`))
}

// waitText waits, up to a minute, until the text of the element sel
// selects starts with prefix, and returns the text it read last.
func waitText(t *testing.T, ctx context.Context, sel, prefix string) string {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	// A timeout is reported by the caller, with the text read last.
	_, _ = chromedp.Run(wctx, waitJS(`(document.querySelector(`+strconv.Quote(sel)+`)?.textContent ?? "").startsWith(`+strconv.Quote(prefix)+`)`))
	return liveText(t, ctx, sel)
}

// liveAttr returns an element's attribute as liveText does its text.
func liveAttr(t *testing.T, ctx context.Context, sel, name string) string {
	t.Helper()
	return get(t, ctx, "read "+name+" of "+sel, chromedp.Evaluate[string](`document.querySelector(`+strconv.Quote(sel)+`)?.getAttribute(`+strconv.Quote(name)+`) ?? ""`))
}

// scaleRollout is a rollout of 1,000 clusters c0…c999 in five stages,
// at stage s2 (index 1) or, advanced, at the gated s3.
func scaleRollout(advanced bool) *rollout.Rollout {
	now := time.Now()
	sizes := []int{10, 90, 300, 300, 300}
	ro := &rollout.Rollout{ID: 3, From: "aaaaaaaaaaaaaaaa", To: "bbbbbbbbbbbbbbbb", Phase: rollout.Progressing, Stage: 1, Started: now, StageStarted: now, Clusters: map[string]*rollout.Cluster{}}
	for i, n := range sizes {
		ro.Stages = append(ro.Stages, rollout.Stage{Name: fmt.Sprintf("s%d", i+1), MaxConcurrent: n / 3, MinHealthy: time.Minute, ProgressDeadline: time.Hour, Approval: i == 2})
	}
	c := 0
	for s, n := range sizes {
		for k := range n {
			cl := &rollout.Cluster{Stage: s, Phase: rollout.Pending}
			switch {
			case s == 0, s == 1 && advanced, s == 1 && k < 50:
				cl.Phase, cl.Released, cl.HealthySince = rollout.Succeeded, now, now
			case s == 1 && k == 50:
				cl.Phase, cl.Released, cl.Reason = rollout.Failed, now, "apply errors in output istio"
			case s == 1 && k < 80:
				cl.Phase, cl.Released = rollout.Releasing, now
			}
			ro.Clusters[fmt.Sprintf("c%d", c)] = cl
			c++
		}
	}
	if advanced {
		ro.Stage, ro.Reason = 2, "stage s3 waits for approval"
	}
	return ro
}

// putRollout stores a rollout record as the server's staged rollout
// keeps it (core/server/rollout.go's record "fleet").
func putRollout(t *testing.T, st store.Store, ro *rollout.Rollout) {
	t.Helper()
	ctx := context.Background()
	old, err := st.GetRollout(ctx, "fleet")
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		t.Fatal(err)
	}
	rec := &rollout.Record{Live: ro.From, Rollout: ro}
	if _, err := st.CompareAndPutRollout(ctx, store.RolloutRecord{Name: "fleet", Data: rec.Encode(), Version: old.Version}); err != nil {
		t.Fatal(err)
	}
}

// The rollout page of a 1,000-cluster rollout in five stages, served by a
// real server from its store (no policy source: the server only reads
// the record): a stage of up to 20 clusters is listed open, a longer one
// is collapsed to its counts and opens on click a page of 100 clusters
// at a time, the failing and progressing ones first; the filter narrows
// every stage; the rollout's progress reaches the open page, which keeps
// what the reader opened.
func TestBrowserRolloutAtScale(t *testing.T) {
	st := memory.New()
	putRollout(t, st, scaleRollout(false))
	e := startOn(t, st, server.DefaultOptions(), nil)
	b := browser(t)
	ctx := tab(t, b)
	do(t, ctx, "open the rollout page", bearer(e.token), chromedp.Navigate(e.ui.URL()+"#/rollout"),
		waitJS(`document.querySelectorAll("details.stage").length === 5`))
	t.Logf("a rollout of 1,000 clusters in 5 stages drawn %.0f ms after navigation started", get(t, ctx, "the time drawn", chromedp.Evaluate[float64](`performance.now()`)))

	screenshot(t, ctx, "rollout-1000-collapsed")
	open := func(stage string) bool {
		t.Helper()
		return get(t, ctx, "whether "+stage+" is open", chromedp.Evaluate[bool](`document.querySelector('details.stage[data-stage="`+stage+`"]').open`))
	}
	rows := func(stage string) []string {
		t.Helper()
		return stringsOf(t, ctx, "the rows of "+stage, `[...document.querySelectorAll('details.stage[data-stage="`+stage+`"] tr[data-cluster]')].map((r) => r.dataset.cluster + "=" + r.dataset.state)`)
	}
	if !open("s1") || open("s2") || open("s3") {
		t.Errorf("open stages: s1 %v, s2 %v, s3 %v; want only s1 (10 clusters) open", open("s1"), open("s2"), open("s3"))
	}
	if got := rows("s1"); len(got) != 10 || got[0] != "c0=Succeeded" || got[9] != "c9=Succeeded" {
		t.Errorf("s1 lists %q, want c0…c9 succeeded", got)
	}
	for name, want := range map[string]string{"data-pending": "300", "data-succeeded": "0"} {
		if got := liveAttr(t, ctx, `details.stage[data-stage="s3"] .stage-counts`, name); got != want {
			t.Errorf("collapsed s3's %s is %s, want %s", name, got, want)
		}
	}
	for name, want := range map[string]string{"data-total": "1000", "data-released": "90", "data-healthy": "60", "data-failed": "1", "data-pending": "910"} {
		if got := liveAttr(t, ctx, "#rollout-counts", name); got != want {
			t.Errorf("the counts' %s is %s, want %s", name, got, want)
		}
	}
	if got := liveText(t, ctx, `p.gate[data-gate="s3"]`); !strings.Contains(got, "will wait for approval") {
		t.Errorf("the gate ahead reads %q", got)
	}

	// s2 opens on click, its failing cluster first, then the progressing.
	do(t, ctx, "open s2", clickLive(`details.stage[data-stage="s2"] > summary`), waitJS(`document.querySelector('details.stage[data-stage="s2"]').open`))
	if got := rows("s2"); len(got) != 90 || got[0] != "c60=Failed" || got[1] != "c61=Progressing" || got[29] != "c89=Progressing" || got[30] != "c90=Pending" || got[40] != "c10=Succeeded" {
		t.Errorf("s2 lists %d clusters beginning %q, want 90: c60 failed, c61…c89 progressing, c90…c99 pending, then c10…", len(got), got[:min(len(got), 41)])
	}
	// s3 lists 100 of its 300, then 100 more on request.
	do(t, ctx, "open s3", clickLive(`details.stage[data-stage="s3"] > summary`), waitJS(`document.querySelector('details.stage[data-stage="s3"]').open`))
	if got := rows("s3"); len(got) != 100 || got[0] != "c100=Pending" || got[99] != "c199=Pending" {
		t.Errorf("s3 lists %d clusters %q…, want c100…c199", len(got), got[:min(len(got), 2)])
	}
	do(t, ctx, "show 100 more of s3", clickLive(`p.table-more[data-more="s3"] button.more`),
		waitJS(`document.querySelectorAll('details.stage[data-stage="s3"] tr[data-cluster]').length === 200`))

	do(t, ctx, "filter by c99", setInput("#rollout-filter", "c99"),
		waitJS(`document.querySelectorAll("#rollout-stages tr[data-cluster]").length === 11`))
	if got := stringsOf(t, ctx, "the clusters filtered", `[...document.querySelectorAll("#rollout-stages tr[data-cluster]")].map((r) => r.dataset.cluster)`); !slices.Equal(got, []string{"c99", "c990", "c991", "c992", "c993", "c994", "c995", "c996", "c997", "c998", "c999"}) {
		t.Errorf("the filter c99 keeps %q", got)
	}
	do(t, ctx, "clear the filter", setInput("#rollout-filter", ""),
		waitJS(`document.querySelectorAll('details.stage[data-stage="s3"] tr[data-cluster]').length === 200`),
		chromedp.Evaluate[chromedp.Void](`window.__page = document.querySelector("#rollout")`))

	// The rollout advances to its gate: the open page follows, and s3
	// stays open with its 200 clusters.
	putRollout(t, st, scaleRollout(true))
	do(t, ctx, "see the rollout reach s3's gate", waitJS(`document.querySelector('details.stage[data-stage="s3"]')?.dataset.state === "AwaitingApproval"`))
	if got := liveAttr(t, ctx, `details.stage[data-stage="s2"]`, "data-state"); got != "Done" {
		t.Errorf("s2 is %s after the rollout moved on, want Done", got)
	}
	if !open("s3") || len(rows("s3")) != 200 {
		t.Errorf("after a live update s3 is open %v with %d clusters, want open with the 200 the reader asked for", open("s3"), len(rows("s3")))
	}
	if same := get(t, ctx, "the page kept", chromedp.Evaluate[bool](`window.__page === document.querySelector("#rollout")`)); !same {
		t.Errorf("the page was made anew by the live update, want it updated in place")
	}

	// A status event (a cluster registered) redraws the page without
	// opening the stages the reader left closed.
	admin := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+e.token))
	if _, err := e.srv.AdminServer().RegisterCluster(admin, &relayv1.RegisterClusterRequest{Cluster: "c1000"}); err != nil {
		t.Fatal(err)
	}
	do(t, ctx, "see the status event", waitJS(`document.querySelector("#rollout")?.dataset.fleetClusters === "1"`))
	if open("s4") || open("s5") || !open("s3") || !open("s2") {
		t.Errorf("after a status event the stages open are s2 %v, s3 %v, s4 %v, s5 %v; want s2 and s3, those the reader opened", open("s2"), open("s3"), open("s4"), open("s5"))
	}
	screenshot(t, ctx, "rollout-1000")
}
