package gatewayapi_test

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/meshrelay/meshrelay/sdk/sdktest"
)

// TestPluginProcess builds meshrelay-plugin-gatewayapi and runs it as the
// host does, through go-plugin: its answers must equal the goldens.
func TestPluginProcess(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "meshrelay-plugin-gatewayapi")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/meshrelay/meshrelay/cmd/meshrelay-plugin-gatewayapi")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build plugin: %v\n%s", err, out)
	}
	for _, name := range goldenCases(t) {
		t.Run(name, func(t *testing.T) {
			sdktest.Golden(t, name, sdktest.RunPlugin(t, bin, fixturePath(name)))
		})
	}
}
