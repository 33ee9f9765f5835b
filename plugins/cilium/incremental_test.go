package cilium_test

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/meshrelay/meshrelay/plugins/cilium"
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

// loadFixture reads testdata/<name>.yaml.
func loadFixture(t testing.TB, name string) *sdktest.Fixture {
	t.Helper()
	f, err := sdktest.LoadFixture(filepath.Join("testdata", name+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func labelsOf(o obj) obj           { return get(o, "metadata", "labels") }
func listOf(o obj, k string) []any { l, _ := o[k].([]any); return l }

// service returns a Service in bookinfo selecting app.
func service(name, app string) obj {
	return obj{"apiVersion": "v1", "kind": "Service",
		"metadata": obj{"name": name, "namespace": "bookinfo", "labels": obj{"app": app}},
		"spec":     obj{"selector": obj{"app": app}, "ports": []any{obj{"name": "http", "port": 9080, "targetPort": 9080}}}}
}

// incrementalFleet is the global fixture — east, west and south with
// Cilium and bookinfo, north with Istio; reviews-global (Priority east,
// west) over reviews, ratings-global (Locality) over every ratings,
// productpage-global listing Services of every cluster — with:
//
//   - central, a fifth cluster with Cilium and only the shop application:
//     no VirtualDestination or TrafficPolicy reaches it;
//   - the shop application in east and west too;
//   - a details Service and a Deployment in every cluster, which no
//     policy selects;
//   - the TrafficPolicies of the traffic fixture (reviews, ratings);
//   - shop-default-deny, a DenyAll policy on the whole shop namespace;
//   - productpage-from-north, an Allow policy whose clients include
//     north, which has no Cilium.
func incrementalFleet(t testing.TB) *fleet {
	t.Helper()
	f := fleetOf(t, loadFixture(t, "global"))
	shop := loadFixture(t, "access-clusterwide").Clusters[0].Objects
	var shopObjs []obj
	for _, raw := range shop {
		if o := decodeObj(t, raw); namespaceOf(o) == "shop" || nameOf(o) == "shop" {
			shopObjs = append(shopObjs, o)
		}
	}
	for _, c := range f.Clusters {
		c.Objects = append(c.Objects, service("details", "details"), obj{"apiVersion": "apps/v1", "kind": "Deployment",
			"metadata": obj{"name": "details-v1", "namespace": "bookinfo"},
			"spec": obj{"selector": obj{"matchLabels": obj{"app": "details"}},
				"template": obj{"metadata": obj{"labels": obj{"app": "details", "version": "v1"}}}}})
		if c.Name == "east" || c.Name == "west" {
			for _, o := range shopObjs {
				c.Objects = append(c.Objects, deepCopy(o))
			}
		}
	}
	central := &cluster{Name: "central", Meshes: []string{"cilium"}}
	for _, o := range shopObjs {
		central.Objects = append(central.Objects, deepCopy(o))
	}
	f.Clusters = append(f.Clusters, central)
	for _, raw := range loadFixture(t, "traffic").Policies {
		f.Policies = append(f.Policies, decodeObj(t, raw))
	}
	f.Policies = append(f.Policies,
		obj{"apiVersion": "policy.meshrelay.io/v1alpha1", "kind": "AccessPolicy",
			"metadata": obj{"name": "shop-default-deny", "namespace": "shop"},
			"spec":     obj{"destinationSelectors": []any{obj{"namespaces": []any{"shop"}}}, "action": "DenyAll"}},
		obj{"apiVersion": "policy.meshrelay.io/v1alpha1", "kind": "AccessPolicy",
			"metadata": obj{"name": "productpage-from-north", "namespace": "bookinfo"},
			"spec": obj{"destinationSelectors": []any{obj{"namespaces": []any{"bookinfo"}, "names": []any{"productpage"}}},
				"from": []any{obj{"clusters": []any{"north", "east"}}}}})
	return f
}

// allTargets are the clusters of incrementalFleet, and ciliumTargets
// those that run Cilium: the SDK computes no other.
var (
	allTargets    = []string{"central", "east", "north", "south", "west"}
	ciliumTargets = []string{"central", "east", "south", "west"}
)

// computedAfter runs base then changed through a session and returns the
// targets the change computed. It also checks the incremental outputs
// against full translations.
func computedAfter(t *testing.T, base *fleet, change func(*fleet)) []string {
	t.Helper()
	changed := base.Clone(t)
	change(changed)
	s := sdktest.NewSession(t, cilium.New())
	s.Update(base.Fixture(t))
	if got := s.Computed(); !slices.Equal(got, ciliumTargets) {
		t.Fatalf("first update computed %v, want %v", got, ciliumTargets)
	}
	s.Update(changed.Fixture(t))
	sdktest.CheckIncremental(t, cilium.New(), base.Fixture(t), changed.Fixture(t))
	return s.Computed()
}

// TestLocalChangeComputesItsTarget changes what only one cluster's outputs
// use and expects that target alone to be computed again — or none, for
// inputs the translator does not read.
func TestLocalChangeComputesItsTarget(t *testing.T) {
	base := incrementalFleet(t)
	tests := map[string]struct {
		change func(*fleet)
		want   []string
	}{
		// ratings forwards to the container port named http-alt, which
		// east's target resolves through its workloads (for the warning
		// when no container port has the name): any workload change of
		// east concerns it.
		"deployment of a cluster resolving a named target port": {func(f *fleet) {
			d := f.Cluster("east").Object("Deployment", "details-v1")
			get(d, "spec", "template", "metadata", "labels")["version"] = "v2"
		}, []string{"east"}},
		"container port a named target port resolves to": {func(f *fleet) {
			d := f.Cluster("east").Object("Deployment", "ratings-v1")
			ctr := listOf(get(d, "spec", "template", "spec"), "containers")[0].(obj)
			listOf(ctr, "ports")[0].(obj)["name"] = "http"
		}, []string{"east"}},
		"deployment of a cluster resolving no named target port": {func(f *fleet) {
			c := f.Cluster("central")
			c.Objects = append(c.Objects, obj{"apiVersion": "apps/v1", "kind": "Deployment",
				"metadata": obj{"name": "cart-v1", "namespace": "shop"},
				"spec": obj{"selector": obj{"matchLabels": obj{"app": "cart"}},
					"template": obj{"metadata": obj{"labels": obj{"app": "cart"}}}}})
		}, nil},
		"new service": {func(f *fleet) {
			c := f.Cluster("east")
			c.Objects = append(c.Objects, service("mail", "mail"))
		}, []string{"east"}},
		"labels of a service no policy selects": {func(f *fleet) {
			labelsOf(f.Cluster("west").Object("Service", "details"))["tier"] = "frontend"
		}, []string{"west"}},
		"target port of a destination": {func(f *fleet) {
			svc := f.Cluster("east").Object("Service", "reviews")
			listOf(get(svc, "spec"), "ports")[0].(obj)["targetPort"] = 9081
		}, []string{"east"}},
		"port of a global service's backend": {func(f *fleet) {
			svc := f.Cluster("west").Object("Service", "reviews")
			listOf(get(svc, "spec"), "ports")[0].(obj)["port"] = 9081
		}, []string{"west"}},
		"selector of a destination removed": {func(f *fleet) {
			delete(get(f.Cluster("south").Object("Service", "productpage"), "spec"), "selector")
		}, []string{"south"}},
		"namespace a DenyAll policy names whole": {func(f *fleet) {
			c := f.Cluster("south")
			c.Objects = append(c.Objects, obj{"apiVersion": "v1", "kind": "Namespace", "metadata": obj{"name": "shop"}})
		}, []string{"south"}},
		"service of a cluster without global services": {func(f *fleet) {
			labelsOf(f.Cluster("central").Object("Service", "cart"))["app"] = "basket"
		}, []string{"central"}},
		"stale cluster that policies name as clients": {func(f *fleet) {
			f.Cluster("east").Stale = true
		}, []string{"east"}},
		"stale cluster without Cilium": {func(f *fleet) {
			f.Cluster("north").Stale = true
		}, nil}, // north has no Cilium: the SDK never computes it
		"service of a cluster without Cilium": {func(f *fleet) {
			labelsOf(f.Cluster("north").Object("Service", "productpage"))["tier"] = "frontend"
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

// TestSharedChangeComputesDependents changes what several clusters'
// outputs or diagnostics use, and expects exactly those targets to be
// computed again.
func TestSharedChangeComputesDependents(t *testing.T) {
	base := incrementalFleet(t)
	tests := map[string]struct {
		change func(*fleet)
		want   []string
		why    string
	}{
		"backend of a Locality VirtualDestination removed": {func(f *fleet) {
			f.Cluster("south").Remove(service("ratings", ""))
		}, []string{"east", "south", "west"},
			"ratings-global's and ratings-resilience's warnings name the clusters of their Services"},
		"preferred backend of a Priority VirtualDestination removed": {func(f *fleet) {
			f.Cluster("east").Remove(service("reviews", ""))
		}, []string{"east", "south", "west"},
			"west's reviews becomes the preferred backend (affinity local); reviews-split's warning names south"},
		"service a listing VirtualDestination does not list": {func(f *fleet) {
			c := f.Cluster("central")
			c.Objects = append(c.Objects, service("productpage", "productpage"))
		}, []string{"central"},
			"productpage-global lists no Service in central: only central's own policy objects change"},
		"Cilium on a client cluster": {func(f *fleet) {
			f.Cluster("north").Meshes = []string{"cilium", "istio"}
		}, allTargets,
			"north gets global services, every VirtualDestination a new backend, every target's productpage-from-north its warning"},
		"access policy": {func(f *fleet) {
			for _, p := range f.Policies {
				if nameOf(p) == "shop-default-deny" {
					get(p, "spec")["action"] = "Allow"
					get(p, "spec")["from"] = []any{obj{"namespaces": []any{"shop"}}}
				}
			}
		}, []string{"central", "east", "south", "west"},
			"every target with Cilium reads every AccessPolicy"},
		"cluster removed": {func(f *fleet) {
			f.Clusters = slices.DeleteFunc(f.Clusters, func(c *cluster) bool { return c.Name == "south" })
		}, []string{"east", "west"},
			"the VirtualDestinations and TrafficPolicies that south's Services backed name their clusters"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := computedAfter(t, base, tc.change); !slices.Equal(got, tc.want) {
				t.Errorf("computed %v, want %v: %s", got, tc.want, tc.why)
			}
		})
	}
}

// TestIncrementalMatchesFull applies random changes to every testdata
// fixture and to incrementalFleet and checks, after each, that the
// session's incremental outputs and diagnostics equal a full translation.
func TestIncrementalMatchesFull(t *testing.T) {
	steps := 40
	if testing.Short() {
		steps = 10
	}
	names := []string{"access-allow", "access-clusterwide", "access-deny", "access-istio", "edge-cases", "global", "traffic", "traffic-envoy", "incremental"}
	for i, name := range names {
		t.Run(name, func(t *testing.T) {
			var f *fleet
			if name == "incremental" {
				f = incrementalFleet(t)
			} else {
				f = fleetOf(t, loadFixture(t, name))
			}
			r := rand.New(rand.NewPCG(uint64(i), 7))
			w := &world{fleet: f}
			fixtures := []*sdktest.Fixture{f.Fixture(t)}
			for range steps {
				for range 1 + r.IntN(3) {
					mutations[r.IntN(len(mutations))](r, w)
				}
				fixtures = append(fixtures, f.Fixture(t))
			}
			sdktest.CheckIncremental(t, cilium.New(), fixtures...)
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

// Names the random changes draw from: those of the fixtures' clusters,
// namespaces, Services and labels, and one of each nobody selects.
var (
	randomNamespaces = []string{"bookinfo", "shop", "payments"}
	randomServices   = []string{"reviews", "ratings", "productpage", "cart", "legacy-db", "other"}
	randomClusters   = []string{"east", "west", "south", "north", "elsewhere"}
)

// mutations are the random changes: Services (labels, ports, selectors),
// Services and Namespaces added and removed, meshes and staleness,
// policies changed, removed and added back, clusters removed, added back
// and copied.
var mutations = []func(*rand.Rand, *world){
	mutateService, mutateService, addService, removeService, toggleNamespace,
	mutateCluster, mutatePolicy, mutatePolicy, togglePolicy, toggleCluster, copyCluster,
}

func mutateService(r *rand.Rand, w *world) {
	_, svc, ok := w.anyObject(r, "Service")
	if !ok {
		return
	}
	spec := get(svc, "spec")
	switch r.IntN(5) {
	case 0:
		if p, ok := pick(r, listOf(spec, "ports")); ok {
			p.(obj)["targetPort"] = 9080 + r.IntN(3)
		}
	case 1:
		if p, ok := pick(r, listOf(spec, "ports")); ok {
			p.(obj)["port"] = 9080 + 10*r.IntN(2)
		}
	case 2:
		tier, _ := pick(r, []string{"backend", "frontend"})
		labelsOf(svc)["tier"] = tier
	case 3:
		if spec["selector"] == nil {
			spec["selector"] = obj{"app": nameOf(svc)}
		} else {
			delete(spec, "selector")
		}
	case 4:
		ports := listOf(spec, "ports")
		if len(ports) > 1 {
			spec["ports"] = ports[:1]
		} else {
			spec["ports"] = append(ports, obj{"name": "udp", "port": 8125, "protocol": "UDP"})
		}
	}
}

func addService(r *rand.Rand, w *world) {
	c, ok := pick(r, w.Clusters)
	if !ok {
		return
	}
	name := fmt.Sprintf("svc-%d", w.Serial())
	if r.IntN(2) == 0 {
		// A Service with a name the policies select.
		name, _ = pick(r, randomServices)
	}
	ns, _ := pick(r, randomNamespaces)
	if slices.ContainsFunc(c.OfKind("Service"), func(o obj) bool { return nameOf(o) == name && namespaceOf(o) == ns }) {
		return
	}
	svc := service(name, name)
	get(svc, "metadata")["namespace"] = ns
	if r.IntN(2) == 0 {
		labelsOf(svc)["tier"] = "backend"
	}
	c.Objects = append(c.Objects, svc)
}

func removeService(r *rand.Rand, w *world) {
	if c, svc, ok := w.anyObject(r, "Service"); ok {
		c.Remove(svc)
	}
}

// toggleNamespace adds or removes a Namespace of a cluster.
func toggleNamespace(r *rand.Rand, w *world) {
	c, ok := pick(r, w.Clusters)
	if !ok {
		return
	}
	ns, _ := pick(r, randomNamespaces)
	if o := c.Object("Namespace", ns); o != nil {
		c.Remove(o)
		return
	}
	c.Objects = append(c.Objects, obj{"apiVersion": "v1", "kind": "Namespace", "metadata": obj{"name": ns}})
}

// mutateCluster turns a cluster's Istio mesh or staleness on or off, or
// its Cilium mesh: off only while two other clusters keep it, so that the
// fleet keeps targets with outputs.
func mutateCluster(r *rand.Rand, w *world) {
	c, ok := pick(r, w.Clusters)
	if !ok {
		return
	}
	mesh, _ := pick(r, []string{"cilium", "istio", "stale"})
	others := 0
	for _, o := range w.Clusters {
		if o != c && slices.Contains(o.Meshes, "cilium") {
			others++
		}
	}
	switch {
	case mesh == "stale":
		c.Stale = !c.Stale
	case slices.Contains(c.Meshes, mesh) && (mesh != "cilium" || others >= 2):
		c.Meshes = slices.DeleteFunc(c.Meshes, func(m string) bool { return m == mesh })
	case !slices.Contains(c.Meshes, mesh):
		c.Meshes = append(c.Meshes, mesh)
		slices.Sort(c.Meshes)
	}
}

// randomSelector returns a destination selector over the fleet's names,
// mostly of Services that exist.
func (w *world) randomSelector(r *rand.Rand) obj {
	sel := obj{}
	if r.IntN(3) > 0 {
		name, _ := pick(r, randomServices)
		sel["names"] = []any{name}
	}
	if r.IntN(3) == 0 {
		ns, _ := pick(r, randomNamespaces)
		sel["namespaces"] = []any{ns}
	}
	if c, ok := pick(r, w.Clusters); ok && r.IntN(4) == 0 {
		sel["clusters"] = []any{c.Name}
	}
	if r.IntN(4) == 0 {
		sel["labels"] = obj{"tier": "backend"}
	}
	return sel
}

// mutatePolicy changes a policy's destinations — replacing or adding a
// selector — or something of its kind.
func mutatePolicy(r *rand.Rand, w *world) {
	p, ok := pick(r, w.Policies)
	if !ok {
		return
	}
	spec := get(p, "spec")
	switch r.IntN(4) {
	case 0:
		spec["destinationSelectors"] = []any{w.randomSelector(r)}
		return
	case 1:
		spec["destinationSelectors"] = append(listOf(spec, "destinationSelectors"), w.randomSelector(r))
		return
	}
	switch kindOf(p) {
	case "VirtualDestination":
		mutateVirtualDestination(r, spec)
	case "TrafficPolicy":
		mutateTrafficPolicy(r, spec)
	case "AccessPolicy":
		mutateAccessPolicy(r, spec)
	}
}

// mutateTrafficPolicy drops a rule or adds one with fields Cilium cannot
// express.
func mutateTrafficPolicy(r *rand.Rand, spec obj) {
	rules := listOf(spec, "http")
	if len(rules) > 1 && r.IntN(2) == 0 {
		i := r.IntN(len(rules))
		spec["http"] = append(rules[:i:i], rules[i+1:]...)
		return
	}
	rule := obj{"name": fmt.Sprintf("rule-%d", len(rules)), "timeout": "2s"}
	if r.IntN(2) == 0 {
		rule["retries"] = obj{"attempts": 2}
	}
	spec["http"] = append(rules, rule)
}

func mutateVirtualDestination(r *rand.Rand, spec obj) {
	switch r.IntN(4) {
	case 0:
		names := slices.Clone(randomClusters)
		r.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
		priority := make([]any, 0, len(names))
		for _, n := range names[:1+r.IntN(len(names))] {
			priority = append(priority, n)
		}
		spec["failover"] = obj{"mode": "Priority", "priority": priority}
	case 1:
		spec["failover"] = obj{"mode": "Locality"}
	case 2:
		if port, ok := pick(r, listOf(spec, "ports")); ok {
			port.(obj)["targetPort"] = 9080 + 10*r.IntN(2)
		}
	case 3:
		c, _ := pick(r, randomClusters)
		name, _ := pick(r, randomServices)
		spec["services"] = append(listOf(spec, "services"), obj{"cluster": c, "namespace": "bookinfo", "name": name})
	}
}

func mutateAccessPolicy(r *rand.Rand, spec obj) {
	if spec["action"] == "DenyAll" {
		spec["action"] = "Allow"
		spec["from"] = []any{obj{"namespaces": []any{"shop"}}}
		return
	}
	switch r.IntN(4) {
	case 0:
		spec["action"] = "DenyAll"
		delete(spec, "from")
		delete(spec, "ports")
		delete(spec, "methods")
		delete(spec, "paths")
	case 1:
		c, _ := pick(r, randomClusters)
		ns, _ := pick(r, randomNamespaces)
		spec["from"] = append(listOf(spec, "from"), obj{"clusters": []any{c}, "namespaces": []any{ns}})
	case 2:
		ports := []any{9080, 9090, 8125}
		spec["ports"] = ports[:r.IntN(len(ports)+1)]
	case 3:
		spec["methods"] = []any{"GET"}
		spec["paths"] = []any{"/api*"}
	}
}

// togglePolicy removes a policy or adds back one it removed, keeping at
// least one.
func togglePolicy(r *rand.Rand, w *world) {
	if len(w.removedPolicies) > 0 && (r.IntN(2) == 0 || len(w.Policies) < 2) {
		i := r.IntN(len(w.removedPolicies))
		w.Policies = append(w.Policies, w.removedPolicies[i])
		w.removedPolicies = slices.Delete(w.removedPolicies, i, i+1)
		return
	}
	if len(w.Policies) < 2 {
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

// copyCluster adds a copy of a cluster under a new name, or under a name
// the policies use when no cluster has it.
func copyCluster(r *rand.Rand, w *world) {
	c, ok := pick(r, w.Clusters)
	if !ok || len(w.Clusters) > 5 {
		return
	}
	name := fmt.Sprintf("copy-%d", w.Serial())
	if n, _ := pick(r, randomClusters); w.Cluster(n) == nil && !slices.ContainsFunc(w.removedClusters, func(c *cluster) bool { return c.Name == n }) {
		name = n
	}
	cp := &cluster{Name: name, Meshes: slices.Clone(c.Meshes)}
	for _, o := range c.Objects {
		if apiVersion, _ := o["apiVersion"].(string); !strings.HasPrefix(apiVersion, "policy.meshrelay.io/") {
			cp.Objects = append(cp.Objects, deepCopy(o))
		}
	}
	w.Clusters = append(w.Clusters, cp)
}
