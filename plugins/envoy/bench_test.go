package envoy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/meshrelay/meshrelay/plugins/envoy"
	"github.com/meshrelay/meshrelay/sdk"
	"github.com/meshrelay/meshrelay/sdk/sdktest"
)

// timed measures the time spent in TranslateTarget itself, summed over
// the targets (the SDK computes them in parallel).
type timed struct {
	*envoy.Translator
	spent atomic.Int64
}

func (t *timed) TranslateTarget(ctx context.Context, req *sdk.Request, resp *sdk.Response) error {
	start := time.Now()
	err := t.Translator.TranslateTarget(ctx, req, resp)
	t.spent.Add(int64(time.Since(start)))
	return err
}

// largeFleet is clusters clusters, each with nodes node groups and
// services Services of 3 endpoints (the services' workloads spread over the
// node groups), one VirtualDestination per Service name across every
// cluster, a TrafficPolicy and an AccessPolicy per Service name.
func largeFleet(clusters, nodes, services int) *sdktest.Fixture {
	raw := func(v any) json.RawMessage {
		b, err := json.Marshal(v)
		if err != nil {
			panic(err)
		}
		return b
	}
	f := &sdktest.Fixture{}
	var nodeIDs []string
	for n := range nodes {
		nodeIDs = append(nodeIDs, fmt.Sprintf("node-%d", n))
	}
	for c := range clusters {
		cl := sdktest.Cluster{Name: fmt.Sprintf("c%02d", c), Meshes: []string{"envoy"}}
		cl.Objects = append(cl.Objects, raw(map[string]any{
			"apiVersion": "discovery.meshrelay.io/v1alpha1", "kind": "Mesh", "metadata": map[string]any{"name": "envoy"},
			"spec": map[string]any{"type": "envoy", "envoyNodes": nodeIDs},
		}))
		for s := range services {
			name := fmt.Sprintf("svc-%d", s)
			labels := map[string]any{"app": name, "meshrelay.io/envoy-node": nodeIDs[s%nodes]}
			cl.Objects = append(cl.Objects,
				raw(map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"name": name, "namespace": "shop"},
					"spec": map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"app": name}},
						"template": map[string]any{"metadata": map[string]any{"labels": labels}, "spec": map[string]any{"containers": []any{map[string]any{"name": "c", "image": "i"}}}}}}),
				raw(map[string]any{"apiVersion": "v1", "kind": "Service", "metadata": map[string]any{"name": name, "namespace": "shop"},
					"spec": map[string]any{"selector": map[string]any{"app": name}, "ports": []any{map[string]any{"name": "http", "port": 80, "targetPort": 8080}}}}),
			)
			var eps []any
			for e := range 3 {
				eps = append(eps, map[string]any{"addresses": []string{fmt.Sprintf("10.%d.%d.%d", c, s, e+1)}, "conditions": map[string]any{"ready": true}, "zone": fmt.Sprintf("z%d", e)})
			}
			cl.Objects = append(cl.Objects, raw(map[string]any{"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
				"metadata":    map[string]any{"name": name + "-1", "namespace": "shop", "labels": map[string]any{"kubernetes.io/service-name": name}},
				"addressType": "IPv4", "ports": []any{map[string]any{"name": "http", "port": 8080}}, "endpoints": eps}))
		}
		f.Clusters = append(f.Clusters, cl)
	}
	for s := range services {
		name := fmt.Sprintf("svc-%d", s)
		sel := []any{map[string]any{"namespaces": []string{"shop"}, "names": []string{name}}}
		f.Policies = append(f.Policies,
			raw(map[string]any{"apiVersion": "policy.meshrelay.io/v1alpha1", "kind": "VirtualDestination", "metadata": map[string]any{"name": name, "namespace": "shop"},
				"spec": map[string]any{"hostname": name + ".global", "ports": []any{map[string]any{"number": 80, "protocol": "HTTP"}}, "destinationSelectors": sel,
					"failover":         map[string]any{"mode": "Priority", "priority": []string{"c00", "c01"}},
					"outlierDetection": map[string]any{"consecutiveErrors": 5, "interval": "10s", "baseEjectionTime": "30s", "maxEjectionPercent": 50}}}),
			raw(map[string]any{"apiVersion": "policy.meshrelay.io/v1alpha1", "kind": "TrafficPolicy", "metadata": map[string]any{"name": name, "namespace": "shop"},
				"spec": map[string]any{"destinationSelectors": sel, "http": []any{map[string]any{
					"matches": []any{map[string]any{"path": map[string]any{"type": "Prefix", "value": "/api"}}},
					"route": []any{
						map[string]any{"service": map[string]any{"cluster": "c00", "namespace": "shop", "name": name}, "weight": 90},
						map[string]any{"service": map[string]any{"cluster": "c01", "namespace": "shop", "name": name}, "weight": 10},
					},
					"timeout": "2s", "retries": map[string]any{"attempts": 2}}}}}),
			raw(map[string]any{"apiVersion": "policy.meshrelay.io/v1alpha1", "kind": "AccessPolicy", "metadata": map[string]any{"name": name, "namespace": "shop"},
				"spec": map[string]any{"destinationSelectors": sel, "from": []any{map[string]any{"namespaces": []string{"shop"}}}, "paths": []string{"/api*"}}}),
		)
	}
	return f
}

// BenchmarkTranslate translates a fleet of 20 clusters with 10 node groups
// each (200 node groups), 20 Services per cluster and 60 policies. It
// reports the time in TranslateTarget alone, summed over the targets
// (translate-ms/op, which includes the SDK's Emit), beside the whole round
// trip through the SDK's protocol (ns/op), the process's CPU time per round
// trip (cpu-ms/op) and the resources emitted.
func BenchmarkTranslate(b *testing.B) {
	f := largeFleet(20, 10, 20)
	tr := &timed{Translator: envoy.New()}
	var outputs int
	cpu := cpuTime()
	for b.Loop() {
		res := sdktest.RunFixture(b, tr, f)
		outputs = len(res.Outputs)
	}
	// CPU time does not depend on what else the machine runs.
	b.ReportMetric(float64((cpuTime()-cpu).Milliseconds())/float64(b.N), "cpu-ms/op")
	b.ReportMetric(float64(time.Duration(tr.spent.Load()).Milliseconds())/float64(b.N), "translate-ms/op")
	b.ReportMetric(float64(outputs), "resources")
	b.ReportMetric(float64(20*10), "node-groups")
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestLargeFleet checks the benchmark's fleet translates into valid,
// consistent node sets.
func TestLargeFleet(t *testing.T) {
	res := sdktest.RunFixture(t, envoy.New(), largeFleet(3, 4, 5))
	if len(res.Diagnostics) > 0 {
		t.Errorf("diagnostics: %+v", res.Diagnostics)
	}
	checkResult(t, res)
}

// benchmarkChange alternates a session of the benchmark's fleet between
// its state and the state change gives it, and reports the targets each
// update computes.
func benchmarkChange(b *testing.B, change func(f *sdktest.Fixture, raw func(any) json.RawMessage)) {
	base := largeFleet(20, 10, 20)
	changed := largeFleet(20, 10, 20)
	change(changed, func(v any) json.RawMessage {
		out, err := json.Marshal(v)
		if err != nil {
			b.Fatal(err)
		}
		return out
	})
	s := sdktest.NewSession(b, envoy.New())
	s.Update(base)
	var computed int
	fixtures := []*sdktest.Fixture{changed, base}
	for i := 0; b.Loop(); i++ {
		s.Update(fixtures[i%2])
		computed = len(s.Computed())
	}
	b.ReportMetric(float64(computed), "targets/op")
}

// BenchmarkTranslateLocalChange updates the benchmark's fleet with a
// change only one cluster's outputs use: a Deployment's pod template.
func BenchmarkTranslateLocalChange(b *testing.B) {
	benchmarkChange(b, func(f *sdktest.Fixture, raw func(any) json.RawMessage) {
		objs := f.Clusters[3].Objects
		for i, o := range objs {
			var d map[string]any
			_ = json.Unmarshal(o, &d) // the fleet's own JSON
			if d["kind"] == "Deployment" {
				d["metadata"].(map[string]any)["labels"] = map[string]any{"version": "v2"}
				objs[i] = raw(d)
				return
			}
		}
	})
}

// BenchmarkTranslateEndpointChange updates the benchmark's fleet with an
// endpoint change of a Service a VirtualDestination exports: every target
// imports it.
func BenchmarkTranslateEndpointChange(b *testing.B) {
	benchmarkChange(b, func(f *sdktest.Fixture, raw func(any) json.RawMessage) {
		objs := f.Clusters[3].Objects
		for i, o := range objs {
			var es map[string]any
			_ = json.Unmarshal(o, &es) // the fleet's own JSON
			if es["kind"] == "EndpointSlice" {
				eps := es["endpoints"].([]any)
				es["endpoints"] = eps[:len(eps)-1]
				objs[i] = raw(es)
				return
			}
		}
	})
}
