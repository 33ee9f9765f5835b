package sink

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/internal/testenv"
	"github.com/meshrelay/meshrelay/internal/testutil"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

var (
	vsGVR = schema.GroupVersionResource{Group: "networking.istio.io", Version: "v1", Resource: "virtualservices"}
	cmGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	tpGVR = schema.GroupVersionResource{Group: "policy.meshrelay.io", Version: "v1alpha1", Resource: "trafficpolicies"}
)

// res builds a desired resource as a translator emits it, with the SDK's
// ownership labels.
func res(t *testing.T, y string) snapshot.Resource {
	t.Helper()
	r, err := snapshot.FromYAML([]byte(y))
	if err != nil {
		t.Fatalf("bad fixture: %v", err)
	}
	return r
}

func snap(t *testing.T, rs ...snapshot.Resource) *snapshot.Snapshot {
	t.Helper()
	s, err := snapshot.New(1, rs)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func virtualService(t *testing.T, ns, name, host string, weight int) snapshot.Resource {
	return res(t, `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: `+name+`
  namespace: `+ns+`
  labels: {app.kubernetes.io/managed-by: meshrelay, meshrelay.io/plugin: istio, meshrelay.io/policy: trafficpolicy.`+name+`}
  annotations: {meshrelay.io/policies: TrafficPolicy/`+ns+`/`+name+`}
spec:
  hosts: [`+host+`]
  http:
  - route:
    - destination: {host: `+host+`, subset: v1}
      weight: `+itoa(weight)+`
    - destination: {host: `+host+`, subset: v2}
      weight: `+itoa(100-weight)+`
`)
}

func itoa(i int) string {
	const digits = "0123456789"
	if i < 10 {
		return digits[i : i+1]
	}
	return itoa(i/10) + digits[i%10:i%10+1]
}

func configMap(t *testing.T, ns, name, value string) snapshot.Resource {
	return res(t, `apiVersion: v1
kind: ConfigMap
metadata:
  name: `+name+`
  namespace: `+ns+`
  labels: {app.kubernetes.io/managed-by: meshrelay, meshrelay.io/plugin: istio}
data: {key: `+value+`}
`)
}

func newSink(t *testing.T, k *testenv.Kube, opts KubeOptions) *Kube {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quietLogger()
	}
	if opts.ServerID == "" {
		opts.ServerID = "server-1"
	}
	s, err := NewKube(k.Config(), opts)
	if err != nil {
		t.Fatalf("NewKube() error = %v", err)
	}
	return s
}

// runSink runs s.Run until the test ends.
func runSink(t *testing.T, s *Kube) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run() = %v", err)
		}
	})
}

func apply(t *testing.T, s *Kube, backend string, desired *snapshot.Snapshot, prune bool) map[snapshot.ID]error {
	t.Helper()
	errs, err := s.Apply(context.Background(), backend, desired, prune)
	if err != nil {
		t.Fatalf("Apply(%s) error = %v", backend, err)
	}
	return errs
}

func get(t *testing.T, dyn dynamic.Interface, gvr schema.GroupVersionResource, ns, name string) *unstructured.Unstructured {
	t.Helper()
	u, err := dyn.Resource(gvr).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatalf("get %s %s/%s: %v", gvr.Resource, ns, name, err)
	}
	return u
}

func weightOf(u *unstructured.Unstructured) int64 {
	http, _, _ := unstructured.NestedSlice(u.Object, "spec", "http")
	route, _, _ := unstructured.NestedSlice(http[0].(map[string]any), "route")
	w, _, _ := unstructured.NestedInt64(route[0].(map[string]any), "weight")
	return w
}

func TestKubeApplyUpdatePrune(t *testing.T) {
	k := testenv.SharedKube(t)
	dyn := k.Dynamic(t)
	ns := k.CreateNamespace(t)
	ctx := context.Background()
	s := newSink(t, k, KubeOptions{})

	// An unowned look-alike of a desired object, and an unowned object of a
	// kind the sink prunes.
	lookalike := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "taken", "namespace": ns},
		"data":     map[string]any{"key": "theirs"},
	}}
	if _, err := dyn.Resource(cmGVR).Namespace(ns).Create(ctx, lookalike, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bystander := lookalike.DeepCopy()
	bystander.SetName("bystander")
	if _, err := dyn.Resource(cmGVR).Namespace(ns).Create(ctx, bystander, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	reviews := virtualService(t, ns, "reviews", "reviews", 80)
	ratings := virtualService(t, ns, "ratings", "ratings", 50)
	owned := configMap(t, ns, "ours", "a")
	taken := configMap(t, ns, "taken", "mine")
	errs := apply(t, s, "istio", snap(t, reviews, ratings, owned, taken), true)
	if len(errs) != 1 || !errors.Is(errs[taken.ID], ErrNotOwned) {
		t.Fatalf("Apply() errors = %v, want only %s not owned", errs, taken.ID)
	}
	vs := get(t, dyn, vsGVR, ns, "reviews")
	if vs == nil {
		t.Fatal("VirtualService reviews was not created")
	}
	if l := vs.GetLabels(); l[ManagedByLabel] != ManagedByValue || l[BackendLabel] != "istio" || l["meshrelay.io/plugin"] != "istio" || l["meshrelay.io/policy"] != "trafficpolicy.reviews" {
		t.Errorf("labels = %v, want ownership labels kept and backend stamped", l)
	}
	if a := vs.GetAnnotations(); a[ServerAnnotation] != "server-1" || a["meshrelay.io/policies"] == "" {
		t.Errorf("annotations = %v, want server and policies", a)
	}
	if got := weightOf(vs); got != 80 {
		t.Errorf("weight = %d, want 80", got)
	}
	var managers []string
	for _, mf := range vs.GetManagedFields() {
		managers = append(managers, mf.Manager+"/"+string(mf.Operation))
	}
	if len(managers) != 1 || managers[0] != "meshrelay-agent/Apply" {
		t.Errorf("managed fields = %v, want meshrelay-agent/Apply", managers)
	}
	if cm := get(t, dyn, cmGVR, ns, "taken"); cm.Object["data"].(map[string]any)["key"] != "theirs" || cm.GetLabels()[ManagedByLabel] != "" {
		t.Errorf("look-alike changed: %v", cm.Object)
	}

	// Another backend's object of the same kind is never pruned by istio.
	other := configMap(t, ns, "other-backend", "x")
	if errs := apply(t, s, "cilium", snap(t, other), true); len(errs) != 0 {
		t.Fatalf("Apply(cilium) errors = %v", errs)
	}

	// Update.
	if errs := apply(t, s, "istio", snap(t, virtualService(t, ns, "reviews", "reviews", 20), ratings, owned), true); len(errs) != 0 {
		t.Fatalf("Apply() errors = %v", errs)
	}
	if got := weightOf(get(t, dyn, vsGVR, ns, "reviews")); got != 20 {
		t.Errorf("weight after update = %d, want 20", got)
	}

	// prune=false deletes nothing.
	if errs := apply(t, s, "istio", snap(t, reviews), false); len(errs) != 0 {
		t.Fatalf("Apply(prune=false) errors = %v", errs)
	}
	for _, name := range []string{"reviews", "ratings"} {
		if get(t, dyn, vsGVR, ns, name) == nil {
			t.Errorf("VirtualService %s deleted with prune=false", name)
		}
	}
	if get(t, dyn, cmGVR, ns, "ours") == nil {
		t.Error("ConfigMap ours deleted with prune=false")
	}

	// prune=true deletes only what istio owns and no longer desires.
	if errs := apply(t, s, "istio", snap(t, reviews), true); len(errs) != 0 {
		t.Fatalf("Apply(prune=true) errors = %v", errs)
	}
	if get(t, dyn, vsGVR, ns, "ratings") != nil || get(t, dyn, cmGVR, ns, "ours") != nil {
		t.Error("owned objects no longer desired were not pruned")
	}
	for _, name := range []string{"taken", "bystander", "other-backend"} {
		if get(t, dyn, cmGVR, ns, name) == nil {
			t.Errorf("ConfigMap %s pruned, want untouched", name)
		}
	}
	if get(t, dyn, vsGVR, ns, "reviews") == nil {
		t.Error("desired VirtualService pruned")
	}

	// A desired object in another version than the one listed for pruning
	// is still desired.
	legacy := res(t, `apiVersion: networking.istio.io/v1beta1
kind: VirtualService
metadata:
  name: legacy
  namespace: `+ns+`
  labels: {app.kubernetes.io/managed-by: meshrelay, meshrelay.io/plugin: istio}
spec: {hosts: [legacy]}
`)
	for range 2 {
		if errs := apply(t, s, "istio", snap(t, reviews, legacy), true); len(errs) != 0 {
			t.Fatalf("Apply(v1beta1) errors = %v", errs)
		}
	}
	if get(t, dyn, vsGVR, ns, "legacy") == nil || get(t, dyn, vsGVR, ns, "reviews") == nil {
		t.Error("desired objects pruned when listed in another version")
	}

	// Errors: nothing could be attempted.
	if _, err := s.Apply(ctx, "", snap(t), true); err == nil {
		t.Error("Apply with no backend succeeded")
	}
	if _, err := s.Apply(ctx, "istio", nil, true); err == nil {
		t.Error("Apply with no snapshot succeeded")
	}
}

func driftCount(t *testing.T, g prometheus.Gatherer) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() == "meshrelay_agent_drift_corrections_total" {
			for _, m := range mf.GetMetric() {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}

func TestKubeDriftCorrected(t *testing.T) {
	k := testenv.SharedKube(t)
	dyn := k.Dynamic(t)
	ns := k.CreateNamespace(t)
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	s := newSink(t, k, KubeOptions{Registerer: reg, RetryInterval: 100 * time.Millisecond})
	runSink(t, s)

	reviews := virtualService(t, ns, "reviews", "reviews", 80)
	if errs := apply(t, s, "istio", snap(t, reviews), true); len(errs) != 0 {
		t.Fatalf("Apply() errors = %v", errs)
	}
	// Wait until the sink watches VirtualServices, then edit by hand.
	testutil.Eventually(t, "the sink watches VirtualServices", func() bool {
		_, ok := s.cached(vsGVR, ns, "reviews")
		return ok
	})
	if got := driftCount(t, reg); got != 0 {
		t.Fatalf("drift corrections before any edit = %v, want 0", got)
	}
	vs := get(t, dyn, vsGVR, ns, "reviews")
	http, _, _ := unstructured.NestedSlice(vs.Object, "spec", "http")
	route := http[0].(map[string]any)["route"].([]any)
	route[0].(map[string]any)["weight"] = int64(0)
	route[1].(map[string]any)["weight"] = int64(100)
	if err := unstructured.SetNestedSlice(vs.Object, http, "spec", "http"); err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(vsGVR).Namespace(ns).Update(ctx, vs, metav1.UpdateOptions{FieldManager: "kubectl-edit"}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the edit is reverted", func() bool {
		u := get(t, dyn, vsGVR, ns, "reviews")
		return u != nil && weightOf(u) == 80
	})
	// The counter moves once the correcting apply returned.
	testutil.Eventually(t, "the correction to be counted", func() bool { return driftCount(t, reg) >= 1 })

	// Deleted by hand: recreated.
	before := driftCount(t, reg)
	if err := dyn.Resource(vsGVR).Namespace(ns).Delete(ctx, "reviews", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the deleted object is recreated", func() bool { return get(t, dyn, vsGVR, ns, "reviews") != nil })
	testutil.Eventually(t, "the recreation to be counted", func() bool { return driftCount(t, reg) > before })

	// Applying the same snapshot again writes nothing: no drift either.
	rv := get(t, dyn, vsGVR, ns, "reviews").GetResourceVersion()
	testutil.Eventually(t, "the watch sees the recreated object", func() bool {
		u, ok := s.cached(vsGVR, ns, "reviews")
		return ok && u.GetResourceVersion() == rv
	})
	if errs := apply(t, s, "istio", snap(t, reviews), true); len(errs) != 0 {
		t.Fatalf("Apply() errors = %v", errs)
	}
	if got := get(t, dyn, vsGVR, ns, "reviews").GetResourceVersion(); got != rv {
		t.Errorf("resourceVersion after a no-op Apply = %s, want %s", got, rv)
	}
}

func TestKubeMissingCRDAppliedWhenInstalled(t *testing.T) {
	k := testenv.SharedKube(t)
	dyn := k.Dynamic(t)
	ns := k.CreateNamespace(t)
	var (
		mu      sync.Mutex
		reports []error
	)
	s := newSink(t, k, KubeOptions{RetryInterval: 100 * time.Millisecond, Report: func(backend string, results map[snapshot.ID]error) {
		mu.Lock()
		defer mu.Unlock()
		for _, err := range results {
			reports = append(reports, err)
		}
	}})
	runSink(t, s)

	tp := res(t, `apiVersion: policy.meshrelay.io/v1alpha1
kind: TrafficPolicy
metadata:
  name: reviews-timeout
  namespace: `+ns+`
  labels: {app.kubernetes.io/managed-by: meshrelay, meshrelay.io/plugin: test}
spec:
  destinationSelectors: [{names: [reviews]}]
  http: [{name: all, timeout: 2s}]
`)
	cm := configMap(t, ns, "alongside", "v")
	errs := apply(t, s, "test", snap(t, tp, cm), true)
	if len(errs) != 1 || !errors.Is(errs[tp.ID], ErrNoKind) || !strings.Contains(errs[tp.ID].Error(), "no kind policy.meshrelay.io/v1alpha1/TrafficPolicy in the cluster (CRD missing?)") {
		t.Fatalf("Apply() errors = %v, want only %s with a missing kind", errs, tp.ID)
	}
	if get(t, dyn, cmGVR, ns, "alongside") == nil {
		t.Fatal("the ConfigMap beside the missing kind was not applied")
	}

	k.InstallCRDs(t, "deploy/crds/policy.meshrelay.io_trafficpolicies.yaml")
	// The apiserver is shared: leave it without the CRD, as this test found it.
	t.Cleanup(func() {
		crds := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
		name := "trafficpolicies.policy.meshrelay.io"
		if err := crds.Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete CRD: %v", err)
			return
		}
		testutil.Eventually(t, "the CRD to be gone", func() bool {
			_, err := crds.Get(context.Background(), name, metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		})
	})
	testutil.Eventually(t, "the TrafficPolicy is applied after its CRD is installed", func() bool {
		return get(t, dyn, tpGVR, ns, "reviews-timeout") != nil
	})
	testutil.Eventually(t, "the success is reported", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(reports) > 0 && reports[len(reports)-1] == nil
	})
}
