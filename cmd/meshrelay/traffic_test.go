package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshrelay/meshrelay/internal/demo"
	"github.com/meshrelay/meshrelay/internal/testutil"
)

// TestTrafficEndToEnd: real grpc-go clients and servers, instrumented with
// grpc-go's OpenTelemetry plugin, export OTLP to a real agent of the demo
// fleet, which relays windows to the real server: the edge's requests,
// error rate and a latency bucket are right on the server's /metrics, in
// `meshrelay top` and in `describe destination`.
func TestTrafficEndToEnd(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "demo")
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan *demo.Report, 1)
	done := make(chan error, 1)
	go func() {
		_, err := demo.Run(ctx, demo.Options{Root: root, Out: out, Serve: true, TrafficWindow: 500 * time.Millisecond,
			Ready: func(r *demo.Report) { ready <- r }})
		done <- err
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("demo: %v", err)
		}
	})
	var r *demo.Report
	select {
	case r = <-ready:
	case err := <-done:
		t.Fatalf("demo ended before serving: %v", err)
	}
	admin := []string{"--server", r.ServerAddr, "--ca-file", r.CABundlePath, "--admin-token-file", r.AdminTokenPath}

	// 200 calls from shop/checkout in east to payments: 30 fail with
	// UNAVAILABLE, 20 take over 100 ms.
	const calls, failures, slow = 200, 30, 20
	err = demo.CallsThrough(context.Background(), demo.Calls{
		Agent: r.Traffic["east"], Namespace: "shop", Client: "checkout", Server: "payments-v1", Service: "payments.shop.svc.cluster.local",
		Calls: calls, Failures: failures, Slow: slow, SlowFor: 120 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}

	labels := `destination_cluster="east",destination_service="shop/payments",protocol="grpc",source_cluster="east",source_workload="shop/checkout"`
	var metrics string
	testutil.Eventually(t, "the edge's 200 calls on /metrics", func() bool {
		metrics = scrape(t, "http://"+r.MetricsAddr+"/metrics")
		return strings.Contains(metrics, `meshrelay_edge_request_duration_milliseconds_count{`+labels+`} `+strconv.Itoa(calls))
	})
	want := map[string]int{
		`meshrelay_edge_requests_total{code_class="grpc_ok",` + labels + `}`:            calls - failures,
		`meshrelay_edge_requests_total{code_class="grpc_server_error",` + labels + `}`:  failures,
		`meshrelay_edge_request_duration_milliseconds_bucket{` + labels + `,le="+Inf"}`: calls,
	}
	for series, n := range want {
		if !strings.Contains(metrics, series+" "+strconv.Itoa(n)+"\n") {
			t.Errorf("/metrics lacks %s %d", series, n)
		}
	}
	// The slow calls took over 100 ms: at most the others are under it.
	// How many of those are under it depends on the machine's load (a
	// busy machine makes fast calls slow), so only some must be.
	le100 := regexp.MustCompile(regexp.QuoteMeta(`meshrelay_edge_request_duration_milliseconds_bucket{`+labels+`,le="100"} `) + `(\d+)`).FindStringSubmatch(metrics)
	if le100 == nil {
		t.Fatalf("/metrics lacks the le=\"100\" bucket:\n%s", grep(metrics, "payments"))
	}
	if n, _ := strconv.Atoi(le100[1]); n > calls-slow || n == 0 {
		t.Errorf("le=\"100\" bucket = %d, want 1 to %d (the %d slow calls are above it)", n, calls-slow, slow)
	}

	top, err := run(t, append([]string{"top", "edges", "-c", "east", "--sort", "errors"}, admin...)...)
	if err != nil {
		t.Fatalf("top edges: %v\n%s", err, top)
	}
	row := regexp.MustCompile(`(?m)^east\s+shop/checkout\s+east\s+shop/payments\s+grpc\s+200\s+\S+\s+15\.0%\s+\S+\s+\S+$`)
	if !row.MatchString(top) {
		t.Errorf("top edges lacks checkout → payments with 200 requests and 15.0%% errors:\n%s", top)
	}
	// Every replica named in --server is asked and the answers merged; the
	// one replica named twice counts each edge twice.
	twice := []string{"top", "edges", "-c", "east", "--server", r.ServerAddr + "," + r.ServerAddr, "--ca-file", r.CABundlePath, "--admin-token-file", r.AdminTokenPath}
	if out, err := run(t, twice...); err != nil || !regexp.MustCompile(`(?m)^east\s+shop/checkout\s+east\s+shop/payments\s+grpc\s+400\s+\S+\s+15\.0%`).MatchString(out) {
		t.Errorf("top edges over two addresses: %v\n%s", err, out)
	}
	dests, err := run(t, append([]string{"top", "destinations", "-n", "1", "--sort", "errors"}, admin...)...)
	if err != nil || !regexp.MustCompile(`(?m)^east\s+shop/payments\s+200\s+\S+\s+15\.0%`).MatchString(dests) {
		t.Errorf("top destinations -n 1 --sort errors: %v\n%s", err, dests)
	}
	desc, err := run(t, append([]string{"describe", "destination", "bookinfo/reviews"}, admin...)...)
	if err != nil || !strings.Contains(desc, "Traffic (callers, last minute):") {
		t.Errorf("describe destination lacks its traffic: %v\n%s", err, desc)
	}
	testutil.Eventually(t, "describe destination bookinfo/reviews shows the demo's productpage calling it", func() bool {
		desc, _ = run(t, append([]string{"describe", "destination", "bookinfo/reviews"}, admin...)...)
		return regexp.MustCompile(`bookinfo/productpage-v1\s+east\s+bookinfo/reviews\s+grpc`).MatchString(desc)
	})
}

func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func grep(s, word string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, word) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
