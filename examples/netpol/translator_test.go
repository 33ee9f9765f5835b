package main

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"slices"
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

// TestIncremental adds a Service to one cluster and checks that only that
// target is computed again, and that the outputs after every step equal a
// full translation.
func TestIncremental(t *testing.T) {
	base, err := sdktest.LoadFixture("testdata/basic.yaml")
	if err != nil {
		t.Fatal(err)
	}
	changed := withObject(base, "west", `{"apiVersion": "v1", "kind": "Service",
		"metadata": {"name": "admin", "namespace": "shop"},
		"spec": {"selector": {"app": "admin"}, "ports": [{"port": 80}]}}`)
	s := sdktest.NewSession(t, &Translator{})
	s.Update(base)
	s.Update(changed)
	if got := s.Computed(); !slices.Equal(got, []string{"west"}) {
		t.Errorf("a new Service in west computed %v, want [west]", got)
	}
	sdktest.CheckIncremental(t, &Translator{}, base, changed, base)
}

// withObject returns a copy of f with the JSON object obj added to the
// inputs of the named cluster.
func withObject(f *sdktest.Fixture, cluster, obj string) *sdktest.Fixture {
	out := &sdktest.Fixture{Policies: f.Policies}
	for _, c := range f.Clusters {
		if c.Name == cluster {
			c.Objects = append(slices.Clone(c.Objects), json.RawMessage(obj))
		}
		out.Clusters = append(out.Clusters, c)
	}
	return out
}
