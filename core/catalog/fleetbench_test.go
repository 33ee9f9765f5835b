package catalog_test

import (
	"testing"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/catalog"
	"github.com/meshrelay/meshrelay/internal/bench"
)

// BenchmarkFleetOneChanged measures the discovery objects of a fleet of
// 10,000 clusters of 50 services after one cluster's input changed: what
// keeping the catalog warm costs after each one-cluster change.
func BenchmarkFleetOneChanged(b *testing.B) {
	const clusters = 10000
	inputs := make(map[string]*snapshot.Snapshot, clusters)
	for i := range clusters {
		inputs[bench.ClusterName(i)] = benchInput(b, i, 50)
	}
	changed := [2]*snapshot.Snapshot{benchInput(b, 0, 50), benchInput(b, 0, 49)}
	var cache catalog.Cache
	cache.Fleet(inputs)
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		n++
		inputs[bench.ClusterName(0)] = changed[n%2]
		cache.Fleet(inputs)
	}
}
