package sdktest

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"
)

func init() {
	if flag.Lookup("update") == nil {
		flag.Bool("update", false, "rewrite golden files under testdata/")
	}
}

func updating() bool {
	f := flag.Lookup("update")
	return f != nil && f.Value.String() == "true"
}

type goldenFile struct {
	Outputs     []goldenOutput     `json:"outputs"`
	Diagnostics []goldenDiagnostic `json:"diagnostics"`
}

type goldenOutput struct {
	Cluster string `json:"cluster"`
	Backend string `json:"backend"`
	Objects []any  `json:"objects"`
}

type goldenDiagnostic struct {
	Severity string `json:"severity"`
	Policy   string `json:"policy,omitempty"`
	Cluster  string `json:"cluster,omitempty"`
	Path     string `json:"path,omitempty"`
	Summary  string `json:"summary"`
	Detail   string `json:"detail,omitempty"`
}

// Marshal returns the deterministic YAML of a result: outputs grouped by
// cluster and backend, each object with sorted keys, then diagnostics.
func Marshal(r *Result) ([]byte, error) {
	g := goldenFile{Outputs: []goldenOutput{}, Diagnostics: []goldenDiagnostic{}}
	for _, o := range r.Outputs {
		if n := len(g.Outputs); n == 0 || g.Outputs[n-1].Cluster != o.Cluster || g.Outputs[n-1].Backend != o.Backend {
			g.Outputs = append(g.Outputs, goldenOutput{Cluster: o.Cluster, Backend: o.Backend})
		}
		var obj any
		if err := json.Unmarshal(o.Body, &obj); err != nil {
			return nil, err
		}
		last := &g.Outputs[len(g.Outputs)-1]
		last.Objects = append(last.Objects, obj)
	}
	for _, d := range r.Diagnostics {
		gd := goldenDiagnostic{Severity: d.Severity.String(), Cluster: d.Cluster, Path: d.Path, Summary: d.Summary, Detail: d.Detail}
		if d.Policy.Name != "" {
			gd.Policy = d.Policy.String()
		}
		g.Diagnostics = append(g.Diagnostics, gd)
	}
	return yaml.Marshal(g)
}

// Golden compares got with testdata/<name>.golden.yaml, or rewrites that
// file when the test runs with -update.
func Golden(t testing.TB, name string, got *Result) {
	t.Helper()
	data, err := Marshal(got)
	if err != nil {
		t.Fatalf("golden %s: %v", name, err)
	}
	path := filepath.Join("testdata", name+".golden.yaml")
	if updating() {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("golden %s: %v (run the test with -update to create it)", name, err)
	}
	if !bytes.Equal(want, data) {
		t.Errorf("golden %s differs from %s (run with -update to accept):\n%s", name, path, lineDiff(string(want), string(data)))
	}
}
