package engine

import (
	"context"
	"strconv"
	"testing"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/pluginhost"
)

// quiet is a translator that answers nothing: a cycle's cost is the
// engine's own.
type quiet struct{}

func (quiet) Name() string          { return "quiet" }
func (quiet) Backends() []string    { return []string{"istio"} }
func (quiet) Meshes() []string      { return []string{"istio"} }
func (quiet) OutputKinds() []string { return nil }
func (quiet) InputKinds() []string  { return nil }
func (quiet) Translate(context.Context, pluginhost.View) (pluginhost.Result, error) {
	return pluginhost.Result{}, nil
}

// BenchmarkStepOneChanged measures the engine's own work in a cycle after
// one cluster's input changed, in a fleet of 10,000: reading the whole
// view (whole, a View that is not Tracked) or the cluster named (named).
func BenchmarkStepOneChanged(b *testing.B) {
	const clusters = 10000
	ctx := context.Background()
	inputs := [2]*snapshot.Snapshot{input(b, 1, "istio", "a"), input(b, 2, "istio", "a", "b")}
	for _, tracked := range []bool{false, true} {
		name := "whole"
		if tracked {
			name = "named"
		}
		b.Run(name, func(b *testing.B) {
			f := newFleet(Options{}, quiet{})
			var view View = f.view.MemView
			if tracked {
				view = f.view
			}
			f.Engine = New([]pluginhost.Translator{quiet{}}, Options{View: view})
			for i := range clusters {
				f.SetInput("cluster-"+strconv.Itoa(i), input(b, 1, "istio", "a"))
			}
			f.cycle(ctx)
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				i++
				f.SetInput("cluster-42", inputs[i%2])
				f.cycle(ctx)
			}
		})
	}
}
