package cilium

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshrelay/meshrelay/internal/testenv"
	"github.com/meshrelay/meshrelay/sdk/sdktest"
	"sigs.k8s.io/yaml"
)

func TestMain(m *testing.M) { testenv.Main(m) }

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
			got := sdktest.Run(t, New(), fixturePath(name))
			sdktest.Golden(t, name, got)
		})
	}
}

// TestGoldenDeterministic checks that translating the same fleet twice
// gives the same bytes.
func TestGoldenDeterministic(t *testing.T) {
	for _, name := range goldenCases(t) {
		first, err := sdktest.Marshal(sdktest.Run(t, New(), fixturePath(name)))
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			again, err := sdktest.Marshal(sdktest.Run(t, New(), fixturePath(name)))
			if err != nil {
				t.Fatal(err)
			}
			if string(again) != string(first) {
				t.Fatalf("Translate(%q) differs between runs", name)
			}
		}
	}
}

// pluginBinary builds cmd/meshrelay-plugin-cilium into the test's
// temporary directory.
func pluginBinary(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "meshrelay-plugin-cilium")
	cmd := exec.Command("go", "build", "-o", path, "github.com/meshrelay/meshrelay/cmd/meshrelay-plugin-cilium")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build plugin: %v\n%s", err, out)
	}
	return path
}

// TestGoldenPlugin runs the real plugin process, started through
// go-plugin as the host starts it, on every fixture: its answers must be
// the golden files too.
func TestGoldenPlugin(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the plugin binary")
	}
	bin := pluginBinary(t)
	for _, name := range goldenCases(t) {
		t.Run(name, func(t *testing.T) {
			got := sdktest.RunPlugin(t, bin, fixturePath(name))
			sdktest.Golden(t, name, got)
		})
	}
}

// goldenObject is one emitted object of a golden file.
type goldenObject struct {
	Cluster string
	Object  map[string]any
}

// readGolden returns the objects of testdata/<name>.golden.yaml.
func readGolden(t *testing.T, name string) []goldenObject {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name+".golden.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		Outputs []struct {
			Cluster string           `json:"cluster"`
			Backend string           `json:"backend"`
			Objects []map[string]any `json:"objects"`
		} `json:"outputs"`
	}
	if err := yaml.Unmarshal(data, &g); err != nil {
		t.Fatalf("read golden %s: %v", name, err)
	}
	var out []goldenObject
	for _, o := range g.Outputs {
		if o.Backend != Backend {
			t.Fatalf("golden %s: output for backend %q, want %q", name, o.Backend, Backend)
		}
		for _, obj := range o.Objects {
			out = append(out, goldenObject{Cluster: o.Cluster, Object: obj})
		}
	}
	return out
}

// isCiliumPolicy reports whether obj is a CiliumNetworkPolicy or
// CiliumClusterwideNetworkPolicy.
func isCiliumPolicy(obj map[string]any) bool {
	return obj["apiVersion"] == APIVersion && (obj["kind"] == KindNetworkPolicy || obj["kind"] == KindClusterwidePolicy)
}

// TestGoldenInvariants checks, without Cilium's code, what every emitted
// rule must hold: the sanitizer's structural demands (an ingress section,
// an endpoint selector, at most 40 ports per port rule, HTTP rules on TCP
// only) and the translator's own (no rule admits every peer, a rule with
// no peers and no ports sets enableDefaultDeny.ingress, names fit in 63
// characters).
func TestGoldenInvariants(t *testing.T) {
	for _, name := range goldenCases(t) {
		for _, o := range readGolden(t, name) {
			data, err := json.Marshal(o.Object)
			if err != nil {
				t.Fatal(err)
			}
			var p networkPolicy
			if err := json.Unmarshal(data, &p); err != nil {
				t.Fatal(err)
			}
			where := fmt.Sprintf("%s: %s %s/%s in %s", name, p.Kind, p.Namespace, p.Name, o.Cluster)
			if len(p.Name) > maxNameLength {
				t.Errorf("%s: name longer than %d", where, maxNameLength)
			}
			if !isCiliumPolicy(o.Object) {
				continue
			}
			raws, _ := o.Object["specs"].([]any)
			if spec, ok := o.Object["spec"]; ok {
				raws = append(raws, spec)
			}
			for _, raw := range raws {
				if m, _ := raw.(map[string]any); m["endpointSelector"] == nil {
					t.Errorf("%s: rule without endpointSelector", where)
				}
			}
			for _, r := range p.rules() {
				if len(r.Ingress) == 0 {
					t.Errorf("%s: rule %q has no ingress section", where, r.Description)
				}
				for _, in := range r.Ingress {
					if in.FromEndpoints == nil && len(in.ToPorts) > 0 {
						t.Errorf("%s: rule %q admits every peer on its ports", where, r.Description)
					}
					if in.FromEndpoints == nil && len(in.ToPorts) == 0 &&
						(r.EnableDefaultDeny == nil || r.EnableDefaultDeny.Ingress == nil || !*r.EnableDefaultDeny.Ingress) {
						t.Errorf("%s: deny rule %q does not say enableDefaultDeny.ingress", where, r.Description)
					}
					for _, pr := range in.ToPorts {
						if len(pr.Ports) == 0 || len(pr.Ports) > maxPortsPerRule {
							t.Errorf("%s: rule %q has a port rule with %d ports", where, r.Description, len(pr.Ports))
						}
						for _, pp := range pr.Ports {
							if pr.Rules != nil && pp.Protocol != protocolTCP {
								t.Errorf("%s: rule %q has HTTP rules on %s", where, r.Description, pp.Protocol)
							}
						}
					}
				}
			}
		}
	}
}
