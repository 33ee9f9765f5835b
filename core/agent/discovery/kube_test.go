package discovery

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	discoveryv1alpha1 "github.com/meshrelay/meshrelay/api/discovery/v1alpha1"
	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/manifest"
	"github.com/meshrelay/meshrelay/internal/testenv"
	"github.com/meshrelay/meshrelay/internal/testutil"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// cluster is a test's client of the shared API server.
type cluster struct {
	t      *testing.T
	cfg    *rest.Config
	dyn    dynamic.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
}

func newCluster(t *testing.T, k *testenv.Kube) *cluster {
	t.Helper()
	cfg := rest.CopyConfig(k.Config())
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &cluster{t: t, cfg: cfg, dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))}
}

func (c *cluster) client(obj *unstructured.Unstructured) dynamic.ResourceInterface {
	c.t.Helper()
	gvk := obj.GroupVersionKind()
	m, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		c.mapper.Reset()
		if m, err = c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
			c.t.Fatalf("map %s: %v", gvk, err)
		}
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		return c.dyn.Resource(m.Resource).Namespace(obj.GetNamespace())
	}
	return c.dyn.Resource(m.Resource)
}

func (c *cluster) create(obj *unstructured.Unstructured) *unstructured.Unstructured {
	c.t.Helper()
	out, err := c.client(obj).Create(context.Background(), obj, metav1.CreateOptions{})
	if err != nil {
		c.t.Fatalf("create %s %s/%s: %v", obj.GetKind(), obj.GetNamespace(), obj.GetName(), err)
	}
	return out
}

func (c *cluster) createYAML(ns, y string) *unstructured.Unstructured {
	c.t.Helper()
	objs, err := manifest.DecodeDocument([]byte(y))
	if err != nil || len(objs) != 1 {
		c.t.Fatalf("bad fixture: %v", err)
	}
	u := &unstructured.Unstructured{Object: objs[0]}
	if ns != "" {
		u.SetNamespace(ns)
	}
	return c.create(u)
}

// applyFile creates the namespaced objects of a manifest in ns and returns
// how many of each kind it created.
func (c *cluster) applyFile(path, ns string) map[string]int {
	c.t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		c.t.Fatal(err)
	}
	counts := map[string]int{}
	for _, doc := range manifest.SplitDocuments(data) {
		objs, err := manifest.DecodeDocument(doc)
		if err != nil {
			c.t.Fatalf("%s: %v", path, err)
		}
		for _, o := range objs {
			u := &unstructured.Unstructured{Object: o}
			switch u.GetKind() {
			case "Namespace", "ClusterRole", "ClusterRoleBinding":
				continue
			}
			u.SetNamespace(ns)
			c.create(u)
			counts[u.GetKind()]++
		}
	}
	return counts
}

func startKube(t *testing.T, k *testenv.Kube, opts KubeOptions) *testutil.Collector {
	t.Helper()
	_, col := startKubeSource(t, k, opts)
	return col
}

// startKubeSource runs a Kube source until the test ends and returns it
// with what it publishes.
func startKubeSource(t *testing.T, k *testenv.Kube, opts KubeOptions) (*Kube, *testutil.Collector) {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quietLogger()
	}
	if opts.Debounce == 0 {
		opts.Debounce = 20 * time.Millisecond
	}
	src, err := NewKube(k.Config(), opts)
	if err != nil {
		t.Fatalf("NewKube() error = %v", err)
	}
	return src, testutil.RunSource(t, src)
}

func TestKubeBookinfo(t *testing.T) {
	k := testenv.SharedKube(t)
	c := newCluster(t, k)
	ns := k.CreateNamespace(t)
	other := k.CreateNamespace(t)
	counts := c.applyFile("testdata/bookinfo/bookinfo.yaml", ns)
	c.applyFile("testdata/bookinfo/bookinfo.yaml", other)
	c.applyFile("testdata/bookinfo/virtual-service-reviews-80-20.yaml", ns)
	c.applyFile("testdata/bookinfo/destination-rule-reviews.yaml", ns)

	col := startKube(t, k, KubeOptions{Filter: Filter{IncludeNamespaces: []string{ns}},
		InputKinds: []string{"networking.istio.io/VirtualService", "networking.istio.io/DestinationRule"}})
	s := col.WaitFor(t, "bookinfo is discovered", func(s *snapshot.Snapshot) bool {
		return countKind(s, "", "Service", ns) == counts["Service"] && countKind(s, "networking.istio.io", "DestinationRule", ns) == 1
	})
	for kind, group := range map[string]string{"Service": "", "Deployment": "apps", "ServiceAccount": ""} {
		if got := countKind(s, group, kind, ns); got != counts[kind] {
			t.Errorf("%s in %s = %d, want %d", kind, ns, got, counts[kind])
		}
		if got := countKind(s, group, kind, other); got != 0 {
			t.Errorf("%s in excluded %s = %d, want 0", kind, other, got)
		}
	}
	if !has(s, snapshot.ID{Version: "v1", Kind: "Namespace", Name: ns}) || has(s, snapshot.ID{Version: "v1", Kind: "Namespace", Name: other}) {
		t.Errorf("Namespaces: want %s only", ns)
	}
	vs := snapshot.ID{Group: "networking.istio.io", Version: "v1", Kind: "VirtualService", Namespace: ns, Name: "reviews"}
	if !has(s, vs) {
		t.Errorf("snapshot lacks %s", vs)
	}
	svc, _ := s.Get(snapshot.ID{Version: "v1", Kind: "Service", Namespace: ns, Name: "reviews"})
	for _, noise := range []string{"managedFields", "resourceVersion", "creationTimestamp", "uid"} {
		if containsKey(svc.Body, noise) {
			t.Errorf("Service body holds %q: %s", noise, svc.Body)
		}
	}
}

func containsKey(body []byte, key string) bool {
	return len(body) > 0 && (string(body) != "" && (indexOf(string(body), `"`+key+`"`) >= 0))
}

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

func TestKubeDeltas(t *testing.T) {
	k := testenv.SharedKube(t)
	c := newCluster(t, k)
	ns := k.CreateNamespace(t)
	c.applyFile("testdata/bookinfo/bookinfo.yaml", ns)
	node := c.createYAML("", `apiVersion: v1
kind: Node
metadata:
  name: `+ns+`
  labels: {topology.kubernetes.io/zone: zone-a, kubernetes.io/hostname: h}
`)
	col := startKube(t, k, KubeOptions{Filter: Filter{IncludeNamespaces: []string{ns}}, InputKinds: noCustomKinds})
	ctx := context.Background()
	svcID := snapshot.ID{Version: "v1", Kind: "Service", Namespace: ns, Name: "extra"}
	base := col.WaitFor(t, "bookinfo is discovered", func(s *snapshot.Snapshot) bool {
		return countKind(s, "apps", "Deployment", ns) == 6 && has(s, snapshot.ID{Version: "v1", Kind: "Node", Name: ns})
	})

	// Create.
	svc := c.createYAML(ns, `apiVersion: v1
kind: Service
metadata: {name: extra, labels: {app: extra}}
spec: {ports: [{port: 80}], selector: {app: extra}}
`)
	created := col.WaitFor(t, "the Service is created", func(s *snapshot.Snapshot) bool { return has(s, svcID) })
	if d := snapshot.Diff(base, created); len(d.Upserts) != 1 || len(d.Deletes) != 0 {
		t.Errorf("Diff after create: %d upserts, %d deletes, want 1, 0", len(d.Upserts), len(d.Deletes))
	}
	if created.Version() <= base.Version() {
		t.Errorf("Version() = %d after %d, want larger", created.Version(), base.Version())
	}

	// Update.
	svc.SetLabels(map[string]string{"app": "extra", "tier": "front"})
	svcs := c.dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "services"}).Namespace(ns)
	if _, err := svcs.Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	updated := col.WaitFor(t, "the Service is updated", func(s *snapshot.Snapshot) bool {
		r, ok := s.Get(svcID)
		return ok && indexOf(string(r.Body), `"tier":"front"`) >= 0
	})

	// Status-only churn on a Deployment publishes nothing: the next
	// snapshot holds only the marker created after it, and no snapshot
	// comes between.
	deps := c.dyn.Resource(schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}).Namespace(ns)
	dep, err := deps.Get(ctx, "reviews-v1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := col.Count()
	if err := unstructured.SetNestedField(dep.Object, map[string]any{"replicas": int64(1), "readyReplicas": int64(1), "observedGeneration": int64(1)}, "status"); err != nil {
		t.Fatal(err)
	}
	if _, err := deps.UpdateStatus(ctx, dep, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A Node's heartbeat and its non-topology labels are churn too.
	nodes := c.dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "nodes"})
	node.SetLabels(map[string]string{"topology.kubernetes.io/zone": "zone-a", "kubernetes.io/hostname": "h", "node.kubernetes.io/instance-type": "big"})
	if node, err = nodes.Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedSlice(node.Object, []any{map[string]any{
		"type": "Ready", "status": "True", "lastHeartbeatTime": time.Now().UTC().Format(time.RFC3339),
		"lastTransitionTime": time.Now().UTC().Format(time.RFC3339), "reason": "KubeletReady", "message": "ready",
	}}, "status", "conditions"); err != nil {
		t.Fatal(err)
	}
	if _, err := nodes.UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	marker := c.createYAML(ns, `apiVersion: apps/v1
kind: Deployment
metadata: {name: marker}
spec:
  selector: {matchLabels: {app: marker}}
  template:
    metadata: {labels: {app: marker}}
    spec: {containers: [{name: c, image: busybox}]}
`)
	markerID := snapshot.ID{Group: "apps", Version: "v1", Kind: "Deployment", Namespace: ns, Name: marker.GetName()}
	afterMarker := col.WaitFor(t, "the marker appears", func(s *snapshot.Snapshot) bool { return has(s, markerID) })
	if got := col.Count(); got != n+1 {
		t.Errorf("snapshots after status churn and marker = %d, want %d", got, n+1)
	}
	if d := snapshot.Diff(updated, afterMarker); len(d.Upserts) != 1 || d.Upserts[0].ID != markerID || len(d.Deletes) != 0 {
		t.Errorf("Diff after status churn = %v upserts, %v deletes; want only %s", d.Upserts, d.Deletes, markerID)
	}

	// Delete.
	if err := svcs.Delete(ctx, "extra", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deleted := col.WaitFor(t, "the Service is deleted", func(s *snapshot.Snapshot) bool { return !has(s, svcID) })
	if d := snapshot.Diff(afterMarker, deleted); len(d.Deletes) != 1 || d.Deletes[0] != svcID || len(d.Upserts) != 0 {
		t.Errorf("Diff after delete = %v upserts, %v deletes; want delete of %s", d.Upserts, d.Deletes, svcID)
	}
}

func TestKubeOtelDemo(t *testing.T) {
	k := testenv.SharedKube(t)
	c := newCluster(t, k)
	ns := k.CreateNamespace(t)
	counts := c.applyFile("testdata/otel-demo/opentelemetry-demo.yaml", ns)
	col := startKube(t, k, KubeOptions{Filter: Filter{IncludeNamespaces: []string{ns}}, InputKinds: noCustomKinds})
	s := col.WaitFor(t, "the demo is discovered", func(s *snapshot.Snapshot) bool {
		return countKind(s, "apps", "Deployment", ns) == counts["Deployment"] && countKind(s, "", "Service", ns) == counts["Service"]
	})
	for _, kk := range []struct{ group, kind string }{{"", "Service"}, {"apps", "Deployment"}, {"apps", "StatefulSet"}, {"", "ServiceAccount"}} {
		if got := countKind(s, kk.group, kk.kind, ns); got != counts[kk.kind] || got == 0 {
			t.Errorf("%s = %d, want %d", kk.kind, got, counts[kk.kind])
		}
	}
	if got := countKind(s, "", "ConfigMap", ns); got != 0 {
		t.Errorf("ConfigMaps = %d, want 0 (not discovered)", got)
	}
}

func TestKubeComputedAndCRDs(t *testing.T) {
	k := testenv.SharedKube(t)
	c := newCluster(t, k)
	ctx := context.Background()
	istioNS := k.CreateNamespace(t)
	nsObj, err := c.dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Get(ctx, istioNS, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nsObj.SetLabels(map[string]string{"topology.istio.io/network": "net-a"})
	if _, err := c.dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Update(ctx, nsObj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	col := startKube(t, k, KubeOptions{Filter: Filter{ExcludeNamespaces: []string{istioNS}}, InputKinds: []string{"policy.meshrelay.io/TrafficPolicy"}})

	// The apiserver is shared and runs no namespace controller: remove the
	// control plane afterwards so later runs find only their own.
	t.Cleanup(func() {
		err := c.dyn.Resource(schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}).Namespace(istioNS).
			Delete(context.Background(), "istiod", metav1.DeleteOptions{})
		if err != nil {
			t.Errorf("delete istiod: %v", err)
		}
	})
	c.createYAML(istioNS, `apiVersion: apps/v1
kind: Deployment
metadata: {name: istiod, labels: {app: istiod}}
spec:
  selector: {matchLabels: {app: istiod}}
  template:
    metadata: {labels: {app: istiod}}
    spec: {containers: [{name: discovery, image: "docker.io/istio/pilot:1.31.0"}]}
`)
	gw := c.createYAML(istioNS, `apiVersion: v1
kind: Service
metadata: {name: istio-eastwestgateway, labels: {istio: eastwestgateway}}
spec:
  type: LoadBalancer
  selector: {istio: eastwestgateway}
  ports: [{name: status-port, port: 15021}, {name: tls, port: 15443}]
`)
	meshID := snapshot.ID{Group: discoveryv1alpha1.Group, Version: discoveryv1alpha1.Version, Kind: "Mesh", Name: "istio"}
	gwID := snapshot.ID{Group: discoveryv1alpha1.Group, Version: discoveryv1alpha1.Version, Kind: "Gateway", Namespace: istioNS, Name: "istio-eastwestgateway"}
	s := col.WaitFor(t, "the istio Mesh is computed", func(s *snapshot.Snapshot) bool { return has(s, meshID) && has(s, gwID) })
	var mesh discoveryv1alpha1.Mesh
	r, _ := s.Get(meshID)
	if err := r.Decode(&mesh); err != nil {
		t.Fatal(err)
	}
	if mesh.Spec.Namespace != istioNS || mesh.Spec.Version != "1.31.0" || mesh.Spec.Network != "net-a" {
		t.Errorf("Mesh spec = %+v, want namespace %s, version 1.31.0, network net-a", mesh.Spec, istioNS)
	}
	if countKind(s, "", "Service", istioNS) != 0 {
		t.Error("objects of the excluded namespace are in the snapshot")
	}

	// The load balancer gets an address: the Gateway follows.
	if err := unstructured.SetNestedSlice(gw.Object, []any{map[string]any{"ip": "192.0.2.10"}}, "status", "loadBalancer", "ingress"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "services"}).Namespace(istioNS).UpdateStatus(ctx, gw, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	col.WaitFor(t, "the Gateway has the address", func(s *snapshot.Snapshot) bool {
		r, ok := s.Get(gwID)
		return ok && indexOf(string(r.Body), `"192.0.2.10"`) >= 0
	})

	// meshrelay policies: CRDs installed while the source runs.
	polNS := k.CreateNamespace(t)
	k.InstallCRDs(t, "deploy/crds/policy.meshrelay.io_trafficpolicies.yaml")
	tp := `apiVersion: policy.meshrelay.io/v1alpha1
kind: TrafficPolicy
metadata: {name: reviews-timeout}
spec:
  destinationSelectors: [{names: [reviews]}]
  http: [{name: all, timeout: 2s}]
`
	var created *unstructured.Unstructured
	testutil.EventuallyWhy(t, "create TrafficPolicy", func() (bool, string) {
		objs, _ := manifest.DecodeDocument([]byte(tp))
		u := &unstructured.Unstructured{Object: objs[0]}
		u.SetNamespace(polNS)
		c.mapper.Reset()
		created, err = c.dyn.Resource(schema.GroupVersionResource{Group: "policy.meshrelay.io", Version: "v1alpha1", Resource: "trafficpolicies"}).
			Namespace(polNS).Create(ctx, u, metav1.CreateOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("create TrafficPolicy: %v", err)
		}
		return err == nil, fmt.Sprint(err)
	})
	polID := snapshot.ID{Group: "policy.meshrelay.io", Version: "v1alpha1", Kind: "TrafficPolicy", Namespace: polNS, Name: created.GetName()}
	col.WaitFor(t, "the TrafficPolicy is discovered", func(s *snapshot.Snapshot) bool { return has(s, polID) })
}

// TestKubeLinkerdTrust: the Linkerd Mesh carries the trust domain and
// anchors of Linkerd's ConfigMaps, watched by name, following their
// changes; neither ConfigMap is an input.
func TestKubeLinkerdTrust(t *testing.T) {
	k := testenv.SharedKube(t)
	c := newCluster(t, k)
	ns := k.CreateNamespace(t)
	col := startKube(t, k, KubeOptions{InputKinds: noCustomKinds})
	deployments := c.dyn.Resource(schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}).Namespace(ns)
	t.Cleanup(func() {
		if err := deployments.Delete(context.Background(), LinkerdDestination, metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete %s: %v", LinkerdDestination, err)
		}
	})
	c.createYAML(ns, `apiVersion: apps/v1
kind: Deployment
metadata: {name: linkerd-destination}
spec:
  selector: {matchLabels: {app: dst}}
  template:
    metadata: {labels: {app: dst}}
    spec: {containers: [{name: destination, image: "cr.l5d.io/linkerd/controller:edge-25.8.1"}]}
`)
	cfg := c.createYAML(ns, `apiVersion: v1
kind: ConfigMap
metadata: {name: linkerd-config}
data: {values: "identityTrustDomain: corp.example\n"}
`)
	pemA, fpA := trustAnchor(t)
	roots := c.createYAML(ns, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: linkerd-identity-trust-roots}\ndata:\n  ca-bundle.crt: |\n"+indent(pemA, "    "))
	meshID := snapshot.ID{Group: discoveryv1alpha1.Group, Version: discoveryv1alpha1.Version, Kind: "Mesh", Name: discoveryv1alpha1.MeshLinkerd}
	mesh := func(s *snapshot.Snapshot) (discoveryv1alpha1.MeshSpec, bool) {
		r, ok := s.Get(meshID)
		if !ok {
			return discoveryv1alpha1.MeshSpec{}, false
		}
		var m discoveryv1alpha1.Mesh
		if err := r.Decode(&m); err != nil || m.Spec.Namespace != ns {
			return discoveryv1alpha1.MeshSpec{}, false
		}
		return m.Spec, true
	}
	col.WaitFor(t, "the linkerd Mesh with the ConfigMaps' trust domain and anchor", func(s *snapshot.Snapshot) bool {
		m, ok := mesh(s)
		return ok && m.TrustDomain == "corp.example" && slices.Equal(m.TrustAnchors, []string{fpA})
	})

	pemB, fpB := trustAnchor(t)
	if err := unstructured.SetNestedField(roots.Object, pemA+pemB, "data", "ca-bundle.crt"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.client(roots).Update(context.Background(), roots, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(cfg.Object, "identityTrustDomain: east.example\n", "data", "values"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.client(cfg).Update(context.Background(), cfg, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	want := []string{fpA, fpB}
	slices.Sort(want)
	s := col.WaitFor(t, "the linkerd Mesh following both ConfigMaps", func(s *snapshot.Snapshot) bool {
		m, ok := mesh(s)
		return ok && m.TrustDomain == "east.example" && slices.Equal(m.TrustAnchors, want)
	})
	if n := countKind(s, "", "ConfigMap", ns); n != 0 {
		t.Errorf("the snapshot holds %d ConfigMaps; none is an input", n)
	}
}

func indent(s, prefix string) string {
	lines := strings.SplitAfter(strings.TrimSuffix(s, "\n"), "\n")
	return prefix + strings.Join(lines, prefix) + "\n"
}

// TestKubeCiliumEnvoyConfig: the Cilium Mesh says whether Cilium's Envoy
// takes CiliumEnvoyConfig, from the cilium-config ConfigMap in the
// agents' namespace, following its changes; no ConfigMap is an input.
func TestKubeCiliumEnvoyConfig(t *testing.T) {
	k := testenv.SharedKube(t)
	c := newCluster(t, k)
	ns := k.CreateNamespace(t)
	col := startKube(t, k, KubeOptions{InputKinds: noCustomKinds})
	daemonSets := c.dyn.Resource(schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "daemonsets"}).Namespace(ns)
	t.Cleanup(func() {
		if err := daemonSets.Delete(context.Background(), "cilium", metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete cilium: %v", err)
		}
	})
	c.createYAML(ns, `apiVersion: apps/v1
kind: DaemonSet
metadata: {name: cilium, labels: {k8s-app: cilium}}
spec:
  selector: {matchLabels: {k8s-app: cilium}}
  template:
    metadata: {labels: {k8s-app: cilium}}
    spec: {containers: [{name: cilium-agent, image: "quay.io/cilium/cilium:v1.18.2"}]}
`)
	cfg := c.createYAML(ns, `apiVersion: v1
kind: ConfigMap
metadata: {name: cilium-config}
data: {enable-envoy-config: "false", cluster-name: west}
`)
	c.createYAML(ns, `apiVersion: v1
kind: ConfigMap
metadata: {name: unrelated}
data: {enable-envoy-config: "true"}
`)
	meshID := snapshot.ID{Group: discoveryv1alpha1.Group, Version: discoveryv1alpha1.Version, Kind: "Mesh", Name: "cilium"}
	envoyConfig := func(s *snapshot.Snapshot) (bool, bool) {
		r, ok := s.Get(meshID)
		if !ok {
			return false, false
		}
		var mesh discoveryv1alpha1.Mesh
		if err := r.Decode(&mesh); err != nil || mesh.Spec.Namespace != ns {
			return false, false
		}
		return mesh.Spec.EnvoyConfig, true
	}
	col.WaitFor(t, "the cilium Mesh without envoy config", func(s *snapshot.Snapshot) bool {
		on, found := envoyConfig(s)
		return found && !on
	})

	if err := unstructured.SetNestedField(cfg.Object, "true", "data", "enable-envoy-config"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.client(cfg).Update(context.Background(), cfg, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	s := col.WaitFor(t, "the cilium Mesh with envoy config", func(s *snapshot.Snapshot) bool {
		on, _ := envoyConfig(s)
		return on
	})
	if n := countKind(s, "", "ConfigMap", ns); n != 0 {
		t.Errorf("the snapshot holds %d ConfigMaps; none is an input", n)
	}
}
