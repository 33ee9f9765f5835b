package pluginhost

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"strconv"
	"strings"
	"testing"

	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/sdk"
)

// lister is the translator of the test plugin's sdk mode, for in-process
// comparisons.
type lister struct{}

func (lister) Describe() sdk.Description {
	return sdk.Description{Name: "good", Version: "1.0.0", Backends: []string{"test"}, OutputKinds: []string{"/ConfigMap"}}
}

func (lister) TranslateTarget(_ context.Context, req *sdk.Request, resp *sdk.Response) error {
	var ps []policyv1alpha1.Policy
	for _, p := range req.Fleet.AccessPolicies() {
		ps = append(ps, p)
	}
	var names []string
	for _, s := range req.Target.Services() {
		names = append(names, s.Namespace+"/"+s.Name)
	}
	resp.Emit(map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "services", "namespace": "default"},
		"data":     map[string]any{"services": strings.Join(names, ","), "policies": strconv.Itoa(len(req.Fleet.AccessPolicies()))},
	}, ps...)
	return nil
}

// translators returns the test plugin as a process and in process.
func translators(b *testing.B) map[string]Translator {
	dir := b.TempDir()
	e, err := Install(dir, pluginBinary(b, "sdk", "good"), "")
	if err != nil {
		b.Fatal(err)
	}
	h, err := New(dir, slog.New(slog.DiscardHandler), DefaultOptions())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { h.Close() })
	p, _ := h.Plugin(e.Name)
	l, err := InProcess(lister{}, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(l.Close)
	return map[string]Translator{"process": p, "inprocess": l}
}

// bigFleet returns a view of about size bytes of inputs over 10 clusters.
func bigFleet(b *testing.B, size int) View {
	const body = 10 << 10
	v := View{Clusters: map[string]Cluster{}}
	n := size / body / 10
	for c := range 10 {
		var rs []snapshot.Resource
		for i := range n {
			r, err := snapshot.FromJSON(fmt.Appendf(nil, `{"apiVersion":"v1","kind":"Service","metadata":{"namespace":"ns","name":"svc-%05d","annotations":{"pad":%q}},"spec":{"selector":{"app":"x"}}}`, i, strings.Repeat("p", body)))
			if err != nil {
				b.Fatal(err)
			}
			rs = append(rs, r)
		}
		in, err := snapshot.New(1, rs)
		if err != nil {
			b.Fatal(err)
		}
		v.Clusters[fmt.Sprintf("cluster-%02d", c)] = Cluster{Input: in, Meshes: []string{"istio"}}
	}
	return v
}

// BenchmarkRoundTripSmall is the overhead of one small delta: one Service
// changes in one cluster of two.
func BenchmarkRoundTripSmall(b *testing.B) {
	for name, tr := range translators(b) {
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			v := view("east", "west")
			if _, err := tr.Translate(ctx, v); err != nil {
				b.Fatal(err)
			}
			east := v.Clusters["east"].Input
			for i := 0; b.Loop(); i++ {
				in, err := snapshot.New(uint64(i), append(east.Resources(), service("default", "svc-"+strconv.Itoa(i%50))))
				if err != nil {
					b.Fatal(err)
				}
				v.Clusters = maps.Clone(v.Clusters)
				v.Clusters["east"] = Cluster{Input: in, Meshes: []string{"istio"}}
				if _, err := tr.Translate(ctx, v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkFleet10MB sends a 10 MB fleet view whole and waits for the
// answer: each round empties the view (a small update) and sends it all
// again.
func BenchmarkFleet10MB(b *testing.B) {
	u := bigFleet(b, 10<<20)
	for name, tr := range translators(b) {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(10 << 20)
			for b.Loop() {
				if _, err := tr.Translate(context.Background(), View{}); err != nil {
					b.Fatal(err)
				}
				res, err := tr.Translate(context.Background(), u)
				if err != nil {
					b.Fatal(err)
				}
				if len(res.Outputs) != 10 {
					b.Fatalf("%d outputs", len(res.Outputs))
				}
			}
		})
	}
}

// BenchmarkColdStart starts the plugin process (checksum, handshake, mTLS,
// health check, Describe) and kills it.
func BenchmarkColdStart(b *testing.B) {
	bin := pluginBinary(b, "sdk", "good")
	sum, err := fileSHA256(bin)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		p, err := launch(context.Background(), "good", bin, sum, DefaultOptions(), slog.New(slog.DiscardHandler))
		if err != nil {
			b.Fatal(err)
		}
		p.kill()
	}
}
