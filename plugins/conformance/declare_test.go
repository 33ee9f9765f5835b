package conformance_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/plugins/cilium"
	"github.com/meshrelay/meshrelay/plugins/envoy"
	"github.com/meshrelay/meshrelay/plugins/gatewayapi"
	"github.com/meshrelay/meshrelay/plugins/istio"
	"github.com/meshrelay/meshrelay/sdk"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"
)

// TestDeclarationsCoverGoldenOutputs checks what each plugin declares
// against what its golden files show it emitting: agents prune only the
// declared output kinds, so a kind emitted but not declared would never be
// pruned after an agent restart; and each mesh backend needs its mesh
// (gatewayapi is no mesh: it serves the meshes implementing the Gateway
// API's mesh profile, so it needs none and chooses its targets itself).
func TestDeclarationsCoverGoldenOutputs(t *testing.T) {
	for name, tr := range map[string]sdk.Translator{"istio": istio.New(), "envoy": envoy.New(), "cilium": cilium.New(), "gatewayapi": gatewayapi.New()} {
		t.Run(name, func(t *testing.T) {
			d := tr.Describe()
			want := d.Backends
			if name == "gatewayapi" {
				want = nil
			}
			if !slices.Equal(d.Meshes, want) {
				t.Errorf("Describe().Meshes = %v, want %v", d.Meshes, want)
			}
			goldens, err := filepath.Glob(filepath.Join("..", name, "testdata", "*.golden.yaml"))
			if err != nil || len(goldens) == 0 {
				t.Fatalf("no golden files for %s: %v", name, err)
			}
			emitted := map[string]string{}
			for _, path := range goldens {
				for _, k := range goldenKinds(t, path) {
					emitted[k] = filepath.Base(path)
				}
			}
			for kind, file := range emitted {
				if !slices.Contains(d.OutputKinds, kind) {
					t.Errorf("%s emits %s (%s) but does not declare it in OutputKinds %v", name, kind, file, d.OutputKinds)
				}
			}
		})
	}
}

// goldenKinds returns the "group/Kind" of every output object in a golden file.
func goldenKinds(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var golden struct {
		Outputs []struct {
			Objects []struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
			} `json:"objects"`
		} `json:"outputs"`
	}
	if err := yaml.Unmarshal(data, &golden); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var kinds []string
	for _, o := range golden.Outputs {
		for _, obj := range o.Objects {
			gv, err := schema.ParseGroupVersion(obj.APIVersion)
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			kinds = append(kinds, snapshot.GroupKind{Group: gv.Group, Kind: obj.Kind}.String())
		}
	}
	return kinds
}
