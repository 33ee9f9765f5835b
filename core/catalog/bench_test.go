package catalog_test

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/catalog"
	"github.com/meshrelay/meshrelay/internal/bench"
)

// BenchmarkDerive measures deriving one cluster's discovery objects from
// its input: what a List costs after the cluster changed.
func BenchmarkDerive(b *testing.B) {
	for _, services := range []int{50, 1000} {
		b.Run(fmt.Sprintf("services=%d", services), func(b *testing.B) {
			in := benchInput(b, 0, services)
			b.ReportAllocs()
			for b.Loop() {
				catalog.Derive("c", in)
			}
		})
	}
}

// BenchmarkFleetCached measures the discovery objects of a fleet of 1000
// clusters of 50 services when no input changed since the last call: what
// every List costs in a steady fleet.
func BenchmarkFleetCached(b *testing.B) {
	const clusters = 1000
	inputs := make(map[string]*snapshot.Snapshot, clusters)
	for i := range clusters {
		inputs[bench.ClusterName(i)] = benchInput(b, i, 50)
	}
	var cache catalog.Cache
	cache.Fleet(inputs)
	b.ReportAllocs()
	for b.Loop() {
		cache.Fleet(inputs)
	}
}

func benchInput(b *testing.B, i, services int) *snapshot.Snapshot {
	b.Helper()
	c, err := bench.NewCluster(i, services)
	if err != nil {
		b.Fatal(err)
	}
	in, err := c.Snapshot()
	if err != nil {
		b.Fatal(err)
	}
	return in
}

// BenchmarkRetained measures the heap a Cache keeps for each cluster of
// 50 services after deriving 500 clusters' discovery objects, as the
// server's catalog does after every engine cycle: the retained-B/cluster
// metric (the inputs themselves are allocated before and not counted).
func BenchmarkRetained(b *testing.B) {
	const clusters = 500
	inputs := make(map[string]*snapshot.Snapshot, clusters)
	for i := range clusters {
		inputs[bench.ClusterName(i)] = benchInput(b, i, 50)
	}
	var retained uint64
	for b.Loop() {
		before := heapAlloc()
		cache := new(catalog.Cache)
		cache.Fleet(inputs)
		retained = heapAlloc() - before
		runtime.KeepAlive(cache)
	}
	b.ReportMetric(float64(retained)/clusters, "retained-B/cluster")
}

// heapAlloc returns the bytes of live heap objects after a full collection.
func heapAlloc() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
