package catalog

import (
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	discoveryapi "github.com/meshrelay/meshrelay/api/discovery/v1alpha1"
	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/internal/testutil"
)

func input(t *testing.T, docs ...string) *snapshot.Snapshot {
	t.Helper()
	var rs []snapshot.Resource
	for _, d := range docs {
		r, err := snapshot.FromYAML([]byte(strings.TrimSpace(d)))
		if err != nil {
			t.Fatalf("%v\n%s", err, d)
		}
		rs = append(rs, r)
	}
	s, err := snapshot.New(1, rs)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

const (
	istioMesh   = `{apiVersion: discovery.meshrelay.io/v1alpha1, kind: Mesh, metadata: {name: istio}, spec: {type: istio, namespace: istio-system}}`
	ciliumMesh  = `{apiVersion: discovery.meshrelay.io/v1alpha1, kind: Mesh, metadata: {name: cilium}, spec: {type: cilium}}`
	injectedNS  = `{apiVersion: v1, kind: Namespace, metadata: {name: app, labels: {istio-injection: enabled}}}`
	revisionNS  = `{apiVersion: v1, kind: Namespace, metadata: {name: rev, labels: {istio.io/rev: canary}}}`
	plainNS     = `{apiVersion: v1, kind: Namespace, metadata: {name: plain}}`
	linkerdMesh = `{apiVersion: discovery.meshrelay.io/v1alpha1, kind: Mesh, metadata: {name: linkerd}, spec: {type: linkerd, namespace: linkerd}}`
	meshedNS    = `{apiVersion: v1, kind: Namespace, metadata: {name: meshed, annotations: {linkerd.io/inject: enabled}}}`
	deployment  = `{apiVersion: apps/v1, kind: Deployment, metadata: {name: NAME, namespace: NS}, spec: {selector: {matchLabels: {app: NAME}}, template: {metadata: {labels: {app: NAME}ANNOT}, spec: {containers: [{name: c, image: i}]}}}}`
	statefulSet = `{apiVersion: apps/v1, kind: StatefulSet, metadata: {name: db, namespace: app}, spec: {serviceName: db, selector: {matchLabels: {app: db}}, template: {metadata: {labels: {app: db}}, spec: {serviceAccountName: db, containers: [{name: c, image: i}]}}}}`
	daemonSet   = `{apiVersion: apps/v1, kind: DaemonSet, metadata: {name: node-agent, namespace: app}, spec: {selector: {matchLabels: {app: node-agent}}, template: {metadata: {labels: {app: node-agent, meshrelay.io/envoy-node: edge}}, spec: {containers: [{name: c, image: i}]}}}}`
)

func deploy(name, ns, annotations string) string {
	return strings.NewReplacer("NAME", name, "NS", ns, "ANNOT", annotations).Replace(deployment)
}

// The mesh rules: Istio by namespace label, revision label or template
// annotation, opted out by "false"; Linkerd by the template's or the
// namespace's linkerd.io/inject annotation; Cilium for every workload of
// a Cilium cluster; Envoy by the node label.
func TestMeshes(t *testing.T) {
	for name, c := range map[string]struct {
		docs []string
		want map[string][]string
	}{
		"istio": {
			docs: []string{istioMesh, injectedNS, revisionNS, plainNS,
				deploy("web", "app", ""), deploy("optout", "app", `, annotations: {sidecar.istio.io/inject: "false"}`),
				deploy("canary", "rev", ""), deploy("bare", "plain", ""), deploy("opted", "plain", `, annotations: {sidecar.istio.io/inject: "true"}`)},
			want: map[string][]string{"app/web": {"istio"}, "app/optout": nil, "rev/canary": {"istio"}, "plain/bare": nil, "plain/opted": {"istio"}},
		},
		"linkerd": {
			docs: []string{linkerdMesh, meshedNS, plainNS,
				deploy("web", "meshed", ""), deploy("optout", "meshed", `, annotations: {linkerd.io/inject: disabled}`),
				deploy("gw", "plain", `, annotations: {linkerd.io/inject: ingress}`), deploy("bare", "plain", "")},
			want: map[string][]string{"meshed/web": {"linkerd"}, "meshed/optout": nil, "plain/gw": {"linkerd"}, "plain/bare": nil},
		},
		"no linkerd in the cluster": {
			docs: []string{meshedNS, deploy("web", "meshed", "")},
			want: map[string][]string{"meshed/web": nil},
		},
		"no istio in the cluster": {
			docs: []string{injectedNS, deploy("web", "app", "")},
			want: map[string][]string{"app/web": nil},
		},
		"cilium and envoy": {
			docs: []string{ciliumMesh, daemonSet, deploy("web", "app", "")},
			want: map[string][]string{"app/node-agent": {"cilium", "envoy"}, "app/web": {"cilium"}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			got := map[string][]string{}
			for _, w := range Derive("c1", input(t, c.docs...)).Workloads {
				got[w.Namespace+"/"+w.Name] = w.Meshes
			}
			if d := cmp.Diff(c.want, got); d != "" {
				t.Errorf("meshes (-want +got):\n%s", d)
			}
		})
	}
}

// Workloads: kind, replicas and service account defaults, and endpoints
// owned by the longest matching name; Destinations: workloads, endpoints
// and (after Join) how many clusters have them.
func TestWorkloadsAndDestinations(t *testing.T) {
	docs := []string{
		deploy("reviews", "app", ""), deploy("reviews-v2", "app", ""), statefulSet, daemonSet,
		`{apiVersion: v1, kind: Node, metadata: {name: n1, labels: {topology.kubernetes.io/region: r1, topology.kubernetes.io/zone: z1}}}`,
		`{apiVersion: v1, kind: Service, metadata: {name: reviews, namespace: app}, spec: {selector: {app: reviews}, ports: [{port: 80, targetPort: 8080, name: http}]}}`,
		`{apiVersion: v1, kind: Service, metadata: {name: headless, namespace: app}, spec: {ports: [{port: 5432}]}}`,
		`{apiVersion: discovery.k8s.io/v1, kind: EndpointSlice, metadata: {name: reviews-x, namespace: app, labels: {kubernetes.io/service-name: reviews}}, addressType: IPv4,
		  endpoints: [{addresses: [10.0.0.1], nodeName: n1, targetRef: {kind: Pod, name: reviews-v2-abc-1}}, {addresses: [10.0.0.2], zone: z9, conditions: {ready: false}, targetRef: {kind: Pod, name: reviews-def-2}}]}`,
	}
	west := Derive("west", input(t, docs...))
	east := Derive("east", input(t, docs[5]))
	fleet := Join([]*Cluster{west, east})
	if fleet.Clusters[0].Name != "east" || fleet.Clusters[1].Name != "west" {
		t.Fatalf("Join order: %s, %s", fleet.Clusters[0].Name, fleet.Clusters[1].Name)
	}
	type row struct {
		Kind, SA                string
		Replicas, Eps, Ready    int32
		Localities, Destination []string
	}
	got := map[string]row{}
	for _, s := range fleet.Clusters[1].Workloads {
		got[s.Name] = row{s.Kind, s.ServiceAccount, s.Replicas, s.Endpoints, s.ReadyEndpoints, s.Localities, s.Destinations}
	}
	want := map[string]row{
		"reviews":    {"Deployment", "default", 1, 1, 0, []string{"/z9"}, []string{"reviews"}},
		"reviews-v2": {"Deployment", "default", 1, 1, 1, []string{"r1/z1"}, nil},
		"db":         {"StatefulSet", "db", 1, 0, 0, nil, nil},
		"node-agent": {"DaemonSet", "default", 0, 0, 0, nil, nil},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("workloads (-want +got):\n%s", d)
	}
	i := slices.IndexFunc(west.Destinations, func(d discoveryapi.DestinationSpec) bool { return d.Name == "reviews" })
	r := west.Destinations[i]
	if !slices.Equal(r.Workloads, []string{"Deployment/reviews"}) || r.Endpoints != 2 || r.ReadyEndpoints != 1 ||
		r.Ports[0].TargetPort != "8080" || r.Type != "ClusterIP" {
		t.Errorf("reviews destination = %+v", r)
	}
	if got := fleet.ServiceClusters("app", "reviews"); got != 2 {
		t.Errorf("ServiceClusters(app, reviews) = %d, want 2", got)
	}
	if got := fleet.ServiceClusters("app", "headless"); got != 1 {
		t.Errorf("ServiceClusters(app, headless) = %d, want 1", got)
	}
}

// The cache derives only the clusters whose input changed, forgets those
// that are gone, and keeps the fleet while nothing changed.
func TestCache(t *testing.T) {
	a := input(t, deploy("web", "app", ""))
	b := input(t, deploy("api", "app", ""))
	var c Cache
	f1 := c.Fleet(map[string]*snapshot.Snapshot{"a": a, "b": b})
	if f2 := c.Fleet(map[string]*snapshot.Snapshot{"a": a, "b": b}); f2 != f1 {
		t.Error("an unchanged fleet was joined again")
	}
	b2 := input(t, deploy("api", "app", ""), deploy("db", "app", ""))
	f3 := c.Fleet(map[string]*snapshot.Snapshot{"a": a, "b": b2})
	if f3 == f1 || f3.Clusters[0] != f1.Clusters[0] || len(f3.Clusters[1].Workloads) != 2 {
		t.Errorf("after b changed: a kept %v, b's workloads %d", f3.Clusters[0] == f1.Clusters[0], len(f3.Clusters[1].Workloads))
	}
	if f4 := c.Fleet(map[string]*snapshot.Snapshot{"b": b2}); len(f4.Clusters) != 1 || f4.Clusters[0].Name != "b" {
		t.Errorf("after a left: %d clusters", len(f4.Clusters))
	}
}

// Current answers without waiting for a derivation of more clusters than
// its caller would derive: with the fleet last derived, or none before the
// first. It waits for a small one, and derives a few changes itself.
func TestCacheCurrentDoesNotWaitForALargeDerivation(t *testing.T) {
	a := input(t, deploy("web", "app", ""))
	b := input(t, deploy("api", "app", ""))
	var c Cache
	// A derivation of a thousand clusters under way.
	c.deriving.Lock()
	c.deriveCount.Store(1000)
	if f, current := c.Current(map[string]*snapshot.Snapshot{"a": a}, 10); f != nil || current {
		t.Errorf("Current during the first derivation = %v, %t; want no fleet, not current", f, current)
	}
	c.deriveCount.Store(0)
	c.deriving.Unlock()
	f1, current := c.Current(map[string]*snapshot.Snapshot{"a": a}, 10)
	if !current || len(f1.Clusters) != 1 {
		t.Fatalf("Current with one change = %v, %t; want a's fleet", f1, current)
	}
	c.deriving.Lock()
	c.deriveCount.Store(1000)
	if f, current := c.Current(map[string]*snapshot.Snapshot{"a": a, "b": b}, 10); f != f1 || current {
		t.Errorf("Current during a large derivation = %v, %t; want the last fleet, not current", f, current)
	}
	c.deriving.Unlock()
	if f, current := c.Current(map[string]*snapshot.Snapshot{"a": a, "b": b}, 0); f != f1 || current {
		t.Errorf("Current with more changes than it derives = %v, %t; want the last fleet, not current", f, current)
	}
	// A small derivation under way is waited for.
	c.deriving.Lock()
	c.deriveCount.Store(1)
	got := make(chan *Fleet)
	go func() {
		f, _ := c.Current(map[string]*snapshot.Snapshot{"a": a, "b": b}, 10)
		got <- f
	}()
	c.deriveCount.Store(0)
	c.deriving.Unlock()
	if f := <-got; len(f.Clusters) != 2 {
		t.Errorf("Current after a small derivation: %d clusters, want 2", len(f.Clusters))
	}
}

// Derive never fails on what an agent may send: objects of the kinds it
// reads with any content, decodable or not.
func FuzzDerive(f *testing.F) {
	f.Add("Service", `{"spec":{"selector":{"app":"a"},"ports":[{"port":80,"targetPort":"http"}]}}`)
	f.Add("Deployment", `{"spec":{"replicas":null,"template":{"metadata":{"labels":{"app":"a"}}}}}`)
	f.Add("EndpointSlice", `{"metadata":{"labels":{"kubernetes.io/service-name":"x"}},"endpoints":[{"targetRef":{"name":"x-1"},"conditions":{}}]}`)
	f.Add("Mesh", `{"spec":{"type":"istio"}}`)
	f.Fuzz(func(t *testing.T, kind, body string) {
		ids := map[string]snapshot.ID{
			"Service":       {Version: "v1", Kind: "Service", Namespace: "ns", Name: "x"},
			"Deployment":    {Group: "apps", Version: "v1", Kind: "Deployment", Namespace: "ns", Name: "x"},
			"DaemonSet":     {Group: "apps", Version: "v1", Kind: "DaemonSet", Namespace: "ns", Name: "x"},
			"EndpointSlice": {Group: "discovery.k8s.io", Version: "v1", Kind: "EndpointSlice", Namespace: "ns", Name: "x"},
			"Node":          {Version: "v1", Kind: "Node", Name: "x"},
			"Mesh":          {Group: "discovery.meshrelay.io", Version: "v1alpha1", Kind: "Mesh", Name: "x"},
		}
		id, ok := ids[kind]
		if !ok {
			return
		}
		r, err := snapshot.NewResource(id, []byte(body))
		if err != nil {
			return
		}
		svc, _ := snapshot.NewResource(ids["Service"], []byte(`{"spec":{"selector":{"app":"a"}}}`))
		rs := []snapshot.Resource{r}
		if kind != "Service" {
			rs = append(rs, svc)
		}
		in, err := snapshot.New(1, rs)
		if err != nil {
			return
		}
		var c Cache
		c.Fleet(map[string]*snapshot.Snapshot{"c": in})
	})
}

// Clusters running the same application share its label maps and strings
// instead of holding a copy each; label maps with different pairs stay
// apart, however their keys and values split.
func TestClustersShareValues(t *testing.T) {
	docs := []string{
		deploy("web", "app", ""),
		`{apiVersion: v1, kind: Service, metadata: {name: web, namespace: app, labels: {tier: front}}, spec: {selector: {app: web}, ports: [{port: 80, name: http}]}}`,
		`{apiVersion: v1, kind: Service, metadata: {name: a, namespace: app, labels: {a: bc}}, spec: {ports: [{port: 80}]}}`,
		`{apiVersion: v1, kind: Service, metadata: {name: ab, namespace: app, labels: {ab: c}}, spec: {ports: [{port: 80}]}}`,
	}
	west, east := Derive("west", input(t, docs...)), Derive("east", input(t, docs...))
	same := func(a, b map[string]string) bool {
		return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
	}
	if w, e := west.Workloads[0], east.Workloads[0]; !same(w.Labels, e.Labels) {
		t.Errorf("the two clusters' web Workloads have labels %p and %p, want one shared map", w.Labels, e.Labels)
	}
	dst := func(c *Cluster, name string) discoveryapi.DestinationSpec {
		return c.Destinations[slices.IndexFunc(c.Destinations, func(d discoveryapi.DestinationSpec) bool { return d.Name == name })]
	}
	w, e := dst(west, "web"), dst(east, "web")
	if !same(w.Labels, e.Labels) {
		t.Errorf("the two clusters' web Destinations have labels %p and %p, want one shared map", w.Labels, e.Labels)
	}
	for what, s := range map[string][2]string{
		"namespace": {w.Namespace, e.Namespace}, "name": {w.Name, e.Name}, "port name": {w.Ports[0].Name, e.Ports[0].Name},
		"workload": {w.Workloads[0], e.Workloads[0]}, "service account": {west.Workloads[0].ServiceAccount, east.Workloads[0].ServiceAccount},
	} {
		if unsafe.StringData(s[0]) != unsafe.StringData(s[1]) {
			t.Errorf("the two clusters' %s %q is held twice, want one shared string", what, s[0])
		}
	}
	if unsafe.SliceData(w.Ports) != unsafe.SliceData(e.Ports) {
		t.Errorf("the two clusters' web ports %v are held twice, want one shared list", w.Ports)
	}
	if unsafe.SliceData(w.Workloads) != unsafe.SliceData(e.Workloads) {
		t.Errorf("the two clusters' web workloads %v are held twice, want one shared list", w.Workloads)
	}
	if a, ab := dst(west, "a").Labels, dst(west, "ab").Labels; same(a, ab) || a["a"] != "bc" || ab["ab"] != "c" {
		t.Errorf("labels {a: bc} and {ab: c} = %v and %v (shared %t), want each its own", a, ab, same(a, ab))
	}
}

// The table of shared label maps forgets a map once no cluster holds it,
// so that label values an agent chooses cannot grow it.
func TestSharedLabelsGoWithTheirClusters(t *testing.T) {
	key := labelsKey(map[string]string{"app": "web", "only-here": "x1"})
	c := Derive("c1", input(t, `{apiVersion: v1, kind: Service, metadata: {name: web, namespace: app, labels: {app: web, only-here: x1}}, spec: {ports: [{port: 80}]}}`))
	held := func() bool { return labelSets.has(key) }
	if !held() {
		t.Fatal("the cluster's label map is not in the shared table")
	}
	runtime.KeepAlive(c)
	testutil.Eventually(t, "the label map of a cluster no longer held forgotten", func() bool {
		runtime.GC()
		return !held()
	})
}
