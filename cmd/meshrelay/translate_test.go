package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/meshrelay/meshrelay/core/pluginhost"
)

// translate --out writes every output, and a resource it cannot write (a
// directory stands where its file goes, which stops root too) fails the
// command with exit code 1 and an error naming it.
func TestTranslateOutUnwritable(t *testing.T) {
	pluginDir := istioPluginDir(t)
	out := filepath.Join(t.TempDir(), "out")
	args := []string{"translate", "--clusters", "../../testdata/demo/clusters", "--policies", "../../testdata/policies",
		"--plugin-dir", pluginDir, "--out", out, "--log-level", "error"}
	if logs, err := run(t, args...); err != nil {
		t.Fatalf("translate --out = %v\n%s", err, logs)
	}
	const file = "virtualservice.networking.istio.io_bookinfo_reviews-split-reviews.yaml"
	path := filepath.Join(out, "east", "istio", file)
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("translate --out did not write %s: %v", file, err)
	}

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatal(err)
	}
	logs, err := run(t, args...)
	if err == nil {
		t.Fatalf("translate --out with %s unwritable succeeded\n%s", file, logs)
	}
	if code := exitCode(err); code != 1 {
		t.Errorf("exit code = %d, want 1", code)
	}
	if want := "networking.istio.io/v1/VirtualService/bookinfo/reviews-split-reviews"; !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "cluster east, backend istio") {
		t.Errorf("error = %v, want it to name east's istio %s", err, want)
	}
	if strings.Contains(logs, "wrote ") {
		t.Errorf("translate reports it wrote the outputs:\n%s", logs)
	}
	// The other outputs were still written.
	if _, err := os.Stat(filepath.Join(out, "west", "istio", file)); err != nil {
		t.Errorf("west's output: %v", err)
	}
}

var istioPlugin struct {
	once      sync.Once
	work, dir string
	err       error
}

// istioPluginDir builds the Istio plugin once per test binary and returns
// a plugin directory with it installed.
func istioPluginDir(t *testing.T) string {
	t.Helper()
	istioPlugin.once.Do(func() {
		work, err := os.MkdirTemp("", "meshrelay-translate-test")
		if err != nil {
			istioPlugin.err = err
			return
		}
		istioPlugin.work = work
		bins, err := pluginhost.BuildBinaries(context.Background(), "../..", work, []string{"istio"})
		if err != nil {
			istioPlugin.err = err
			return
		}
		istioPlugin.dir = filepath.Join(work, "plugins")
		_, istioPlugin.err = pluginhost.Install(istioPlugin.dir, bins["istio"], "")
	})
	if istioPlugin.err != nil {
		t.Fatal(istioPlugin.err)
	}
	return istioPlugin.dir
}

// A policy defined in a workload cluster applies to that cluster only:
// west's AccessPolicy naming east's productpage changes nothing in east and
// says why, through the real Istio plugin process. The same policy from the
// management source does reach east, so the test can tell the difference.
func TestTranslateConfinesWorkloadClusterPolicies(t *testing.T) {
	const attacker = "/ns/bookinfo/sa/bookinfo-attacker"
	policy := []byte(`apiVersion: policy.meshrelay.io/v1alpha1
kind: AccessPolicy
metadata:
  name: take-over-productpage
  namespace: bookinfo
spec:
  destinationSelectors:
  - clusters: [east]
    namespaces: [bookinfo]
    names: [productpage]
  action: Allow
  from:
  - serviceAccounts:
    - {cluster: west, namespace: bookinfo, name: bookinfo-attacker}
`)
	// translate runs the command and returns east's Istio outputs and what
	// it printed. A policy refused for its tenancy is an error diagnostic,
	// so the command fails then, after writing the outputs.
	translate := func(t *testing.T, inWest bool) (eastOutputs, logs string) {
		t.Helper()
		work := t.TempDir()
		clusters, policies := filepath.Join(work, "clusters"), filepath.Join(work, "policies")
		if err := os.CopyFS(clusters, os.DirFS("../../testdata/demo/clusters")); err != nil {
			t.Fatal(err)
		}
		if err := os.CopyFS(policies, os.DirFS("../../testdata/policies")); err != nil {
			t.Fatal(err)
		}
		dir := policies
		if inWest {
			dir = filepath.Join(clusters, "west")
		}
		if err := os.WriteFile(filepath.Join(dir, "take-over.yaml"), policy, 0o644); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(work, "out")
		logs, err := run(t, "translate", "--clusters", clusters, "--policies", policies,
			"--plugin-dir", istioPluginDir(t), "--out", out, "--log-level", "error")
		if err != nil {
			logs += "\n" + err.Error()
		}
		if err != nil && !inWest {
			t.Fatalf("translate = %v", logs)
		}
		var b strings.Builder
		files, err := filepath.Glob(filepath.Join(out, "east", "istio", "*.yaml"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no east outputs (%v)", err)
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			b.Write(data)
		}
		return b.String(), logs
	}
	t.Run("from the management source", func(t *testing.T) {
		east, _ := translate(t, false)
		if !strings.Contains(east, attacker) {
			t.Fatalf("east's outputs do not allow %s, though the management source's policy selects east", attacker)
		}
	})
	t.Run("from west", func(t *testing.T) {
		east, logs := translate(t, true)
		if strings.Contains(east, attacker) || strings.Contains(east, "take-over-productpage") {
			t.Errorf("a policy defined in west changed east's outputs:\n%s", east)
		}
		if !strings.Contains(logs, "outside the tenancy") || !strings.Contains(logs, "take-over-productpage") {
			t.Errorf("translate did not report the policy outside its tenancy:\n%s", logs)
		}
	})
}

// TestMain removes the plugin build istioPluginDir made.
func TestMain(m *testing.M) {
	code := m.Run()
	if istioPlugin.work != "" {
		os.RemoveAll(istioPlugin.work)
	}
	os.Exit(code)
}
