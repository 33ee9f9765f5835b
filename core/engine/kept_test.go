package engine

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/meshrelay/meshrelay/core/pluginhost"
	"github.com/meshrelay/meshrelay/internal/testutil"
	"github.com/meshrelay/meshrelay/sdk"
)

// perService is an SDK translator that emits a ConfigMap per Service of
// its target.
type perService struct{}

func (perService) Describe() sdk.Description {
	return sdk.Description{Name: "per-service", Version: "1", Backends: []string{"istio"}, Meshes: []string{"istio"}, OutputKinds: []string{"/ConfigMap"}}
}

func (perService) TranslateTarget(_ context.Context, req *sdk.Request, resp *sdk.Response) error {
	for _, s := range req.Target.Services() {
		resp.Emit(map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": s.Name, "namespace": s.Namespace}})
	}
	return nil
}

// handedNames returns the names of the objects of the output r hands on
// for key, sorted.
func handedNames(r Ready, key OutputKey) []string {
	for _, o := range r.Outputs {
		if o.Key == key {
			var names []string
			for res := range o.Snapshot.All() {
				names = append(names, res.ID.Name)
			}
			slices.Sort(names)
			return names
		}
	}
	return nil
}

// The engine hands its View's delivered outputs to the translators'
// sessions, which take the objects a plugin kept from them: an output
// handed on is the whole set, also when the set delivered lags behind the
// plugin's last answer (its delivery had not landed), which the session
// asks for whole.
func TestOutputsHandedOnWholeWhenThePluginKeepsObjects(t *testing.T) {
	ctx := context.Background()
	l, err := pluginhost.InProcess(perService{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	var logs testutil.Buffer
	f := newFleet(Options{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}, l)
	resent := func() int { return strings.Count(logs.String(), "asked for the clusters' sets whole") }
	key := OutputKey{Cluster: "east", Backend: "istio"}

	f.SetInput("east", input(t, 1, "istio", "a", "b"))
	f.cycle(ctx)
	f.SetInput("east", input(t, 2, "istio", "a", "b", "c"))
	r := f.Step(ctx)
	if got := handedNames(r, key); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("handed on %v, want a, b and c", got)
	}
	f.deliver(r)

	// The next answer keeps a, b and c, which the view delivered.
	f.SetInput("east", input(t, 3, "istio", "a", "b", "c", "d"))
	r = f.Step(ctx)
	if got := handedNames(r, key); !slices.Equal(got, []string{"a", "b", "c", "d"}) {
		t.Fatalf("handed on %v, want a to d", got)
	}
	if n := resent(); n != 0 {
		t.Errorf("asked for east whole %d times while the view held what the plugin kept", n)
	}

	// That output is not delivered; the next answer keeps d, which the
	// view does not hold, and the session asks for east whole.
	f.SetInput("east", input(t, 4, "istio", "a", "b", "c", "d", "e"))
	r = f.Step(ctx)
	if got := handedNames(r, key); !slices.Equal(got, []string{"a", "b", "c", "d", "e"}) {
		t.Fatalf("with the last output undelivered, handed on %v, want a to e", got)
	}
	if n := resent(); n != 1 {
		t.Errorf("asked for east whole %d times, want once", n)
	}
	f.deliver(r)
	if got, ok := f.view.Output(key); !ok || got.Len() != 5 {
		t.Errorf("the view holds %v", got)
	}
}
