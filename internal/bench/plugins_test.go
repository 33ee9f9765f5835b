package bench

import (
	"context"
	"fmt"
	"maps"
	"runtime"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/engine"
	"github.com/meshrelay/meshrelay/core/pluginhost"
	"github.com/meshrelay/meshrelay/plugins/cilium"
	"github.com/meshrelay/meshrelay/plugins/envoy"
	"github.com/meshrelay/meshrelay/plugins/istio"
	"github.com/meshrelay/meshrelay/sdk"
)

// BenchmarkPluginHeap reports the live heap each plugin's session keeps per
// cluster after a full translation of 500 clusters × 50 Services (the
// fleet of meshrelay bench), run in process: heap-B/cluster is what a
// plugin process holds per cluster, before the garbage collector's
// headroom.
//
//	go test -run '^$' -bench PluginHeap ./internal/bench/
func BenchmarkPluginHeap(b *testing.B) {
	const clusters = 500
	view := fleetView(b, clusters)
	for name, tr := range map[string]sdk.Translator{"istio": istio.New(), "envoy": envoy.New(), "cilium": cilium.New()} {
		b.Run(name, func(b *testing.B) {
			for range b.N {
				before := liveHeap()
				l, err := pluginhost.InProcess(tr, nil)
				if err != nil {
					b.Fatal(err)
				}
				res, err := l.Translate(context.Background(), view)
				if err != nil {
					b.Fatal(err)
				}
				if len(res.Outputs) == 0 {
					b.Fatal("no outputs")
				}
				res = pluginhost.Result{}
				b.ReportMetric(float64(liveHeap()-before)/clusters, "heap-B/cluster")
				runtime.KeepAlive(res)
				l.Close()
			}
		})
	}
}

// liveHeap returns the bytes of live heap objects after a full collection.
func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// BenchmarkPolicyEditPlugins measures the three plugins, in process, after
// an edit of the fleet-wide AccessPolicy over 1,000 clusters × 50
// Services: every target of every plugin computes again. heap-growth-MB
// is how far the heap reached beyond what it held before the edits: what
// a plugin process faults in for an edit.
//
//	go test -run '^$' -bench PolicyEditPlugins ./internal/bench/
func BenchmarkPolicyEditPlugins(b *testing.B) {
	const clusters = 1000
	view := fleetView(b, clusters)
	ls := linkPlugins(b, view)
	runtime.GC()
	before := heapObjects()
	peak := watchPeak(heapObjects)
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := range b.N {
		edit := view
		edit.Policies = policies(b, fmt.Sprintf("p%d", i+1))
		if changed := translateAll(b, ls, edit); changed < clusters {
			b.Fatalf("a policy edit changed %d outputs, want one per cluster at least", changed)
		}
	}
	b.ReportMetric((cpuTime()-cpu0).Seconds()/float64(b.N), "cpu-s/op")
	b.ReportMetric(float64(peak()-before)/(1<<20), "heap-growth-MB")
}

// heapObjects returns the bytes of heap objects, live or not yet
// collected: how far the heap reaches.
func heapObjects() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// watchPeak samples read every millisecond until the returned function is
// called, which returns the highest value seen.
func watchPeak(read func() uint64) func() uint64 {
	stop := make(chan struct{})
	done := make(chan uint64)
	go func() {
		peak := read()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				done <- max(peak, read())
				return
			case <-tick.C:
				peak = max(peak, read())
			}
		}
	}()
	return func() uint64 { close(stop); return <-done }
}

// linked are the three plugins in process, and the output sets they
// answered, which their answers keep what did not change from as the
// server's store is (pluginhost.View.Delivered).
type linked struct {
	ls        []*pluginhost.Linked
	delivered map[[2]string]*snapshot.Snapshot
}

func (l *linked) get(cluster, backend string) (*snapshot.Snapshot, bool) {
	s, ok := l.delivered[[2]string{cluster, backend}]
	return s, ok
}

// linkPlugins links the three plugins in process, each translating view
// once; they close when b ends.
func linkPlugins(b *testing.B, view pluginhost.View) *linked {
	b.Helper()
	l := &linked{delivered: map[[2]string]*snapshot.Snapshot{}}
	for _, tr := range []sdk.Translator{istio.New(), envoy.New(), cilium.New()} {
		p, err := pluginhost.InProcess(tr, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(p.Close)
		l.ls = append(l.ls, p)
	}
	translateAll(b, l, view)
	return l
}

// translateAll hands view to every plugin, keeps the sets they answered,
// and returns how many changed, over them all.
func translateAll(b *testing.B, l *linked, view pluginhost.View) int {
	b.Helper()
	view.Delivered = l.get
	changed := 0
	for _, p := range l.ls {
		res, err := p.Translate(context.Background(), view)
		if err != nil {
			b.Fatal(err)
		}
		for _, o := range res.Outputs {
			s, err := snapshot.NewOwned(0, o.Resources)
			if err != nil {
				b.Fatal(err)
			}
			l.delivered[[2]string{o.Cluster, o.Backend}] = s
		}
		changed += len(res.Outputs)
	}
	return changed
}

// fleetView is a view of n generated clusters of 50 Services each and the
// fleet-wide AccessPolicy.
func fleetView(tb testing.TB, n int) pluginhost.View {
	tb.Helper()
	view := pluginhost.View{Clusters: make(map[string]pluginhost.Cluster, n), Policies: policies(tb, "p0")}
	for i := range n {
		c, err := NewCluster(i, 50)
		if err != nil {
			tb.Fatal(err)
		}
		s, err := c.Snapshot()
		if err != nil {
			tb.Fatal(err)
		}
		view.Clusters[c.Name] = pluginhost.Cluster{Input: s, Meshes: engine.Meshes(s)}
	}
	return view
}

// BenchmarkOneChangePlugins measures the three plugins, in process, after
// one input change in a fleet of 1,000 clusters × 50 Services: a Service
// and its Deployment rewritten in one cluster, as the bench's local
// scenario does. Its cpu-s/op is the plugins' and the host's share of
// the server+plugins CPU per input change of meshrelay bench.
//
//	go test -run '^$' -bench OneChangePlugins ./internal/bench/
func BenchmarkOneChangePlugins(b *testing.B) {
	const clusters = 1000
	view := fleetView(b, clusters)
	ls := linkPlugins(b, view)
	c, err := NewCluster(42, 50)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := range b.N {
		in, err := c.Change(i%50, fmt.Sprintf("v%d", i))
		if err != nil {
			b.Fatal(err)
		}
		// The hosts keep the view they were given: the next one is a copy.
		view.Clusters = maps.Clone(view.Clusters)
		view.Clusters[c.Name] = pluginhost.Cluster{Input: in, Meshes: engine.Meshes(in)}
		if changed := translateAll(b, ls, view); changed != 1 {
			b.Fatalf("one input change changed %d output sets, want the cluster's Istio set", changed)
		}
	}
	b.ReportMetric((cpuTime()-cpu0).Seconds()/float64(b.N), "cpu-s/op")
}
