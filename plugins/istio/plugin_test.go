package istio_test

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/meshrelay/meshrelay/sdk/sdktest"
)

// TestPluginProcess builds meshrelay-plugin-istio and runs it as the host
// does, through go-plugin, on the bookinfo and diagnostics fixtures: the
// answers must equal the in-process golden files.
func TestPluginProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the plugin binary")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("build plugin: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "meshrelay-plugin-istio")
	build := exec.Command(goBin, "build", "-o", bin, "github.com/meshrelay/meshrelay/cmd/meshrelay-plugin-istio")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build plugin: %v\n%s", err, out)
	}
	for _, name := range []string{"bookinfo", "diagnostics"} {
		t.Run(name, func(t *testing.T) {
			got := sdktest.RunPlugin(t, bin, filepath.Join("testdata", name+".yaml"))
			sdktest.Golden(t, name, got)
		})
	}
}
