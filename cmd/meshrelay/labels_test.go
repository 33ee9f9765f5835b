package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/meshrelay/meshrelay/core/pluginhost"
	"github.com/meshrelay/meshrelay/internal/demo"
	"github.com/meshrelay/meshrelay/internal/testutil"
)

// A policy whose destination selector picks clusters by label reaches the
// clusters the labels select, and follows relabelling, end to end: the
// demo fleet's real agents and real plugin processes (Istio in east and
// west, Cilium in central), labels set with meshrelay cluster label,
// outputs read back with meshrelay get outputs.
func TestClusterSelectorEndToEnd(t *testing.T) {
	// The plugins built from this tree: they must know clusterSelector.
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	bins := t.TempDir()
	if _, err := pluginhost.BuildBinaries(t.Context(), root, bins, demo.Plugins); err != nil {
		t.Fatalf("build the plugins: %v", err)
	}
	admin, out := serveDemoOut(t, bins)
	cli := func(args ...string) string {
		t.Helper()
		o, err := run(t, append(args, admin...)...)
		if err != nil {
			t.Fatalf("meshrelay %s: %v\n%s", strings.Join(args, " "), err, o)
		}
		return o
	}
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
