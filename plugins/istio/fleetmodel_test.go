package istio_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/meshrelay/meshrelay/sdk/sdktest"
	"sigs.k8s.io/yaml"
)

// obj is a Kubernetes object or policy as decoded JSON.
type obj = sdktest.Object

// fleetModel is a fleet that random changes edit, turned into a fixture
// after each step.
type fleetModel struct {
	*sdktest.Model
	// spare are clusters not in the fleet that a change may add.
	spare []*clusterModel
}

// clusterModel is one cluster of a fleetModel.
type clusterModel = sdktest.ModelCluster

var encodeObj = sdktest.Encode

func modelOf(t testing.TB, f *sdktest.Fixture) *fleetModel {
	t.Helper()
	return &fleetModel{Model: sdktest.ModelOf(t, f)}
}

// loadModel reads a fixture of testdata into a model. Every cluster of the
// other fixtures that it lacks becomes a spare.
func loadModel(t *testing.T, name string) *fleetModel {
	t.Helper()
	m := modelOf(t, loadFixture(t, filepath.Join("testdata", name+".yaml")))
	for _, other := range goldenCases {
		for _, c := range modelOf(t, loadFixture(t, filepath.Join("testdata", other+".yaml"))).Clusters {
			if m.Cluster(c.Name) == nil && !slices.ContainsFunc(m.spare, func(s *clusterModel) bool { return s.Name == c.Name }) {
				m.spare = append(m.spare, c)
			}
		}
	}
	return m
}

func decodeObj(t testing.TB, raw []byte) obj {
	t.Helper()
	var o obj
	if err := yaml.Unmarshal(raw, &o); err != nil {
		t.Fatal(err)
	}
	return o
}

// mustDecode decodes a YAML or JSON object of the test itself.
func mustDecode(raw []byte) obj {
	var o obj
	if err := yaml.Unmarshal(raw, &o); err != nil {
		panic(err)
	}
	return o
}

// cloneObj returns a deep copy of o.
func cloneObj(o obj) obj {
	raw, err := json.Marshal(o)
	if err != nil {
		panic(err)
	}
	return mustDecode(raw)
}

// randomSteps returns n fixtures, each the previous one with one to three
// random changes.
func randomSteps(t testing.TB, m *fleetModel, r *rand.Rand, n int) []*sdktest.Fixture {
	t.Helper()
	out := []*sdktest.Fixture{m.Fixture(t)}
	for range n {
		for range 1 + r.IntN(3) {
			change := changes[r.IntN(len(changes))]
			change(r, m)
		}
		out = append(out, m.Fixture(t))
	}
	return out
}

// changes are the random edits of a fleet: services, workloads, endpoints,
// gateways, meshes, nodes, policies and clusters.
var changes = []func(*rand.Rand, *fleetModel){
	changeService, changeService, removeKind("Service"), copyService,
	changeWorkload, changeEndpoints, removeKind("EndpointSlice"),
	changeGateway, changeMesh, changeNode,
	changePolicy, changePolicy, addOrRemovePolicy, addOrRemovePolicy,
	addOrRemoveCluster, toggleStale,
}

func kindOf(o obj) string { s, _ := o["kind"].(string); return s }

func meta(o obj) obj { return child(o, "metadata") }

func spec(o obj) obj { return child(o, "spec") }

// child returns o[key] as an object, creating it when absent.
func child(o obj, key string) obj {
	c, ok := o[key].(obj)
	if !ok {
		c = obj{}
		o[key] = c
	}
	return c
}

func pick[T any](r *rand.Rand, xs []T) (T, bool) {
	var zero T
	if len(xs) == 0 {
		return zero, false
	}
	return xs[r.IntN(len(xs))], true
}

// objectsOf returns the objects of kind in the fleet's clusters, with their cluster.
func objectsOf(m *fleetModel, kind string) (cs []*clusterModel, objs []obj) {
	for _, c := range m.Clusters {
		for _, o := range c.Objects {
			if kindOf(o) == kind {
				cs, objs = append(cs, c), append(objs, o)
			}
		}
	}
	return cs, objs
}

func pickObject(r *rand.Rand, m *fleetModel, kind string) (*clusterModel, obj, bool) {
	cs, objs := objectsOf(m, kind)
	if len(objs) == 0 {
		return nil, nil, false
	}
	i := r.IntN(len(objs))
	return cs[i], objs[i], true
}

func changeService(r *rand.Rand, m *fleetModel) {
	_, svc, ok := pickObject(r, m, "Service")
	if !ok {
		return
	}
	name, _ := meta(svc)["name"].(string)
	switch r.IntN(6) {
	case 0:
		spec(svc)["selector"] = obj{"app": name, "rev": fmt.Sprintf("r%d", r.IntN(3))}
	case 1:
		delete(spec(svc), "selector")
	case 2:
		meta(svc)["labels"] = obj{"app": name, "tier": fmt.Sprintf("t%d", r.IntN(2))}
	case 3:
		spec(svc)["ports"] = []any{obj{"name": "http", "port": 9080 + r.IntN(2)}}
	case 4:
		targetPort, _ := pick(r, []any{"http", "admin-http", 8080})
		spec(svc)["ports"] = []any{obj{"name": "http", "port": []int{80, 5000, 9080}[r.IntN(3)], "targetPort": targetPort}}
	default:
		spec(svc)["selector"] = obj{"app": name}
	}
}

func copyService(r *rand.Rand, m *fleetModel) {
	_, svc, ok := pickObject(r, m, "Service")
	to, ok2 := pick(r, m.Clusters)
	if !ok || !ok2 {
		return
	}
	cp := cloneObj(svc)
	to.Objects = slices.DeleteFunc(to.Objects, func(o obj) bool { return sameObject(o, cp) })
	to.Objects = append(to.Objects, cp)
}

func sameObject(a, b obj) bool {
	return kindOf(a) == kindOf(b) && meta(a)["name"] == meta(b)["name"] && meta(a)["namespace"] == meta(b)["namespace"]
}

func removeKind(kind string) func(*rand.Rand, *fleetModel) {
	return func(r *rand.Rand, m *fleetModel) {
		c, o, ok := pickObject(r, m, kind)
		if !ok {
			return
		}
		c.Objects = slices.DeleteFunc(c.Objects, func(x obj) bool { return sameObject(x, o) })
	}
}

func changeWorkload(r *rand.Rand, m *fleetModel) {
	_, d, ok := pickObject(r, m, "Deployment")
	if !ok {
		return
	}
	labels := child(child(child(spec(d), "template"), "metadata"), "labels")
	switch r.IntN(4) {
	case 0:
		labels["version"] = fmt.Sprintf("v%d", 1+r.IntN(3))
	case 1:
		labels["rev"] = fmt.Sprintf("r%d", r.IntN(3))
	case 2:
		name, _ := pick(r, []string{"http", "admin-http", "grpc"})
		child(child(spec(d), "template"), "spec")["containers"] = []any{obj{"name": "app", "image": "example.com/app:1",
			"ports": []any{obj{"name": name, "containerPort": 8080 + r.IntN(3)}}}}
	default:
		labels["tier"], _ = pick(r, []string{"v1", "t1"})
	}
}

func changeEndpoints(r *rand.Rand, m *fleetModel) {
	_, es, ok := pickObject(r, m, "EndpointSlice")
	if !ok {
		return
	}
	eps, _ := es["endpoints"].([]any)
	ep, ok := pick(r, eps)
	if !ok {
		return
	}
	e := ep.(obj)
	switch r.IntN(4) {
	case 0:
		e["addresses"] = []any{fmt.Sprintf("10.9.%d.%d", r.IntN(4), 1+r.IntN(200))}
	case 1:
		e["conditions"] = obj{"ready": r.IntN(2) == 0}
	case 2:
		delete(e, "nodeName")
		e["zone"] = fmt.Sprintf("zone-%d", r.IntN(2))
	default:
		es["endpoints"] = eps[:1]
	}
}

func changeGateway(r *rand.Rand, m *fleetModel) {
	c, ok := pick(r, m.Clusters)
	if !ok {
		return
	}
	i := slices.IndexFunc(c.Objects, func(o obj) bool { return kindOf(o) == "Gateway" })
	switch {
	case i >= 0 && r.IntN(2) == 0:
		c.Objects = slices.Delete(c.Objects, i, i+1)
	case i >= 0:
		addresses := []any{fmt.Sprintf("198.51.100.%d", 1+r.IntN(9))}
		if r.IntN(3) == 0 {
			addresses = []any{"gateway." + c.Name + ".example.com"}
		}
		spec(c.Objects[i])["addresses"] = addresses
		spec(c.Objects[i])["port"] = []int{0, 15443, 15444}[r.IntN(3)]
	default:
		c.Objects = append(c.Objects, obj{
			"apiVersion": "discovery.meshrelay.io/v1alpha1", "kind": "Gateway",
			"metadata": obj{"name": "istio-eastwestgateway", "namespace": "istio-system"},
			"spec":     obj{"mesh": "istio", "addresses": []any{fmt.Sprintf("198.51.100.%d", 1+r.IntN(9))}, "port": 15443},
		})
	}
}

func changeMesh(r *rand.Rand, m *fleetModel) {
	c, ok := pick(r, m.Clusters)
	if !ok {
		return
	}
	i := slices.IndexFunc(c.Objects, func(o obj) bool { return kindOf(o) == "Mesh" })
	switch n := r.IntN(4); {
	case n == 0:
		c.Meshes, _ = pick(r, [][]string{{"istio"}, {"cilium"}, {"cilium", "istio"}})
	case i < 0:
		c.Objects = append(c.Objects, obj{
			"apiVersion": "discovery.meshrelay.io/v1alpha1", "kind": "Mesh",
			"metadata": obj{"name": "istio", "namespace": "istio-system"},
			"spec":     obj{"type": "istio", "namespace": "istio-system"},
		})
	case n == 1:
		spec(c.Objects[i])["trustDomain"], _ = pick(r, []string{"", "cluster.local", "east.example", "west.example"})
	case n == 2:
		spec(c.Objects[i])["namespace"], _ = pick(r, []string{"", "istio-system", "istio-root"})
		spec(c.Objects[i])["network"], _ = pick(r, []string{"", "network-a", "network-b"})
	default:
		c.Objects = slices.Delete(c.Objects, i, i+1)
	}
}

func changeNode(r *rand.Rand, m *fleetModel) {
	_, n, ok := pickObject(r, m, "Node")
	if !ok {
		return
	}
	labels := child(meta(n), "labels")
	region, _ := pick(r, []string{"us-east-1", "us-west-2", "eu-south-1"})
	labels["topology.kubernetes.io/region"] = region
	if r.IntN(2) == 0 {
		delete(labels, "topology.kubernetes.io/zone")
	} else {
		labels["topology.kubernetes.io/zone"] = region + "a"
	}
}

func changePolicy(r *rand.Rand, m *fleetModel) {
	p, ok := pick(r, m.Policies)
	if !ok {
		return
	}
	switch r.IntN(4) {
	case 0:
		meta(p)["creationTimestamp"] = fmt.Sprintf("2026-01-0%dT00:00:00Z", 1+r.IntN(3))
	case 1:
		sels, _ := spec(p)["destinationSelectors"].([]any)
		if sel, ok := pick(r, sels); ok {
			c, _ := pick(r, []string{"east", "west", "south", "edge"})
			if _, has := sel.(obj)["clusters"]; has {
				delete(sel.(obj), "clusters")
			} else {
				sel.(obj)["clusters"] = []any{c}
			}
		}
	case 2:
		if kindOf(p) == "AccessPolicy" {
			spec(p)["paths"] = []any{fmt.Sprintf("/p%d/*", r.IntN(3))}
			spec(p)["action"], _ = pick(r, []string{"Allow", "DenyAll"})
		} else if kindOf(p) == "VirtualDestination" {
			spec(p)["failover"] = obj{"mode": "Priority", "priority": []any{"south", "west", "east"}}
		}
	default:
		name, _ := meta(p)["name"].(string)
		if n, ok := pick(r, poolNames); ok && !hasPolicy(m, n) {
			meta(p)["name"] = n
		} else {
			meta(p)["name"] = name + "-x"
		}
	}
}

func hasPolicy(m *fleetModel, name string) bool {
	return slices.ContainsFunc(m.Policies, func(p obj) bool { return meta(p)["name"] == name })
}

func addOrRemovePolicy(r *rand.Rand, m *fleetModel) {
	if r.IntN(3) == 0 && len(m.Policies) > 0 {
		i := r.IntN(len(m.Policies))
		m.Policies = slices.Delete(m.Policies, i, i+1)
		return
	}
	p := poolPolicies[r.IntN(len(poolPolicies))]
	o := mustDecode([]byte(p))
	if !slices.ContainsFunc(m.Policies, func(p obj) bool { return sameObject(p, o) }) {
		m.Policies = append(m.Policies, o)
	}
}

func addOrRemoveCluster(r *rand.Rand, m *fleetModel) {
	switch r.IntN(3) {
	case 0:
		if len(m.Clusters) > 1 {
			i := r.IntN(len(m.Clusters))
			m.spare = append(m.spare, m.Clusters[i])
			m.Clusters = slices.Delete(m.Clusters, i, i+1)
		}
	case 1:
		if len(m.spare) > 0 {
			i := r.IntN(len(m.spare))
			m.Clusters = append(m.Clusters, m.spare[i])
			m.spare = slices.Delete(m.spare, i, i+1)
		}
	default:
		src, ok := pick(r, m.Clusters)
		name := fmt.Sprintf("north-%d", r.IntN(3))
		if !ok || m.Cluster(name) != nil {
			return
		}
		cp := &clusterModel{Name: name, Meshes: slices.Clone(src.Meshes)}
		for _, o := range src.Objects {
			cp.Objects = append(cp.Objects, cloneObj(o))
		}
		m.Clusters = append(m.Clusters, cp)
	}
}

func toggleStale(r *rand.Rand, m *fleetModel) {
	if c, ok := pick(r, m.Clusters); ok {
		c.Stale = !c.Stale
	}
}

// poolNames are names a policy may be renamed to: some of them make the
// objects of two policies collide.
var poolNames = []string{"pool", "pool-ratings", "pool-x", "pool-x-ratings", "reviews-split", "ratings"}

// poolPolicies are the policies a change may add: VirtualDestinations and
// TrafficPolicies across clusters, AccessPolicies, and policies whose
// object names collide in some clusters only.
var poolPolicies = []string{
	`apiVersion: policy.meshrelay.io/v1alpha1
kind: VirtualDestination
metadata: {name: pool-global, namespace: bookinfo}
spec:
  hostname: reviews.pool.global
  ports: [{number: 9080, protocol: HTTP}]
  destinationSelectors: [{namespaces: [bookinfo], names: [reviews]}]
  failover: {mode: Priority, priority: [west, east, south]}
  outlierDetection: {consecutiveErrors: 3, interval: 5s, baseEjectionTime: 1m, maxEjectionPercent: 50}`,
	`apiVersion: policy.meshrelay.io/v1alpha1
kind: VirtualDestination
metadata: {name: pool-ratings, namespace: bookinfo}
spec:
  hostname: ratings.pool
  ports: [{number: 9080, protocol: HTTP, targetPort: 9080}]
  services:
  - {cluster: south, namespace: bookinfo, name: ratings}
  - {cluster: east, namespace: bookinfo, name: ratings}
  - {cluster: north-1, namespace: bookinfo, name: ratings}
  failover: {mode: Locality}
  outlierDetection: {consecutiveErrors: 3, interval: 5s, baseEjectionTime: 1m, maxEjectionPercent: 50}`,
	`apiVersion: policy.meshrelay.io/v1alpha1
kind: VirtualDestination
metadata: {name: details-global, namespace: istio-system}
spec:
  hostname: details.pool
  ports: [{number: 9080, protocol: HTTP}]
  services:
  - {cluster: east, namespace: bookinfo, name: details}`,
	`apiVersion: policy.meshrelay.io/v1alpha1
kind: TrafficPolicy
metadata: {name: pool, namespace: bookinfo, creationTimestamp: "2026-01-02T00:00:00Z"}
spec:
  destinationSelectors: [{clusters: [east], names: [ratings]}]
  http:
  - route:
    - service: {cluster: east, namespace: bookinfo, name: ratings}
      subset: {version: v1}`,
	`apiVersion: policy.meshrelay.io/v1alpha1
kind: TrafficPolicy
metadata: {name: pool-split, namespace: bookinfo}
spec:
  destinationSelectors: [{names: [ratings]}]
  http:
  - name: split
    route:
    - service: {cluster: east, namespace: bookinfo, name: ratings}
      subset: {version: v1}
      weight: 50
    - service: {cluster: west, namespace: bookinfo, name: ratings}
      weight: 50
    mirror:
      destination:
        service: {cluster: south, namespace: bookinfo, name: ratings}
      percent: 10`,
	`apiVersion: policy.meshrelay.io/v1alpha1
kind: TrafficPolicy
metadata: {name: pool-to-vd, namespace: bookinfo}
spec:
  destinationSelectors: [{names: [productpage]}]
  http:
  - route:
    - virtualDestination: {name: pool-global, port: 9080}`,
	`apiVersion: policy.meshrelay.io/v1alpha1
kind: TrafficPolicy
metadata: {name: pool-collide, namespace: bookinfo}
spec:
  destinationSelectors: [{names: [details]}]
  http:
  - route:
    - service: {cluster: east, namespace: bookinfo, name: reviews}
      subset: {version: v1}
    - service: {cluster: east, namespace: bookinfo, name: reviews}
      subset: {tier: v1}`,
	`apiVersion: policy.meshrelay.io/v1alpha1
kind: TrafficPolicy
metadata: {name: pool-west, namespace: bookinfo, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  destinationSelectors: [{clusters: [west, south], names: [ratings, reviews]}]
  http:
  - matches: [{path: {value: /a}}]
    route:
    - service: {cluster: west, namespace: bookinfo, name: reviews}
      subset: {version: v3}`,
	`apiVersion: policy.meshrelay.io/v1alpha1
kind: AccessPolicy
metadata: {name: pool-x, namespace: bookinfo}
spec:
  destinationSelectors: [{names: [ratings]}]
  from:
  - clusters: [west]
  - serviceAccounts: [{cluster: east, namespace: bookinfo, name: bookinfo-productpage}]
  methods: [GET]`,
	`apiVersion: policy.meshrelay.io/v1alpha1
kind: AccessPolicy
metadata: {name: pool-x-ratings, namespace: bookinfo}
spec:
  destinationSelectors: [{clusters: [south], namespaces: [bookinfo]}, {clusters: [east], names: [details]}]
  action: DenyAll`,
	`apiVersion: policy.meshrelay.io/v1alpha1
kind: AccessPolicy
metadata: {name: pool-ports, namespace: bookinfo}
spec:
  destinationSelectors: [{namespaces: [bookinfo, shop]}]
  from: [{namespaces: [bookinfo]}]
  ports: [80, 5000, 9080]`,
	`apiVersion: policy.meshrelay.io/v1alpha1
kind: AccessPolicy
metadata: {name: pool-clients, namespace: bookinfo}
spec:
  destinationSelectors: [{namespaces: [bookinfo], names: [reviews, details]}]
  from:
  - {clusters: [east, north-0], namespaces: [bookinfo]}
  - serviceAccounts: [{namespace: bookinfo, name: bookinfo-reviews}]`,
}
