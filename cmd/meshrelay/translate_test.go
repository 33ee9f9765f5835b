package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshrelay/meshrelay/core/pluginhost"
)

// translate --out writes every output, and a resource it cannot write (a
// directory stands where its file goes, which stops root too) fails the
// command with exit code 1 and an error naming it.
func TestTranslateOutUnwritable(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the Istio plugin")
	}
	work := t.TempDir()
	bin := filepath.Join(work, "meshrelay-plugin-istio")
	if out, err := exec.Command("go", "build", "-o", bin, "../meshrelay-plugin-istio").CombinedOutput(); err != nil {
		t.Fatalf("build plugin: %v\n%s", err, out)
	}
	pluginDir := filepath.Join(work, "plugins")
	if _, err := pluginhost.Install(pluginDir, bin, ""); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(work, "out")
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
