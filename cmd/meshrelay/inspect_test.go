package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshrelay/meshrelay/internal/demo"
	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"
)

// serveDemo runs the demo fleet (four clusters, real plugin processes,
// real agents) until the test ends and returns the admin flags that reach
// its server.
func serveDemo(t *testing.T) []string {
	t.Helper()
	admin, _ := serveDemoOut(t, "")
	return admin
}

// serveDemoOut is serveDemo with the plugin binaries of pluginDir (when
// set) that also returns the demo's output directory, whose policies/ is
// the server's watched policy source.
func serveDemoOut(t *testing.T, pluginDir string) ([]string, string) {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	// The output directory is made before the cleanup below is registered,
	// so that it is removed after the demo has stopped writing to it.
	out := filepath.Join(t.TempDir(), "demo")
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan *demo.Report, 1)
	done := make(chan error, 1)
	go func() {
		_, err := demo.Run(ctx, demo.Options{Root: root, Out: out, Serve: true, PluginDir: pluginDir,
			Ready: func(r *demo.Report) { ready <- r }})
		done <- err
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("demo: %v", err)
		}
	})
	select {
	case r := <-ready:
		return []string{"--server", r.ServerAddr, "--ca-file", r.CABundlePath, "--admin-token-file", r.AdminTokenPath}, out
	case err := <-done:
		t.Fatalf("demo ended before serving: %v", err)
		return nil, ""
	}
}

// Every get and describe form, in every output format, against the demo
// fleet through the whole agent → server → admin API path: the discovery
// objects derived from the four clusters, the policies and their outputs,
// unknown names (exit 3), an unauthenticated call (refused) and shell
// completion of names.
func TestGetAndDescribe(t *testing.T) {
	admin := serveDemo(t)
	get := func(t *testing.T, args ...string) string {
		t.Helper()
		out, err := run(t, append(append([]string{}, args...), admin...)...)
		if err != nil {
			t.Fatalf("meshrelay %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}

	t.Run("tables", func(t *testing.T) {
		for _, c := range []struct {
			args []string
			want []string
		}{
			{[]string{"get", "clusters"}, []string{"CLUSTER", "east", "west", "central", "connected"}},
			{[]string{"get", "meshes"}, []string{"east", "istio", "central", "cilium", "west", "envoy"}},
			{[]string{"get", "workloads", "-n", "bookinfo", "-c", "east"}, []string{"reviews-v1", "reviews-v2", "productpage-v1", "istio", "us-east-1/us-east-1a"}},
			{[]string{"get", "workloads", "-l", "app=reviews", "-o", "wide"}, []string{"SERVICE ACCOUNT", "bookinfo-reviews", "app=reviews"}},
			{[]string{"get", "destinations", "-n", "bookinfo"}, []string{"reviews", "ratings", "http:9080/TCP"}},
			{[]string{"get", "policies", "-c", "central"}, []string{"ratings-from-reviews"}},
			{[]string{"get", "policies"}, []string{"TrafficPolicy bookinfo/reviews-split", "Accepted", "VirtualDestination"}},
			{[]string{"get", "policies", "-o", "wide"}, []string{"AccessPolicy bookinfo/reviews-from-productpage"}},
			{[]string{"get", "outputs", "-c", "east", "--backend", "istio"}, []string{"VirtualService", "DestinationRule", "yes"}},
			{[]string{"get", "outputs", "-c", "west", "-o", "wide"}, []string{"POLICIES", "TrafficPolicy/bookinfo/reviews-split"}},
			{[]string{"describe", "destination", "bookinfo/reviews"}, []string{"Destination: bookinfo/reviews", "Clusters:    east, west", "reviews-v2", "bookinfo-reviews", "TrafficPolicy bookinfo/reviews-split", "VirtualService"}},
			{[]string{"describe", "destination", "reviews", "-c", "west"}, []string{"Clusters:    west"}},
			{[]string{"describe", "policy", "reviews-split"}, []string{"Policy:  TrafficPolicy bookinfo/reviews-split", "east", "applied", "Problems"}},
			{[]string{"describe", "cluster", "central"}, []string{"Cluster: central", "cilium", "AccessPolicy bookinfo/ratings-from-reviews"}},
		} {
			out := get(t, c.args...)
			for _, w := range c.want {
				if !strings.Contains(out, w) {
					t.Errorf("meshrelay %s: no %q in\n%s", strings.Join(c.args, " "), w, out)
				}
			}
		}
		if out := get(t, "get", "workloads", "-c", "central"); strings.Contains(out, "east") {
			t.Errorf("get workloads -c central shows east:\n%s", out)
		}
		// reviews runs in east and west: each row counts both clusters.
		out := get(t, "get", "destinations", "-n", "bookinfo", "-l", "app=reviews", "-o", "wide")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 3 || !strings.Contains(lines[0], "CLUSTERS") {
			t.Fatalf("get destinations -l app=reviews -o wide:\n%s", out)
		}
		for _, l := range lines[1:] {
			if f := strings.Fields(l); len(f) < 8 || f[2] != "reviews" || f[7] != "2" {
				t.Errorf("row %q: want reviews in 2 clusters", l)
			}
		}
		if out := get(t, "get", "policies", "-c", "central"); strings.Contains(out, "reviews-split") {
			t.Errorf("get policies -c central shows a policy with no output there:\n%s", out)
		}
		if out := get(t, "get", "workloads", "-l", "app=reviews,version!=v1"); strings.Contains(out, "reviews-v1") || !strings.Contains(out, "reviews-v2") {
			t.Errorf("get workloads -l app=reviews,version!=v1:\n%s", out)
		}
	})

	t.Run("yaml and json", func(t *testing.T) {
		for _, kind := range []string{"clusters", "meshes", "workloads", "destinations", "policies"} {
			var fromJSON, fromYAML map[string]any
			if err := json.Unmarshal([]byte(get(t, "get", kind, "-o", "json")), &fromJSON); err != nil {
				t.Fatalf("get %s -o json: %v", kind, err)
			}
			if err := yaml.Unmarshal([]byte(get(t, "get", kind, "-o", "yaml")), &fromYAML); err != nil {
				t.Fatalf("get %s -o yaml: %v", kind, err)
			}
			if items, _ := fromJSON[kind].([]any); len(items) == 0 || len(fromYAML[kind].([]any)) != len(items) {
				t.Errorf("get %s: json has %d items, yaml %v", kind, len(items), fromYAML[kind])
			}
		}
		var list struct{ Items []map[string]any }
		if err := json.Unmarshal([]byte(get(t, "get", "outputs", "-c", "east", "--backend", "istio", "-o", "json")), &list); err != nil || len(list.Items) == 0 {
			t.Fatalf("get outputs -o json: %v, %d items", err, len(list.Items))
		}
		docs := strings.Split(get(t, "get", "outputs", "-c", "east", "--backend", "istio", "-o", "yaml"), "---\n")
		if len(docs)-1 != len(list.Items) || !strings.Contains(docs[1], "apiVersion: networking.istio.io/") {
			t.Errorf("get outputs -o yaml: %d documents, want %d objects:\n%s", len(docs)-1, len(list.Items), docs[1])
		}
		for _, args := range [][]string{{"describe", "destination", "reviews"}, {"describe", "policy", "reviews-split"}, {"describe", "cluster", "west"}} {
			var v map[string]any
			if err := json.Unmarshal([]byte(get(t, append(args, "-o", "json")...)), &v); err != nil || len(v) == 0 {
				t.Errorf("%s -o json: %v", strings.Join(args, " "), err)
			}
			if err := yaml.Unmarshal([]byte(get(t, append(args, "-o", "yaml")...)), &v); err != nil {
				t.Errorf("%s -o yaml: %v", strings.Join(args, " "), err)
			}
		}
		var pd struct {
			Clusters []struct{ Cluster string }
			Outputs  []struct{ Body string }
		}
		if err := json.Unmarshal([]byte(get(t, "describe", "policy", "TrafficPolicy/bookinfo/reviews-split", "-o", "json")), &pd); err != nil {
			t.Fatal(err)
		}
		if len(pd.Clusters) < 2 || len(pd.Outputs) == 0 || !strings.Contains(pd.Outputs[0].Body, "reviews-split") {
			t.Errorf("describe policy -o json: clusters %v, %d outputs", pd.Clusters, len(pd.Outputs))
		}
	})

	t.Run("unknown names exit 3", func(t *testing.T) {
		for _, args := range [][]string{
			{"describe", "destination", "nosuch"}, {"describe", "policy", "nosuch"}, {"describe", "cluster", "nosuch"},
			{"describe", "destination", "reviews", "-c", "nosuch"},
		} {
			out, err := run(t, append(args, admin...)...)
			if exitCode(err) != 3 || !strings.Contains(err.Error(), `"`+args[2]+`" not found`) {
				t.Errorf("meshrelay %s: exit %d, %v\n%s", strings.Join(args, " "), exitCode(err), err, out)
			}
		}
		if _, err := run(t, append([]string{"get", "pods"}, admin...)...); exitCode(err) != 2 {
			t.Errorf("get pods: exit %d (%v), want 2", exitCode(err), err)
		}
	})

	t.Run("unauthenticated", func(t *testing.T) {
		wrong := filepath.Join(t.TempDir(), "token")
		if err := os.WriteFile(wrong, []byte("not-the-token"), 0o600); err != nil {
			t.Fatal(err)
		}
		args := append(append([]string{}, admin...), "--admin-token-file", wrong)
		for _, cmd := range [][]string{{"get", "workloads"}, {"describe", "destination", "reviews"}} {
			out, err := run(t, append(cmd, args...)...)
			if err == nil || !strings.Contains(err.Error(), "admin token") || strings.Contains(out, "reviews-v1") {
				t.Errorf("meshrelay %s with a wrong token: %v\n%s", strings.Join(cmd, " "), err, out)
			}
		}
	})

	t.Run("completion", func(t *testing.T) {
		for _, c := range []struct {
			cmd, rest []string // the admin flags go between them
			want      string
		}{
			{[]string{"describe", "destination"}, []string{"bookinfo/rev"}, "bookinfo/reviews"},
			{[]string{"describe", "policy"}, []string{""}, "TrafficPolicy/bookinfo/reviews-split"},
			{[]string{"describe", "cluster"}, []string{"we"}, "west"},
			{[]string{"get"}, []string{""}, "destinations"},
			{[]string{"get", "workloads"}, []string{"-c", "cen"}, "central"},
		} {
			args := append(append(append([]string{cobra.ShellCompRequestCmd}, c.cmd...), admin...), c.rest...)
			out, err := run(t, args...)
			if err != nil || !strings.Contains(out, c.want+"\n") {
				t.Errorf("complete %v %v: %v, want %q in\n%s", c.cmd, c.rest, err, c.want, out)
			}
		}
	})
}
