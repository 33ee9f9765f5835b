package redis_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/store"
	"github.com/meshrelay/meshrelay/core/store/memory"
	"github.com/meshrelay/meshrelay/core/store/redis"
	"github.com/meshrelay/meshrelay/internal/testenv"
)

// resourcesPerCluster is the size of the benchmark clusters' inputs.
const resourcesPerCluster = 50

// clusterInput builds a cluster's input of n resources shaped like what
// agents send: Services, EndpointSlices and Deployments in a few namespaces.
func clusterInput(b testing.TB, cluster string, version uint64, n int) *snapshot.Snapshot {
	b.Helper()
	rs := make([]snapshot.Resource, 0, n)
	for i := range n {
		ns := fmt.Sprintf("team-%d", i%5)
		name := fmt.Sprintf("svc-%d", i/3)
		var body string
		switch i % 3 {
		case 0:
			body = fmt.Sprintf(`{"apiVersion":"v1","kind":"Service","metadata":{"name":%q,"namespace":%q,"labels":{"app":%q,"cluster":%q}},"spec":{"selector":{"app":%q},"ports":[{"name":"http","port":80,"targetPort":8080,"protocol":"TCP"},{"name":"grpc","port":9090,"protocol":"TCP"}],"type":"ClusterIP","clusterIP":"10.96.%d.%d"}}`, name, ns, name, cluster, name, i%250, (i*7)%250)
		case 1:
			body = fmt.Sprintf(`{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice","metadata":{"name":%q,"namespace":%q,"labels":{"kubernetes.io/service-name":%q}},"addressType":"IPv4","endpoints":[{"addresses":["10.1.%d.%d"],"conditions":{"ready":true},"zone":"zone-a"},{"addresses":["10.1.%d.%d"],"conditions":{"ready":true},"zone":"zone-b"}],"ports":[{"name":"http","port":8080,"protocol":"TCP"}]}`, name+"-abcde", ns, name, i%250, (i*3)%250, i%250, (i*5)%250)
		default:
			body = fmt.Sprintf(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":%q,"namespace":%q,"labels":{"app":%q}},"spec":{"replicas":3,"selector":{"matchLabels":{"app":%q}},"template":{"metadata":{"labels":{"app":%q,"version":"v1"}},"spec":{"serviceAccountName":%q,"containers":[{"name":"app","image":"registry.example/%s:1.%d","ports":[{"containerPort":8080}]}]}}}}`, name, ns, name, name, name, name, name, i)
		}
		r, err := snapshot.FromJSON([]byte(body))
		if err != nil {
			b.Fatalf("FromJSON: %v", err)
		}
		rs = append(rs, r)
	}
	s, err := snapshot.New(version, rs)
	if err != nil {
		b.Fatalf("snapshot.New: %v", err)
	}
	return s
}

// BenchmarkRedisPutInput measures writing 50-resource inputs to a real
// redis-server, from one goroutine and from GOMAXPROCS goroutines.
// Bytes/op is the uncompressed size of the resources' bodies.
func BenchmarkRedisPutInput(b *testing.B) {
	server := testenv.StartRedis(b)
	s := newStore(b, server, "bench:", "a")
	snap := clusterInput(b, "bench", 1, resourcesPerCluster)
	ctx := context.Background()
	b.Run("serial", func(b *testing.B) {
		b.SetBytes(int64(snap.Size()))
		b.ReportAllocs()
		v := uint64(0)
		for b.Loop() {
			v++
			if err := s.PutInput(ctx, fmt.Sprintf("c%d", v%1000), snap.WithVersion(v)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.SetBytes(int64(snap.Size()))
		b.ReportAllocs()
		var mu sync.Mutex
		next := uint64(1 << 32)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				mu.Lock()
				next++
				v := next
				mu.Unlock()
				if err := s.PutInput(ctx, fmt.Sprintf("c%d", v%1000), snap.WithVersion(v)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkColdLoad1000 measures a server's cold start: a WriteThrough
// loading 1,000 clusters' inputs of 50 resources each from a real
// redis-server into memory. It reports clusters/s and the heap the loaded
// fleet keeps (heap-B/cluster).
func BenchmarkColdLoad1000(b *testing.B) {
	const clusters = 1000
	server := testenv.StartRedis(b)
	writer := newStore(b, server, "cold:", "writer")
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, clusters)
	sem := make(chan struct{}, 32)
	stored := 0
	for i := range clusters {
		name := fmt.Sprintf("cluster-%04d", i)
		snap := clusterInput(b, name, 1, resourcesPerCluster)
		stored += snap.Size()
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			errs <- writer.PutInput(ctx, name, snap)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	raw := newRawClient(server)
	defer raw.Close()
	keyBytes, err := raw.MemoryUsage(ctx, "cold:input:cluster-0000").Result()
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("stored %d clusters: %.1f MB of resource bodies; one input key takes %d bytes in Redis", clusters, float64(stored)/1e6, keyBytes)

	b.Run("WriteThrough.Load", func(b *testing.B) {
		var heapPerCluster float64
		for b.Loop() {
			backing := newStore(b, server, "cold:", "loader")
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			wt := store.NewWriteThrough(memory.New(), backing, store.WriteThroughOptions{})
			stats, err := wt.Load(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if stats.Inputs != clusters {
				b.Fatalf("Load read %d inputs, want %d", stats.Inputs, clusters)
			}
			b.StopTimer()
			runtime.GC()
			runtime.ReadMemStats(&after)
			heapPerCluster = float64(after.HeapAlloc-before.HeapAlloc) / clusters
			runtime.KeepAlive(wt)
			wt.Close()
			b.StartTimer()
		}
		b.ReportMetric(float64(clusters)*float64(b.N)/b.Elapsed().Seconds(), "clusters/s")
		b.ReportMetric(heapPerCluster, "heap-B/cluster")
	})
	b.Run("ListInputs", func(b *testing.B) {
		for b.Loop() {
			got, err := writer.ListInputs(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if len(got) != clusters {
				b.Fatalf("ListInputs returned %d inputs, want %d", len(got), clusters)
			}
		}
		b.ReportMetric(float64(clusters)*float64(b.N)/b.Elapsed().Seconds(), "clusters/s")
	})
}

// BenchmarkSnapshotMemory1000 builds 1,000 clusters' inputs of 50 resources
// and reports the heap they keep per cluster, without any store.
func BenchmarkSnapshotMemory1000(b *testing.B) {
	const clusters = 1000
	var perCluster, bodies float64
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		snaps := make([]*snapshot.Snapshot, clusters)
		for i := range snaps {
			snaps[i] = clusterInput(b, fmt.Sprintf("cluster-%04d", i), 1, resourcesPerCluster)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perCluster = float64(after.HeapAlloc-before.HeapAlloc) / clusters
		bodies = 0
		for _, s := range snaps {
			bodies += float64(s.Size())
		}
		bodies /= clusters
	}
	b.ReportMetric(perCluster, "heap-B/cluster")
	b.ReportMetric(bodies, "body-B/cluster")
}

// BenchmarkCodec measures compressing a cluster's input for the store and
// decompressing and decoding it again, as every write and every follow of
// another replica's input does. Bytes/op is the uncompressed size.
//
//	go test -run '^$' -bench Codec ./core/store/redis/
func BenchmarkCodec(b *testing.B) {
	snap := clusterInput(b, "bench", 1, resourcesPerCluster)
	encode, decode := redis.Codec()
	data, err := encode(snap)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("%d bytes stored for %d", len(data), snap.Size())
	b.Run("encode", func(b *testing.B) {
		b.SetBytes(int64(snap.Size()))
		b.ReportAllocs()
		for range b.N {
			if _, err := encode(snap); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.SetBytes(int64(snap.Size()))
		b.ReportAllocs()
		for range b.N {
			if err := decode(data, snap); err != nil {
				b.Fatal(err)
			}
		}
	})
}
