package envoy_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshrelay/meshrelay/api/xds"
	"github.com/meshrelay/meshrelay/plugins/envoy"
	"github.com/meshrelay/meshrelay/sdk/sdktest"
)

// cases are the golden fixtures under testdata.
func cases(t testing.TB) []string {
	paths, err := filepath.Glob("testdata/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range paths {
		if !strings.HasSuffix(p, ".golden.yaml") {
			out = append(out, strings.TrimSuffix(filepath.Base(p), ".yaml"))
		}
	}
	if len(out) == 0 {
		t.Fatal("no fixtures in testdata")
	}
	return out
}

func TestGolden(t *testing.T) {
	for _, name := range cases(t) {
		t.Run(name, func(t *testing.T) {
			got := sdktest.Run(t, envoy.New(), filepath.Join("testdata", name+".yaml"))
			sdktest.Golden(t, name, got)
			checkResult(t, got)
			again := sdktest.Run(t, envoy.New(), filepath.Join("testdata", name+".yaml"))
			a, _ := sdktest.Marshal(got)
			b, _ := sdktest.Marshal(again)
			if !bytes.Equal(a, b) {
				t.Errorf("Translate(%q) is not deterministic", name)
			}
		})
	}
}

// checkResult decodes (and so validates) every output and checks each
// node group's set with CheckNode.
func checkResult(t *testing.T, got *sdktest.Result) {
	t.Helper()
	nodes := map[string][]xds.Resource{}
	for _, o := range got.Outputs {
		if o.Backend != envoy.Backend {
			t.Errorf("output %s/%s has backend %q", o.Kind, o.Name, o.Backend)
		}
		r, err := xds.Decode(o.Body)
		if err != nil {
			t.Errorf("Decode(%s %s/%s) = %v", o.Kind, o.Namespace, o.Name, err)
			continue
		}
		key := o.Cluster + "/" + r.NodeID
		nodes[key] = append(nodes[key], r)
	}
	for key, rs := range nodes {
		if err := envoy.CheckNode(rs); err != nil {
			t.Errorf("node %s: CheckNode = %v", key, err)
		}
	}
}

// TestPlugin runs the real plugin binary through go-plugin and expects the
// same answer as in process.
func TestPlugin(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the plugin binary")
	}
	bin := filepath.Join(t.TempDir(), "meshrelay-plugin-envoy")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/meshrelay/meshrelay/cmd/meshrelay-plugin-envoy")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("build plugin: %v", err)
	}
	fixture := filepath.Join("testdata", "virtualdestination.yaml")
	got := sdktest.RunPlugin(t, bin, fixture)
	want := sdktest.Run(t, envoy.New(), fixture)
	a, _ := sdktest.Marshal(want)
	b, _ := sdktest.Marshal(got)
	if !bytes.Equal(a, b) {
		t.Errorf("plugin process answered differently from in process:\n%s\nwant\n%s", b, a)
	}
	if len(got.Outputs) == 0 {
		t.Error("plugin emitted nothing")
	}
}
