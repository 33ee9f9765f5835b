package sdktest

import (
	"context"
	"slices"
	"testing"

	"github.com/meshrelay/meshrelay/sdk"
)

// onlyC0 emits one object, to cluster c0: every other cluster's set is
// empty. Its per-target form is onlyC0Targets.
type onlyC0 struct{}

func (onlyC0) Describe() sdk.Description {
	return sdk.Description{Name: "only-c0", Version: "1", Backends: []string{"x"}, OutputKinds: []string{"/ConfigMap"}}
}

func (onlyC0) Translate(_ context.Context, req *sdk.FleetRequest, resp *sdk.FleetResponse) error {
	for _, c := range req.Fleet.Clusters() {
		if c.Name == "c0" {
			resp.Emit(c.Name, configMap("hello", nil))
		}
	}
	return nil
}

type onlyC0Targets struct{ onlyC0 }

func (onlyC0Targets) TranslateTarget(_ context.Context, req *sdk.Request, resp *sdk.Response) error {
	if req.Target.Name == "c0" {
		resp.Emit(configMap("hello", nil))
	}
	return nil
}

// TestClusterEnteringScopeGetsEverySet: a cluster that enters the scope is
// answered with every set, empty ones too, since the host may hold an
// output of it that another replica delivered, which the empty set must
// replace. A cluster already in scope whose set stays empty gets nothing.
func TestClusterEnteringScopeGetsEverySet(t *testing.T) {
	for name, tr := range map[string]Translator{"whole fleet": onlyC0{}, "targets": onlyC0Targets{}} {
		t.Run(name, func(t *testing.T) {
			fs := newFleetSpec(2, 1)
			s := NewSession(t, tr)
			s.Scope("c0")
			s.Update(fs.fixture(t))
			if got := s.Sent(); !slices.Equal(got, [][2]string{{"c0", "x"}}) {
				t.Fatalf("first update sent %v, want c0's set", got)
			}
			s.Scope("c0", "c1")
			res := s.Update(fs.fixture(t))
			if got := s.Sent(); !slices.Equal(got, [][2]string{{"c1", "x"}}) {
				t.Errorf("c1 entering the scope sent %v, want c1's empty set", got)
			}
			for _, o := range res.Outputs {
				if o.Cluster == "c1" {
					t.Errorf("c1's set holds %s, want it empty", o.Name)
				}
			}
			fs.clusters[0].services[0].rev = "r1"
			s.Update(fs.fixture(t))
			if got := s.Sent(); len(got) != 0 {
				t.Errorf("an update with c1 still in scope and still empty sent %v, want nothing", got)
			}
		})
	}
}
