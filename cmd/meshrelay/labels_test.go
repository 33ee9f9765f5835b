package main

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/meshrelay/meshrelay/core/pluginhost"
	"github.com/meshrelay/meshrelay/core/preview"
	"github.com/meshrelay/meshrelay/internal/demo"
	"github.com/meshrelay/meshrelay/internal/testutil"
	"sigs.k8s.io/yaml"
)

// A policy whose destination selector picks clusters by label reaches the
// clusters the labels select, and follows relabelling, end to end: the
// demo fleet's real agents and real plugin processes (Istio in east and
// west, Cilium in central), labels set with meshrelay cluster label,
// outputs read back with meshrelay get outputs.
func TestClusterSelectorEndToEnd(t *testing.T) {
	// The plugins built from this tree: they must know clusterSelector.
	_, admin, out := serveTreeDemo(t)
	cli := adminCLI(t, admin)
	cli("cluster", "label", "east", "region=eu")
	cli("cluster", "label", "west", "region=us")
	cli("cluster", "label", "central", "region=eu")

	policy := `apiVersion: policy.meshrelay.io/v1alpha1
kind: AccessPolicy
metadata: {name: by-region, namespace: bookinfo}
spec:
  destinationSelectors:
  - namespaces: [bookinfo]
    names: [productpage, details]
    clusterSelector:
      matchExpressions: [{key: region, operator: In, values: [eu]}]
  action: Allow
  from:
  - namespaces: [bookinfo]
  ports: [9080]
`
	if err := os.WriteFile(filepath.Join(out, "policies", "by-region.yaml"), []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	// clustersWith returns the clusters holding an applied output of the
	// policy.
	clustersWith := func() []string {
		var got []string
		for _, line := range strings.Split(cli("get", "outputs", "-o", "wide"), "\n") {
			f := strings.Fields(line)
			if len(f) > 6 && strings.Contains(line, "AccessPolicy/bookinfo/by-region") && f[5] == "yes" {
				got = append(got, f[0])
			}
		}
		slices.Sort(got)
		return slices.Compact(got)
	}
	want := func(what string, clusters ...string) {
		t.Helper()
		testutil.EventuallyWhy(t, what, func() (bool, string) {
			got := clustersWith()
			return slices.Equal(got, clusters), strings.Join(got, ",")
		})
	}
	want("the policy's outputs applied in the clusters labelled region=eu", "central", "east")

	cli("cluster", "label", "west", "region=eu")
	want("west's outputs after it was labelled region=eu", "central", "east", "west")

	cli("cluster", "label", "east", "region-")
	want("east's outputs pruned after its label was removed", "central", "west")

	d := cli("describe", "cluster", "west")
	if !strings.Contains(d, "Labels: region=eu") {
		t.Errorf("describe cluster west =\n%s\nwant its label", d)
	}
}

// A policy whose client selector picks clusters by label admits the
// clients of the clusters the labels select, follows relabelling, and
// admits no client when it matches no cluster, end to end: the demo
// fleet's real agents and plugin processes built from this tree, labels
// set with meshrelay cluster label, outputs read from the files the
// agents applied. Cilium (central) names the client clusters in its
// policy; Istio (east and west share the trust domain cluster.local) can
// only admit or not. meshrelay diff gives the same answer live and
// offline, with the offline fleet's labels in labels.yaml.
func TestClientClusterSelectorEndToEnd(t *testing.T) {
	root, admin, out := serveTreeDemo(t)
	cli := adminCLI(t, admin)
	labels := map[string]string{"east": "eu", "west": "us", "central": "eu", "north": "us"}
	for _, c := range slices.Sorted(maps.Keys(labels)) {
		cli("cluster", "label", c, "region="+labels[c])
	}
	policy := func(region string) string {
		return `apiVersion: policy.meshrelay.io/v1alpha1
kind: AccessPolicy
metadata: {name: details-by-region, namespace: bookinfo}
spec:
  destinationSelectors: [{namespaces: [bookinfo], names: [details]}]
  action: Allow
  from:
  - clusterSelector: {matchLabels: {region: ` + region + `}}
  ports: [9080]
`
	}
	if err := os.WriteFile(filepath.Join(out, "policies", "details-by-region.yaml"), []byte(policy("eu")), 0o644); err != nil {
		t.Fatal(err)
	}
	// admitted returns the client clusters central's Cilium policy names,
	// "none" when it has no rule admitting clients, "" before it is applied.
	admitted := func() string {
		body := appliedOutput(t, filepath.Join(out, "outputs", "central", "cilium"), "AccessPolicy bookinfo/details-by-region")
		if body == nil {
			return ""
		}
		clusters := ciliumClientClusters(body)
		if len(clusters) == 0 {
			return "none"
		}
		return strings.Join(clusters, ",")
	}
	want := func(what, clusters string) {
		t.Helper()
		testutil.EventuallyWhy(t, what, func() (bool, string) {
			got := admitted()
			return got == clusters, got
		})
	}
	want("central's Cilium policy admitting the clients of the clusters labelled region=eu", "central,east")

	cli("cluster", "label", "west", "region=eu")
	want("west's clients admitted after it was labelled region=eu", "central,east,west")

	// The edit to a selector matching no cluster, previewed live and
	// offline over the same fleet and labels.
	clusters := t.TempDir()
	for _, c := range slices.Sorted(maps.Keys(labels)) {
		copyFile(t, filepath.Join(root, "testdata", "demo", "clusters", c, "cluster.yaml"), filepath.Join(clusters, c, "cluster.yaml"))
	}
	labels["west"] = "eu"
	var ly strings.Builder
	for _, c := range slices.Sorted(maps.Keys(labels)) {
		fmt.Fprintf(&ly, "%s: {region: %s}\n", c, labels[c])
	}
	if err := os.WriteFile(filepath.Join(clusters, "labels.yaml"), []byte(ly.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	none := filepath.Join(t.TempDir(), "none.yaml")
	if err := os.WriteFile(none, []byte(policy("mars")), 0o644); err != nil {
		t.Fatal(err)
	}
	var reports [2]preview.Report
	for i, where := range [][]string{admin, {"--log-level", "error", "--clusters", clusters,
		"--policies", filepath.Join(out, "policies"), "--plugin-dir", filepath.Join(out, "plugins")}} {
		o, err := run(t, append([]string{"diff", "-o", "json", "-f", none}, where...)...)
		if codeOf(err) != 1 {
			t.Fatalf("meshrelay diff %v: exit %d (%v), want 1\n%s", where, codeOf(err), err, o)
		}
		if err := json.Unmarshal([]byte(o), &reports[i]); err != nil {
			t.Fatalf("decode %s: %v", o, err)
		}
	}
	if diff := cmp.Diff(reports[0], reports[1]); diff != "" {
		t.Errorf("live and offline answers differ (-live +offline):\n%s", diff)
	}
	if !hasChange(&reports[0], "changed", "CiliumNetworkPolicy", "io.cilium.k8s.policy.cluster") {
		t.Errorf("the diff does not drop the client clusters from central's Cilium policy: %+v", reports[0].Outputs)
	}
	if !slices.ContainsFunc(reports[0].DiagnosticsAdded, func(d preview.Diagnostic) bool {
		return d.Path == "spec.from[0].clusterSelector" && strings.EqualFold(d.Severity, "warning")
	}) {
		t.Errorf("the diff adds no warning that the clusterSelector matches no cluster: %+v", reports[0].DiagnosticsAdded)
	}

	// Applied: no client is admitted, by Cilium or by Istio.
	if err := os.WriteFile(filepath.Join(out, "policies", "details-by-region.yaml"), []byte(policy("mars")), 0o644); err != nil {
		t.Fatal(err)
	}
	want("no client admitted by a clusterSelector matching no cluster", "none")
	testutil.EventuallyWhy(t, "east's AuthorizationPolicy without rules", func() (bool, string) {
		body := appliedOutput(t, filepath.Join(out, "outputs", "east", "istio"), "name: details-by-region")
		return body != nil && !strings.Contains(string(body), "rules:"), string(body)
	})
}

// appliedOutput returns the first output file under dir containing text,
// nil when there is none.
func appliedOutput(t *testing.T, dir, text string) []byte {
	t.Helper()
	var found []byte
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || found != nil {
			return nil
		}
		if b, err := os.ReadFile(path); err == nil && strings.Contains(string(b), text) {
			found = b
		}
		return nil
	})
	return found
}

// ciliumClusterLabel is the label of a Cilium identity naming its cluster.
const ciliumClusterLabel = "k8s:io.cilium.k8s.policy.cluster"

// ciliumClientClusters returns the clusters a Cilium policy's
// fromEndpoints selectors name, sorted; a requirement on the cluster label
// other than In adds its operator (Exists: any cluster).
func ciliumClientClusters(body []byte) []string {
	var doc any
	if err := yaml.Unmarshal(body, &doc); err != nil {
		return []string{"unreadable: " + err.Error()}
	}
	var out []string
	var walk func(v any, from bool)
	walk = func(v any, from bool) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				switch {
				case from && k == "matchLabels":
					if c, ok := e.(map[string]any)[ciliumClusterLabel].(string); ok {
						out = append(out, c)
					}
				case from && k == "matchExpressions":
					rs, _ := e.([]any)
					for _, r := range rs {
						r, _ := r.(map[string]any)
						if r["key"] != ciliumClusterLabel {
							continue
						}
						if r["operator"] != "In" {
							out = append(out, fmt.Sprint(r["operator"]))
						}
						vs, _ := r["values"].([]any)
						for _, c := range vs {
							out = append(out, fmt.Sprint(c))
						}
					}
				default:
					walk(e, from || k == "fromEndpoints")
				}
			}
		case []any:
			for _, e := range v {
				walk(e, from)
			}
		}
	}
	walk(doc, false)
	slices.Sort(out)
	return slices.Compact(out)
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// serveTreeDemo serves the demo with the plugins built from this tree,
// returning the tree's root, the admin flags and the demo's output
// directory.
func serveTreeDemo(t *testing.T) (root string, admin []string, out string) {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	bins := t.TempDir()
	if _, err := pluginhost.BuildBinaries(t.Context(), root, bins, demo.Plugins); err != nil {
		t.Fatalf("build the plugins: %v", err)
	}
	admin, out = serveDemoOut(t, bins)
	return root, admin, out
}

// adminCLI runs meshrelay with the admin flags, failing the test on error.
func adminCLI(t *testing.T, admin []string) func(args ...string) string {
	return func(args ...string) string {
		t.Helper()
		o, err := run(t, append(args, admin...)...)
		if err != nil {
			t.Fatalf("meshrelay %s: %v\n%s", strings.Join(args, " "), err, o)
		}
		return o
	}
}
