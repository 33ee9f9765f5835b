package gatewayapi_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshrelay/meshrelay/plugins/gatewayapi"
	"github.com/meshrelay/meshrelay/sdk/sdktest"
)

// goldenCases returns the names of the fixtures testdata/<case>.yaml.
func goldenCases(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range files {
		if !strings.HasSuffix(f, ".golden.yaml") {
			out = append(out, strings.TrimSuffix(filepath.Base(f), ".yaml"))
		}
	}
	if len(out) == 0 {
		t.Fatal("no fixtures in testdata")
	}
	return out
}

func fixturePath(name string) string { return filepath.Join("testdata", name+".yaml") }

// TestGolden runs the translator in process on every fixture and compares
// its answer with testdata/<case>.golden.yaml (-update rewrites them).
func TestGolden(t *testing.T) {
	for _, name := range goldenCases(t) {
		t.Run(name, func(t *testing.T) {
			got := sdktest.Run(t, gatewayapi.New(), fixturePath(name))
			sdktest.Golden(t, name, got)
		})
	}
}
