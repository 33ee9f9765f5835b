package main

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/meshrelay/meshrelay/sdk/sdktest"
)

func TestGolden(t *testing.T) {
	got := sdktest.Run(t, &Translator{}, "testdata/basic.yaml")
	sdktest.Golden(t, "basic", got)
}

// TestPluginProcess runs the same fixture through a real plugin process
// and expects the same answer as in process.
func TestPluginProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the plugin")
	}
	bin := filepath.Join(t.TempDir(), "meshrelay-plugin-netpol")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	got := sdktest.RunPlugin(t, bin, "testdata/basic.yaml")
	sdktest.Golden(t, "basic", got)
}
