package envoy_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/meshrelay/meshrelay/plugins/envoy"
	"github.com/meshrelay/meshrelay/sdk/sdktest"
)

// The fleet model these tests edit is sdktest's.
type (
	obj     = sdktest.Object
	fleet   = sdktest.Model
	cluster = sdktest.ModelCluster
)

var (
	get         = sdktest.Get
	kindOf      = sdktest.KindOf
	nameOf      = sdktest.NameOf
	namespaceOf = sdktest.NamespaceOf
	deepCopy    = sdktest.DeepCopy
	decodeObj   = sdktest.Decode
	fleetOf     = sdktest.ModelOf
)

// loadFleet reads a testdata fixture for editing.
func loadFleet(t testing.TB, name string) *fleet {
	t.Helper()
	f, err := sdktest.LoadFixture(filepath.Join("testdata", name+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return fleetOf(t, f)
}

func labelsOf(o obj) obj           { return get(o, "metadata", "labels") }
func listOf(o obj, k string) []any { l, _ := o[k].([]any); return l }

// incrementalFleet is four clusters: east and west as in the
// virtualdestination fixture (envoy node groups, reviews-global over their
// reviews, ratings-global over every ratings), north a copy of west with
// its own addresses and envoy node groups (its reviews is not exported,
// its ratings is), and south a copy without the envoy mesh (its ratings is
// exported all the same).
func incrementalFleet(t testing.TB) *fleet {
	t.Helper()
	f, err := sdktest.LoadFixture(filepath.Join("testdata", "virtualdestination.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var west sdktest.Cluster
	for _, c := range f.Clusters {
		if c.Name == "west" {
			west = c
		}
	}
	copyOf := func(name, net, region string, meshes []string) sdktest.Cluster {
		r := strings.NewReplacer("10.2.", net, "west-node", name+"-node", "us-west-2", region)
		c := sdktest.Cluster{Name: name, Meshes: meshes}
		for _, raw := range west.Objects {
			c.Objects = append(c.Objects, json.RawMessage(r.Replace(string(raw))))
		}
		return c
	}
	f.Clusters = append(f.Clusters,
		copyOf("north", "10.4.", "eu-north-1", []string{"envoy"}),
		copyOf("south", "10.3.", "eu-south-1", nil))
	return fleetOf(t, f)
}

// editEndpoints adds a ready endpoint to the first EndpointSlice of a Service.
func editEndpoints(c *cluster, service, address string) {
	for _, es := range c.OfKind("EndpointSlice") {
		if labelsOf(es)["kubernetes.io/service-name"] == service {
			es["endpoints"] = append(listOf(es, "endpoints"), obj{"addresses": []any{address}, "conditions": obj{"ready": true}})
			return
		}
	}
}

// computedAfter runs base then changed through a session and returns the
// targets the change computed. It also checks the incremental outputs
// against full translations.
func computedAfter(t *testing.T, base *fleet, change func(*fleet)) []string {
	t.Helper()
	changed := base.Clone(t)
	change(changed)
	s := sdktest.NewSession(t, envoy.New())
	s.Update(base.Fixture(t))
	// south has no envoy mesh: the SDK does not compute it.
	if got, want := s.Computed(), []string{"east", "north", "west"}; !slices.Equal(got, want) {
		t.Fatalf("first update computed %v, want %v", got, want)
	}
	s.Update(changed.Fixture(t))
	sdktest.CheckIncremental(t, envoy.New(), base.Fixture(t), changed.Fixture(t))
	return s.Computed()
}

// TestLocalChangeComputesItsTarget changes what only one cluster's outputs
// use and expects that target alone to be computed again.
func TestLocalChangeComputesItsTarget(t *testing.T) {
	base := incrementalFleet(t)
	tests := map[string]struct {
		change func(*fleet)
		want   []string
	}{
		"deployment": {func(f *fleet) {
			d := f.Cluster("east").Object("Deployment", "frontend")
			get(d, "spec", "template", "metadata", "labels")["version"] = "v2"
		}, []string{"east"}},
		"new service": {func(f *fleet) {
			c := f.Cluster("east")
			c.Objects = append(c.Objects, obj{"apiVersion": "v1", "kind": "Service",
				"metadata": obj{"name": "details", "namespace": "shop", "labels": obj{"app": "details"}},
				"spec":     obj{"selector": obj{"app": "reviews"}, "ports": []any{obj{"name": "grpc", "port": 9070, "targetPort": 8080}}}})
		}, []string{"east"}},
		"service not exported": {func(f *fleet) {
			labelsOf(f.Cluster("north").Object("Service", "reviews"))["tier"] = "gold"
		}, []string{"north"}},
		"exported service, same labels and ports": {func(f *fleet) {
			get(f.Cluster("west").Object("Service", "reviews"), "metadata", "annotations")["note"] = "x"
		}, []string{"west"}},
		"endpoints not exported": {func(f *fleet) {
			editEndpoints(f.Cluster("north"), "reviews", "10.4.0.99")
		}, []string{"north"}},
		"workload of a cluster without envoy": {func(f *fleet) {
			d := f.Cluster("south").Object("Deployment", "reviews")
			get(d, "spec", "template", "metadata", "labels")["version"] = "v2"
		}, nil},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := computedAfter(t, base, tc.change); !slices.Equal(got, tc.want) {
				t.Errorf("computed %v, want %v", got, tc.want)
			}
		})
	}
}

// TestExportedChangeComputesImporters changes what VirtualDestinations
// export and expects exactly the targets with envoy node groups (east,
// north, west: every node group imports every VirtualDestination) to be
// computed again, not south, which has no envoy mesh.
func TestExportedChangeComputesImporters(t *testing.T) {
	base := incrementalFleet(t)
	importers := []string{"east", "north", "west"}
	tests := map[string]func(*fleet){
		"listed service's endpoints": func(f *fleet) { editEndpoints(f.Cluster("east"), "reviews", "10.1.0.99") },
		"selected service's endpoints in a cluster without envoy": func(f *fleet) {
			editEndpoints(f.Cluster("south"), "ratings", "10.3.0.99")
		},
		"node locality": func(f *fleet) {
			labelsOf(f.Cluster("west").Object("Node", "west-node-b"))["topology.kubernetes.io/zone"] = "us-west-2c"
		},
		"exported service's ports": func(f *fleet) {
			svc := f.Cluster("south").Object("Service", "ratings")
			get(svc, "spec")["ports"] = []any{obj{"name": "grpc", "port": 9090, "targetPort": 8091}}
		},
		"selected service removed": func(f *fleet) {
			c := f.Cluster("south")
			c.Remove(c.Object("Service", "ratings"))
		},
	}
	for name, change := range tests {
		t.Run(name, func(t *testing.T) {
			if got := computedAfter(t, base, change); !slices.Equal(got, importers) {
				t.Errorf("computed %v, want %v", got, importers)
			}
		})
	}
}

// TestIncrementalMatchesFull applies random changes to every testdata
// fixture and checks, after each, that the session's incremental outputs
// equal a full translation.
func TestIncrementalMatchesFull(t *testing.T) {
	steps := 40
	if testing.Short() {
		steps = 10
	}
	for i, name := range append(cases(t), "incremental") {
		t.Run(name, func(t *testing.T) {
			var f *fleet
			if name == "incremental" {
				f = incrementalFleet(t)
			} else {
				f = loadFleet(t, name)
			}
			r := rand.New(rand.NewPCG(uint64(i), 42))
			w := &world{fleet: f}
			fixtures := []*sdktest.Fixture{f.Fixture(t)}
			for range steps {
				for range 1 + r.IntN(3) {
					mutations[r.IntN(len(mutations))](r, w)
				}
				fixtures = append(fixtures, f.Fixture(t))
			}
			sdktest.CheckIncremental(t, envoy.New(), fixtures...)
		})
	}
}

// world is a fleet under random changes, with what they removed, to be
// added back.
type world struct {
	*fleet
	removedPolicies []obj
	removedClusters []*cluster
}

func pick[T any](r *rand.Rand, xs []T) (T, bool) {
	var zero T
	if len(xs) == 0 {
		return zero, false
	}
	return xs[r.IntN(len(xs))], true
}

// anyObject picks an object of kind in a random cluster.
func (w *world) anyObject(r *rand.Rand, kind string) (*cluster, obj, bool) {
	c, ok := pick(r, w.Clusters)
	if !ok {
		return nil, nil, false
	}
	o, ok := pick(r, c.OfKind(kind))
	return c, o, ok
}

// address returns an endpoint address no other endpoint has.
func (w *world) address() string {
	n := w.Serial()
	return fmt.Sprintf("10.9.%d.%d", n/250, n%250+1)
}

// mutations are the random changes: endpoints, services, workloads, nodes
// and localities, meshes, policies, clusters.
var mutations = []func(*rand.Rand, *world){
	mutateEndpoints, mutateEndpoints, mutateService, addService, removeService,
	mutateWorkload, mutateNode, mutateMesh, mutateCluster,
	mutatePolicy, mutatePolicy, togglePolicy, toggleCluster, copyCluster,
}

func mutateEndpoints(r *rand.Rand, w *world) {
	c, es, ok := w.anyObject(r, "EndpointSlice")
	if !ok {
		return
	}
	eps := listOf(es, "endpoints")
	switch r.IntN(4) {
	case 0:
		if ep, ok := pick(r, eps); ok {
			cond := get(ep.(obj), "conditions")
			ready, _ := cond["ready"].(bool)
			cond["ready"] = !ready
		}
	case 1:
		ep := obj{"addresses": []any{w.address()}, "conditions": obj{"ready": r.IntN(4) > 0}}
		if n, ok := pick(r, c.OfKind("Node")); ok && r.IntN(2) == 0 {
			ep["nodeName"] = nameOf(n)
		} else if r.IntN(2) == 0 {
			ep["zone"] = fmt.Sprintf("zone-%d", r.IntN(3))
		}
		es["endpoints"] = append(eps, ep)
	case 2:
		if len(eps) > 0 {
			i := r.IntN(len(eps))
			es["endpoints"] = append(eps[:i:i], eps[i+1:]...)
		}
	case 3:
		if p, ok := pick(r, listOf(es, "ports")); ok {
			p.(obj)["port"] = 8080 + 10*r.IntN(3)
		}
	}
}

func mutateService(r *rand.Rand, w *world) {
	_, svc, ok := w.anyObject(r, "Service")
	if !ok {
		return
	}
	spec := get(svc, "spec")
	switch r.IntN(4) {
	case 0:
		if p, ok := pick(r, listOf(spec, "ports")); ok {
			p.(obj)["targetPort"] = 8080 + 10*r.IntN(3)
		}
	case 1:
		app, _ := pick(r, []string{"reviews", "ratings", "other"})
		labelsOf(svc)["app"] = app
	case 2:
		labelsOf(svc)["tier"] = fmt.Sprint(r.IntN(2))
	case 3:
		ports := listOf(spec, "ports")
		if len(ports) > 1 {
			spec["ports"] = ports[:1]
		} else {
			spec["ports"] = append(ports, obj{"name": "http", "port": 80, "targetPort": 8080})
		}
	}
}

func addService(r *rand.Rand, w *world) {
	c, ok := pick(r, w.Clusters)
	if !ok {
		return
	}
	name := fmt.Sprintf("svc-%d", w.Serial())
	if r.IntN(3) == 0 {
		// A Service with a name the policies select.
		name, _ = pick(r, []string{"reviews", "ratings"})
		if c.Object("Service", name) != nil {
			return
		}
	}
	app, _ := pick(r, []string{"reviews", "ratings", "frontend"})
	c.Objects = append(c.Objects,
		obj{"apiVersion": "v1", "kind": "Service",
			"metadata": obj{"name": name, "namespace": "shop", "labels": obj{"app": app}},
			"spec":     obj{"selector": obj{"app": app}, "ports": []any{obj{"name": "grpc", "port": 9080, "targetPort": 8080}}}},
		obj{"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
			"metadata":    obj{"name": name + "-new", "namespace": "shop", "labels": obj{"kubernetes.io/service-name": name}},
			"addressType": "IPv4", "ports": []any{obj{"name": "grpc", "port": 8080}},
			"endpoints": []any{obj{"addresses": []any{w.address()}, "conditions": obj{"ready": true}}}})
}

func removeService(r *rand.Rand, w *world) {
	if c, svc, ok := w.anyObject(r, "Service"); ok {
		c.Remove(svc)
	}
}

func mutateWorkload(r *rand.Rand, w *world) {
	_, d, ok := w.anyObject(r, "Deployment")
	if !ok {
		return
	}
	labels := get(d, "spec", "template", "metadata", "labels")
	node, _ := pick(r, []string{"backend", "frontend", "other", ""})
	if node == "" {
		delete(labels, "meshrelay.io/envoy-node")
		return
	}
	labels["meshrelay.io/envoy-node"] = node
}

func mutateNode(r *rand.Rand, w *world) {
	c, n, ok := w.anyObject(r, "Node")
	if !ok {
		return
	}
	switch r.IntN(4) {
	case 0:
		labelsOf(n)["topology.kubernetes.io/zone"] = fmt.Sprintf("zone-%d", r.IntN(3))
	case 1:
		region, _ := pick(r, []string{"us-east-1", "us-west-2", "eu-1"})
		labelsOf(n)["topology.kubernetes.io/region"] = region
	case 2:
		c.Remove(n)
	case 3:
		region, _ := pick(r, []string{"us-east-1", "us-west-2", "eu-1"})
		c.Objects = append(c.Objects, obj{"apiVersion": "v1", "kind": "Node",
			"metadata": obj{"name": fmt.Sprintf("node-%d", w.Serial()), "labels": obj{"topology.kubernetes.io/region": region}}})
	}
}

func mutateMesh(r *rand.Rand, w *world) {
	c, ok := pick(r, w.Clusters)
	if !ok {
		return
	}
	mesh := c.Object("Mesh", "envoy")
	if mesh == nil {
		c.Objects = append(c.Objects, obj{"apiVersion": "discovery.meshrelay.io/v1alpha1", "kind": "Mesh",
			"metadata": obj{"name": "envoy"}, "spec": obj{"type": "envoy", "envoyNodes": []any{"backend"}}})
		return
	}
	var nodes []any
	for _, n := range []string{"backend", "frontend", "other"} {
		if r.IntN(2) == 0 {
			nodes = append(nodes, n)
		}
	}
	get(mesh, "spec")["envoyNodes"] = nodes
}

// mutateCluster turns a cluster's envoy mesh or staleness on or off.
func mutateCluster(r *rand.Rand, w *world) {
	c, ok := pick(r, w.Clusters)
	if !ok {
		return
	}
	if r.IntN(3) == 0 {
		c.Stale = !c.Stale
		return
	}
	if slices.Contains(c.Meshes, "envoy") {
		c.Meshes = slices.DeleteFunc(c.Meshes, func(m string) bool { return m == "envoy" })
	} else {
		c.Meshes = append(c.Meshes, "envoy")
	}
}

func (w *world) clusterNames() []any {
	var out []any
	for _, c := range w.Clusters {
		out = append(out, c.Name)
	}
	return out
}

func mutatePolicy(r *rand.Rand, w *world) {
	p, ok := pick(r, w.Policies)
	if !ok {
		return
	}
	spec := get(p, "spec")
	name, _ := pick(r, []string{"reviews", "ratings"})
	if r.IntN(4) == 0 {
		spec["destinationSelectors"] = []any{obj{"namespaces": []any{"shop"}, "names": []any{name}}}
		return
	}
	switch kindOf(p) {
	case "VirtualDestination":
		switch r.IntN(3) {
		case 0:
			names := w.clusterNames()
			r.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
			spec["failover"] = obj{"mode": "Priority", "priority": names}
		case 1:
			spec["failover"] = obj{"mode": "Locality"}
		case 2:
			if port, ok := pick(r, listOf(spec, "ports")); ok {
				port.(obj)["targetPort"] = 9080 + 10*r.IntN(2)
			}
		}
		if spec["failover"] != nil && spec["outlierDetection"] == nil {
			spec["outlierDetection"] = obj{"consecutiveErrors": 3, "interval": "5s", "baseEjectionTime": "15s", "maxEjectionPercent": 100}
		}
	case "TrafficPolicy":
		rules := listOf(spec, "http")
		if len(rules) > 1 {
			i := r.IntN(len(rules))
			spec["http"] = append(rules[:i:i], rules[i+1:]...)
		}
	case "AccessPolicy":
		if spec["action"] == "DenyAll" {
			spec["action"] = "Allow"
			spec["from"] = []any{obj{"namespaces": []any{"shop"}}}
		} else {
			spec["action"] = "DenyAll"
			delete(spec, "from")
		}
	}
}

// togglePolicy removes a policy or adds back one it removed.
func togglePolicy(r *rand.Rand, w *world) {
	if len(w.removedPolicies) > 0 && r.IntN(2) == 0 {
		i := r.IntN(len(w.removedPolicies))
		w.Policies = append(w.Policies, w.removedPolicies[i])
		w.removedPolicies = slices.Delete(w.removedPolicies, i, i+1)
		return
	}
	if len(w.Policies) == 0 {
		return
	}
	i := r.IntN(len(w.Policies))
	w.removedPolicies = append(w.removedPolicies, w.Policies[i])
	w.Policies = slices.Delete(w.Policies, i, i+1)
}

// toggleCluster removes a cluster or adds back one it removed.
func toggleCluster(r *rand.Rand, w *world) {
	if len(w.removedClusters) > 0 && r.IntN(2) == 0 {
		i := r.IntN(len(w.removedClusters))
		w.Clusters = append(w.Clusters, w.removedClusters[i])
		w.removedClusters = slices.Delete(w.removedClusters, i, i+1)
		return
	}
	if len(w.Clusters) < 2 {
		return
	}
	i := r.IntN(len(w.Clusters))
	w.removedClusters = append(w.removedClusters, w.Clusters[i])
	w.Clusters = slices.Delete(w.Clusters, i, i+1)
}

// copyCluster adds a copy of a cluster under a new name.
func copyCluster(r *rand.Rand, w *world) {
	c, ok := pick(r, w.Clusters)
	if !ok || len(w.Clusters) > 5 {
		return
	}
	cp := &cluster{Name: fmt.Sprintf("copy-%d", w.Serial()), Meshes: slices.Clone(c.Meshes)}
	for _, o := range c.Objects {
		cp.Objects = append(cp.Objects, deepCopy(o))
	}
	w.Clusters = append(w.Clusters, cp)
}
