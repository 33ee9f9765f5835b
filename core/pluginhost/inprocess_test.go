package pluginhost

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/sdk"
)

// counter emits a ConfigMap per Service and fails on demand.
type counter struct{ fail bool }

func (c *counter) Describe() sdk.Description {
	return sdk.Description{Name: "counter", Version: "1", Backends: []string{"test"}, OutputKinds: []string{"/ConfigMap"}}
}

func (c *counter) TranslateTarget(_ context.Context, req *sdk.Request, resp *sdk.Response) error {
	if c.fail {
		return errors.New("cannot translate today")
	}
	for _, s := range req.Target.Services() {
		resp.Emit(map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": s.Name, "namespace": s.Namespace}})
	}
	return nil
}

func TestInProcess(t *testing.T) {
	c := &counter{}
	l, err := InProcess(c, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.Name() != "counter" || len(l.Backends()) != 1 {
		t.Fatalf("Name, Backends = %q, %v", l.Name(), l.Backends())
	}
	if _, err := l.Translate(context.Background(), update(false, "east")); !errors.Is(err, ErrNeedFull) {
		t.Fatalf("first delta = %v, want ErrNeedFull", err)
	}
	works(t, l)

	res, err := l.Translate(context.Background(), Update{Clusters: []ClusterUpdate{{Name: "east", Deletes: []snapshot.ID{service("default", "svc-east").ID}}}})
	if err != nil || len(res.Outputs) != 1 || len(res.Outputs[0].Resources) != 0 {
		t.Fatalf("emptying delta = %+v, %v; want one empty output", res, err)
	}

	c.fail = true
	if _, err := l.Translate(context.Background(), update(false, "north")); !errors.Is(err, ErrPluginFailed) {
		t.Fatalf("failing translate = %v, want ErrPluginFailed", err)
	}
	c.fail = false
	// The session survives a failed translation: deltas go on, and the
	// output held back meanwhile arrives.
	res, err = l.Translate(context.Background(), Update{})
	if err != nil || len(res.Outputs) != 1 || res.Outputs[0].Cluster != "north" {
		t.Fatalf("after a failure: %+v, %v", res, err)
	}
	if _, err := l.Translate(context.Background(), Update{Clusters: []ClusterUpdate{{Name: "east", Removed: true}}}); err != nil {
		t.Fatal(err)
	}
}
