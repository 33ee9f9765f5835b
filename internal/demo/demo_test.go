package demo

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The demo runs end to end with the real plugin binaries: every backend
// gets outputs in the clusters where its mesh runs, every policy is
// accepted and applied, the policy edit reaches the outputs it should, and
// the outputs land as files.
func TestDemo(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	args := []string{"build", "-o", bin + string(filepath.Separator)}
	for _, p := range Plugins {
		args = append(args, "./cmd/meshrelay-plugin-"+p)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build plugins: %v\n%s", err, out)
	}

	var stdout bytes.Buffer
	out := filepath.Join(t.TempDir(), "demo")
	report, err := Run(context.Background(), Options{Root: root, Out: out, PluginDir: bin, Stdout: &stdout, StagedRollout: true})
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, stdout.String())
	}
	for _, key := range []string{"east/istio", "west/istio", "west/envoy", "central/cilium", "north/gatewayapi"} {
		if len(report.Outputs[key]) == 0 {
			t.Errorf("no %s output; outputs: %v", key, report.Outputs)
		}
	}
	for key := range report.Outputs {
		if strings.HasPrefix(key, "central/istio") || strings.HasPrefix(key, "east/cilium") || strings.HasPrefix(key, "east/envoy") ||
			strings.HasPrefix(key, "north/istio") || strings.HasPrefix(key, "east/gatewayapi") {
			t.Errorf("output %s for a mesh the cluster does not run", key)
		}
	}
	for _, p := range report.Status.GetPolicies() {
		if p.GetState() != "Accepted" || p.GetAppliedClusters() != p.GetTargetClusters() || p.GetTargetClusters() == 0 {
			t.Errorf("policy %s/%s: %s, applied in %d/%d", p.GetKind(), p.GetName(), p.GetState(), p.GetAppliedClusters(), p.GetTargetClusters())
		}
	}
	for _, want := range []string{"east/istio", "west/envoy"} {
		if !slices.Contains(report.Changed, want) {
			t.Errorf("the weight edit did not change %s (changed: %v)", want, report.Changed)
		}
	}
	if slices.Contains(report.Changed, "central/cilium") {
		t.Error("the TrafficPolicy edit changed Cilium's output, which it does not touch")
	}
	files, err := filepath.Glob(filepath.Join(out, "outputs", "east", "istio", "*"))
	if err != nil || len(files) != len(report.Outputs["east/istio"]) {
		t.Errorf("east/istio files = %d, want %d", len(files), len(report.Outputs["east/istio"]))
	}
	if _, err := os.Stat(filepath.Join(out, "policies", "rollout-strategy.yaml")); !os.IsNotExist(err) {
		t.Errorf("the demo left its RolloutStrategy in place after the rollout: %v", err)
	}
	vs, err := os.ReadFile(filepath.Join(out, "policies", "reviews-traffic.yaml"))
	if err != nil || !strings.Contains(string(vs), "weight: 30") {
		t.Errorf("the demo did not make its second edit to its copy of the policy")
	}
	if _, err := os.Stat(filepath.Join(root, "testdata", "policies", "rollout-strategy.yaml")); !os.IsNotExist(err) {
		t.Errorf("the demo wrote into the source tree's policies: %v", err)
	}
	checkTrust(t, report, out, stdout.String())
	checkRollout(t, report)
	if !strings.Contains(stdout.String(), "Demo finished cleanly") {
		t.Errorf("the demo's report does not end cleanly:\n%s", stdout.String())
	}
}

// checkRollout checks the demo's staged rollout: the canary ring (east)
// changed while the main ring waited for approval, and west's Envoy
// output changed only once the main ring was approved.
func checkRollout(t *testing.T, report *Report) {
	t.Helper()
	r := report.Rollout
	if r == nil {
		t.Fatal("the demo reported no staged rollout")
	}
	if !slices.Contains(r.Canary, "east/istio") || slices.ContainsFunc(r.Canary, func(k string) bool { return !strings.HasPrefix(k, "east/") }) {
		t.Errorf("outputs changed before approval: %v, want east's only, east/istio among them", r.Canary)
	}
	if !slices.Contains(r.HeldBack, "west/envoy") {
		t.Errorf("outputs changed after approval: %v, want west/envoy among them", r.HeldBack)
	}
	if st := r.Status; st.GetPhase() != "Completed" || st.GetHealthy() != st.GetTotal() || st.GetTotal() != 4 {
		t.Errorf("rollout %s with %d/%d healthy, want Completed with all 4", st.GetPhase(), st.GetHealthy(), st.GetTotal())
	}
}
