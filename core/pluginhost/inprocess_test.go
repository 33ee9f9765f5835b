package pluginhost

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
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
	v := worksAfresh(t, l)

	// The same view again sends nothing.
	if res, err := l.Translate(context.Background(), v); err != nil || res.Sent {
		t.Fatalf("the same view again = sent %v, %v; want nothing sent", res.Sent, err)
	}

	emptied := maps.Clone(v.Clusters)
	emptied["east"] = Cluster{Input: snapshot.Empty, Meshes: []string{"istio"}}
	v = View{Clusters: emptied}
	res, err := l.Translate(context.Background(), v)
	if err != nil || len(res.Outputs) != 1 || len(res.Outputs[0].Resources) != 0 {
		t.Fatalf("emptying east = %+v, %v; want one empty output", res, err)
	}

	c.fail = true
	failed := with(v, "north")
	if _, err := l.Translate(context.Background(), failed); !errors.Is(err, ErrPluginFailed) {
		t.Fatalf("failing translate = %v, want ErrPluginFailed", err)
	}
	c.fail = false
	// The session survives a failed translation: the same view again is
	// sent in full (the plugin may hold part of it), and the output held
	// back meanwhile arrives.
	res, err = l.Translate(context.Background(), failed)
	if err != nil || !res.Full || !slices.ContainsFunc(res.Outputs, func(o ClusterOutput) bool { return o.Cluster == "north" }) {
		t.Fatalf("after a failure: %+v, %v; want a full update answered with north's output", res, err)
	}
	delete(failed.Clusters, "east")
	if _, err := l.Translate(context.Background(), failed); err != nil {
		t.Fatal(err)
	}
}
