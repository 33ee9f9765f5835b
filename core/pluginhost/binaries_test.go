package pluginhost

import (
	"os"
	"path/filepath"
	"testing"
)

func TestFindBinariesTakesTheFirstCompleteDirectory(t *testing.T) {
	partial, complete := t.TempDir(), t.TempDir()
	touch := func(dir, name string) {
		if err := os.WriteFile(filepath.Join(dir, BinaryPrefix+name), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	touch(partial, "istio")
	touch(complete, "istio")
	touch(complete, "envoy")
	if err := os.Mkdir(filepath.Join(partial, BinaryPrefix+"envoy"), 0o755); err != nil {
		t.Fatal(err) // a directory of that name is not a binary
	}
	got, ok := FindBinaries([]string{"istio", "envoy"}, "", partial, complete)
	if !ok || got["istio"] != filepath.Join(complete, BinaryPrefix+"istio") || got["envoy"] != filepath.Join(complete, BinaryPrefix+"envoy") {
		t.Fatalf("FindBinaries = %v, %v; want both from %s", got, ok, complete)
	}
	if _, ok := FindBinaries([]string{"istio", "cilium"}, partial, complete); ok {
		t.Error("FindBinaries found a set no directory holds")
	}
}
