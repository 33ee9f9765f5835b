package sdktest

import (
	"context"
	"strings"
	"testing"

	"github.com/meshrelay/meshrelay/sdk"
)

// lister emits, per cluster, a ConfigMap listing its Services.
type lister struct{}

func (lister) Describe() sdk.Description {
	return sdk.Description{Name: "lister", Version: "1", Backends: []string{"list"}, OutputKinds: []string{"/ConfigMap"}}
}

func (lister) Translate(_ context.Context, req *sdk.FleetRequest, resp *sdk.FleetResponse) error {
	for _, c := range req.Fleet.Clusters() {
		var names []string
		for _, s := range c.Services() {
			names = append(names, s.Namespace+"/"+s.Name)
		}
		resp.Emit(c.Name, map[string]any{
			"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": "services", "namespace": "meshrelay"},
			"data": map[string]any{
				"services":    strings.Join(names, ","),
				"deployments": len(c.Deployments()),
				"stale":       c.Stale,
				"policies":    len(req.Fleet.AccessPolicies()),
			},
		})
	}
	return nil
}

func TestLoadFixture(t *testing.T) {
	f, err := LoadFixture("testdata/fixture/basic.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Clusters) != 2 || len(f.Clusters[0].Objects) != 3 || len(f.Clusters[1].Objects) != 2 || len(f.Policies) != 1 {
		t.Fatalf("LoadFixture = %+v", f)
	}
	if _, err := LoadFixture("testdata/missing.yaml"); err == nil {
		t.Error("LoadFixture of a missing file succeeded")
	}
}

func TestRunGolden(t *testing.T) {
	got := Run(t, lister{}, "testdata/fixture/basic.yaml")
	if len(got.Outputs) != 2 || len(got.Diagnostics) != 2 || got.Diagnostics[0].Policy.Name != "invalid" {
		t.Fatalf("Run = %+v", got)
	}
	Golden(t, "basic", got)
	a, _ := Marshal(got)
	b, _ := Marshal(Run(t, lister{}, "testdata/fixture/basic.yaml"))
	if string(a) != string(b) {
		t.Error("two runs differ")
	}
}
