package server

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/meshrelay/meshrelay/core/pluginhost"
	"github.com/meshrelay/meshrelay/core/store/memory"
	"github.com/meshrelay/meshrelay/internal/testenv"
	"github.com/meshrelay/meshrelay/internal/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// A policy in a real management cluster round-trips: the server reads it
// through informers and writes its folded status back to the status
// subresource — Accepted for a good policy, Invalid with the field at
// fault for a bad one.
func TestKubePolicyStatusRoundTrip(t *testing.T) {
	k := testenv.StartKube(t)
	k.InstallCRDs(t, "deploy/crds")
	dyn := k.Dynamic(t)
	ctx := context.Background()

	if _, err := dyn.Resource(nsGVR).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "bookinfo"},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	good := readPolicy(t, "reviews-traffic.yaml")
	bad := readPolicy(t, "reviews-traffic.yaml")
	bad.SetName("reviews-bad-weights")
	route := bad.Object["spec"].(map[string]any)["http"].([]any)[0].(map[string]any)["route"].([]any)
	route[0].(map[string]any)["weight"] = int64(90) // 90+30+20 != 100
	gvr := policyKinds["TrafficPolicy"]
	for _, p := range []*unstructured.Unstructured{good, bad} {
		if _, err := dyn.Resource(gvr).Namespace("bookinfo").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s: %v", p.GetName(), err)
		}
	}

	kp, err := NewKubePolicies(k.Config(), nil)
	if err != nil {
		t.Fatal(err)
	}
	kp.log = discardLogger()
	opts := DefaultOptions()
	opts.ListenAddr, opts.AdminAddr, opts.DataDir = "127.0.0.1:0", "", t.TempDir()
	opts.Heartbeat = 200 * time.Millisecond
	s, err := New(ctx, opts, Deps{Store: memory.New(), Translators: []pluginhost.Translator{newEcho()}, Policies: kp})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(runCtx) }()
	t.Cleanup(func() { cancel(); <-done })

	state := func(name string) (string, []any) {
		u, err := dyn.Resource(gvr).Namespace("bookinfo").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		st, _ := u.Object["status"].(map[string]any)
		s, _ := st["state"].(string)
		diags, _ := st["diagnostics"].([]any)
		return s, diags
	}
	testutil.Eventually(t, "status written back", func() bool {
		g, _ := state("reviews-split")
		b, _ := state("reviews-bad-weights")
		return g == "Accepted" && b == "Invalid"
	})
	_, diags := state("reviews-bad-weights")
	if len(diags) == 0 || diags[0].(map[string]any)["path"] == "" {
		t.Fatalf("invalid policy's diagnostics = %v, want one naming the field", diags)
	}
	if path := diags[0].(map[string]any)["path"]; path != "spec.http[0].route" {
		t.Errorf("diagnostic path = %v, want spec.http[0].route", path)
	}

	// Fixing the policy flips it to Accepted.
	u, err := dyn.Resource(gvr).Namespace("bookinfo").Get(ctx, "reviews-bad-weights", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	route = u.Object["spec"].(map[string]any)["http"].([]any)[0].(map[string]any)["route"].([]any)
	route[0].(map[string]any)["weight"] = int64(50)
	if _, err := dyn.Resource(gvr).Namespace("bookinfo").Update(ctx, u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the fixed policy to be accepted", func() bool {
		s, _ := state("reviews-bad-weights")
		return s == "Accepted"
	})
}

func readPolicy(t *testing.T, name string) *unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "testdata", "policies", name))
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := yaml.Unmarshal(data, &obj); err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: obj}
}
