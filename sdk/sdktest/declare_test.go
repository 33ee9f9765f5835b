package sdktest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	translatorv1 "github.com/meshrelay/meshrelay/proto/translator/v1"
	"github.com/meshrelay/meshrelay/sdk"
)

// widgets emits a ConfigMap counting the target's Services and its
// example.io Widgets, declaring the kinds it is given.
type widgets struct{ inputKinds, outputKinds []string }

func (w widgets) Describe() sdk.Description {
	return sdk.Description{Name: "widgets", Version: "1", Backends: []string{"w"}, InputKinds: w.inputKinds, OutputKinds: w.outputKinds}
}

func (widgets) TranslateTarget(_ context.Context, req *sdk.Request, resp *sdk.Response) error {
	resp.Emit(configMap("count", map[string]any{
		"services": fmt.Sprint(len(req.Target.Services())),
		"widgets":  fmt.Sprint(len(req.Target.Objects("example.io", "Widget"))),
	}))
	return nil
}

func widgetFixture(t *testing.T) *Fixture {
	return &Fixture{Clusters: []Cluster{{Name: "east", Objects: []json.RawMessage{
		raw(t, map[string]any{"apiVersion": "v1", "kind": "Service", "metadata": map[string]any{"name": "api", "namespace": "shop"}}),
		raw(t, map[string]any{"apiVersion": "example.io/v1", "kind": "Widget", "metadata": map[string]any{"name": "w", "namespace": "shop"}}),
	}}}}
}

// TestUndeclaredInputKindIsInvisible: a fixture object of a custom kind
// the translator does not declare in InputKinds does not reach it, as
// discovery would never send it; built-in kinds always do.
func TestUndeclaredInputKindIsInvisible(t *testing.T) {
	tests := map[string]struct {
		inputKinds  []string
		wantWidgets string
	}{
		"undeclared": {wantWidgets: "0"},
		"declared":   {inputKinds: []string{"example.io/Widget"}, wantWidgets: "1"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			tr := widgets{inputKinds: tc.inputKinds, outputKinds: []string{"/ConfigMap"}}
			for how, got := range map[string]*Result{
				"Run":     RunFixture(t, tr, widgetFixture(t)),
				"Session": NewSession(t, tr).Update(widgetFixture(t)),
			} {
				if len(got.Outputs) != 1 {
					t.Fatalf("%s: outputs = %+v, want one", how, got.Outputs)
				}
				body := string(got.Outputs[0].Body)
				if !strings.Contains(body, `"widgets":"`+tc.wantWidgets+`"`) || !strings.Contains(body, `"services":"1"`) {
					t.Errorf("%s: output = %s, want widgets %s and services 1", how, body, tc.wantWidgets)
				}
			}
		})
	}
}

// TestUndeclaredOutputKindFails: a translator emitting a kind it does not
// declare in OutputKinds fails its test, with an error naming the kind,
// since agents would never prune that kind after a restart.
func TestUndeclaredOutputKindFails(t *testing.T) {
	conn, stop, err := serve(widgets{outputKinds: []string{"/Secret"}})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	_, err = Translate(context.Background(), translatorv1.NewTranslatorClient(conn), widgetFixture(t))
	if err == nil || !strings.Contains(err.Error(), `"/ConfigMap"`) || !strings.Contains(err.Error(), "OutputKinds") {
		t.Fatalf("Translate of an undeclared output kind = %v, want an error naming /ConfigMap", err)
	}
	s := NewSession(t, widgets{outputKinds: []string{"/Secret"}})
	if err := s.translate(widgetFixture(t)); err == nil || !strings.Contains(err.Error(), `"/ConfigMap"`) {
		t.Fatalf("Session update of an undeclared output kind = %v, want an error naming /ConfigMap", err)
	}
}
