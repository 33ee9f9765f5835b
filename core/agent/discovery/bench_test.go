package discovery

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/internal/testenv"
)

// benchObjects is how many objects BenchmarkKubeDiscovery10k creates.
const benchObjects = 10_000

var benchOnce struct {
	sync.Once
	err error
}

// populate creates benchObjects objects, a quarter each of Services,
// ServiceAccounts, Deployments and EndpointSlices, across ten namespaces.
func populate(cfg *rest.Config) error {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = -1, 0
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx := context.Background()
	nsGVR := schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	for i := range 10 {
		ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": fmt.Sprintf("bench-%d", i)}}}
		if _, err := dyn.Resource(nsGVR).Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	type job struct {
		gvr schema.GroupVersionResource
		obj *unstructured.Unstructured
	}
	jobs := make(chan job)
	errs := make(chan error, benchObjects)
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				if _, err := dyn.Resource(j.gvr).Namespace(j.obj.GetNamespace()).Create(ctx, j.obj, metav1.CreateOptions{}); err != nil {
					errs <- err
				}
			}
		}()
	}
	for i := range benchObjects / 4 {
		ns := fmt.Sprintf("bench-%d", i%10)
		name := fmt.Sprintf("app-%d", i)
		labels := map[string]any{"app": name, "version": "v1"}
		jobs <- job{schema.GroupVersionResource{Version: "v1", Resource: "services"}, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "Service", "metadata": map[string]any{"name": name, "namespace": ns, "labels": labels},
			"spec": map[string]any{"selector": map[string]any{"app": name}, "ports": []any{map[string]any{"name": "http", "port": int64(8080)}}},
		}}}
		jobs <- job{schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "ServiceAccount", "metadata": map[string]any{"name": name, "namespace": ns},
		}}}
		jobs <- job{schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"name": name, "namespace": ns, "labels": labels},
			"spec": map[string]any{
				"selector": map[string]any{"matchLabels": map[string]any{"app": name}},
				"template": map[string]any{
					"metadata": map[string]any{"labels": labels},
					"spec": map[string]any{"serviceAccountName": name, "containers": []any{map[string]any{
						"name": "app", "image": "registry.example/app:1.0", "ports": []any{map[string]any{"containerPort": int64(8080)}},
					}}},
				},
			},
		}}}
		jobs <- job{schema.GroupVersionResource{Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"}, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
			"metadata":    map[string]any{"name": name + "-abcde", "namespace": ns, "labels": map[string]any{"kubernetes.io/service-name": name}},
			"addressType": "IPv4",
			"ports":       []any{map[string]any{"name": "http", "port": int64(8080), "protocol": "TCP"}},
			"endpoints": []any{map[string]any{
				"addresses":  []any{fmt.Sprintf("10.%d.%d.%d", i/65536%256, i/256%256, i%256)},
				"conditions": map[string]any{"ready": true, "serving": true, "terminating": false},
			}},
		}}}
	}
	close(jobs)
	wg.Wait()
	close(errs)
	for err := range errs {
		return err
	}
	return nil
}

// BenchmarkKubeDiscovery10k measures the time from starting a Kube source to
// its first snapshot of a cluster holding 10,000 objects, and the heap the
// running source holds then.
func BenchmarkKubeDiscovery10k(b *testing.B) {
	k := testenv.SharedKube(b)
	benchOnce.Do(func() { benchOnce.err = populate(k.Config()) })
	if benchOnce.err != nil {
		b.Fatalf("populate: %v", benchOnce.err)
	}
	cfg := rest.CopyConfig(k.Config())
	cfg.QPS, cfg.Burst = -1, 0
	b.ReportAllocs()
	b.ResetTimer()
	var heap, resources float64
	for range b.N {
		b.StopTimer()
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		src, err := NewKube(cfg, KubeOptions{InputKinds: policyKinds, Logger: quietLogger()})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		first := make(chan *snapshot.Snapshot, 1)
		done := make(chan error, 1)
		b.StartTimer()
		go func() {
			done <- src.Run(ctx, func(s *snapshot.Snapshot) {
				select {
				case first <- s:
				default:
				}
			})
		}()
		s := <-first
		b.StopTimer()
		if s.Len() < benchObjects {
			b.Fatalf("first snapshot has %d resources, want at least %d", s.Len(), benchObjects)
		}
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		heap = float64(after.HeapAlloc-before.HeapAlloc) / (1 << 20)
		resources = float64(s.Len())
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(resources, "resources")
	b.ReportMetric(heap, "heap-MiB")
}

// BenchmarkServiceChangeToSnapshot measures the time from a Service change
// written to the API server to the snapshot carrying it leaving the
// source, debounce included (the agent sends its delta right after).
func BenchmarkServiceChangeToSnapshot(b *testing.B) {
	for _, debounce := range []time.Duration{10 * time.Millisecond, 100 * time.Millisecond} {
		b.Run(debounce.String(), func(b *testing.B) {
			k := testenv.SharedKube(b)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			dyn, err := dynamic.NewForConfig(k.Config())
			if err != nil {
				b.Fatal(err)
			}
			svcs := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "services"}).Namespace("default")
			name := "bench-change-" + strconv.Itoa(int(debounce.Milliseconds()))
			svc := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "v1", "kind": "Service",
				"metadata": map[string]any{"name": name, "labels": map[string]any{"rev": "0"}},
				"spec":     map[string]any{"ports": []any{map[string]any{"port": int64(80)}}},
			}}
			if _, err := svcs.Create(ctx, svc, metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
			defer svcs.Delete(context.Background(), name, metav1.DeleteOptions{})

			src, err := NewKube(k.Config(), KubeOptions{Debounce: debounce, InputKinds: policyKinds, Logger: quietLogger()})
			if err != nil {
				b.Fatal(err)
			}
			snaps := make(chan *snapshot.Snapshot, 64)
			go func() { _ = src.Run(ctx, func(s *snapshot.Snapshot) { snaps <- s }) }()
			revOf := func(s *snapshot.Snapshot) string {
				r, ok := s.Get(snapshot.ID{Version: "v1", Kind: "Service", Namespace: "default", Name: name})
				if !ok {
					return ""
				}
				var obj struct {
					Metadata struct {
						Labels map[string]string `json:"labels"`
					} `json:"metadata"`
				}
				_ = r.Decode(&obj)
				return obj.Metadata.Labels["rev"]
			}
			for s := range snaps {
				if revOf(s) == "0" {
					break
				}
			}
			b.ResetTimer()
			for i := range b.N {
				rev := strconv.Itoa(i + 1)
				cur, err := svcs.Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					b.Fatal(err)
				}
				cur.SetLabels(map[string]string{"rev": rev})
				if _, err := svcs.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
					b.Fatal(err)
				}
				for s := range snaps {
					if revOf(s) == rev {
						break
					}
				}
			}
		})
	}
}
