package offline

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/meshrelay/meshrelay/core/pluginhost"
	"github.com/meshrelay/meshrelay/plugins/cilium"
	"github.com/meshrelay/meshrelay/plugins/envoy"
	"github.com/meshrelay/meshrelay/plugins/gatewayapi"
	"github.com/meshrelay/meshrelay/plugins/istio"
	"github.com/meshrelay/meshrelay/sdk"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func translators(t *testing.T) []pluginhost.Translator {
	t.Helper()
	var out []pluginhost.Translator
	for _, tr := range []sdk.Translator{istio.New(), envoy.New(), cilium.New(), gatewayapi.New()} {
		l, err := pluginhost.InProcess(tr, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(l.Close)
		out = append(out, l)
	}
	return out
}

// render writes a result as YAML: outputs by cluster and backend, then
// diagnostics.
func render(t *testing.T, res *Result) []byte {
	t.Helper()
	var buf bytes.Buffer
	for _, k := range res.Keys() {
		for r := range res.Outputs[k].All() {
			y, err := yaml.JSONToYAML(r.Body)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&buf, "# %s/%s\n%s---\n", k.Cluster, k.Backend, y)
		}
	}
	for _, d := range res.Diagnostics {
		fmt.Fprintf(&buf, "# %s %s %s/%s %s: %s (%s)\n", d.Severity, d.Policy.Kind, d.Policy.Namespace, d.Policy.Name, d.Path, d.Summary, d.Plugin)
	}
	return buf.Bytes()
}

// The demo's clusters and the example policies translate to the golden
// outputs, the same bytes every run.
func TestTranslateGolden(t *testing.T) {
	root := filepath.Join("..", "..", "testdata")
	opts := Options{ClustersDir: filepath.Join(root, "demo", "clusters"), PoliciesDir: filepath.Join(root, "policies"), Translators: translators(t)}
	res, err := Translate(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Failed) > 0 {
		t.Fatalf("translators failed: %+v", res.Failed)
	}
	got := render(t, res)
	golden := filepath.Join("testdata", "demo.golden.yaml")
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test ./internal/offline/ -update)", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("translate output differs from %s (-want +got):\n%s", golden, diff)
	}

	opts.Translators = translators(t)
	again, err := Translate(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(render(t, again), got) {
		t.Error("a second run gave different bytes")
	}
	for _, key := range []string{"east/istio", "west/istio", "west/envoy", "central/cilium"} {
		found := false
		for k := range res.Outputs {
			found = found || k.Cluster+"/"+k.Backend == key
		}
		if !found {
			t.Errorf("no %s output", key)
		}
	}
}

func TestTranslateErrors(t *testing.T) {
	if _, err := Translate(context.Background(), Options{ClustersDir: t.TempDir()}); err == nil {
		t.Error("Translate with no cluster directories succeeded")
	}
	if _, err := Translate(context.Background(), Options{ClustersDir: filepath.Join(t.TempDir(), "missing")}); err == nil {
		t.Error("Translate of a missing directory succeeded")
	}
}
