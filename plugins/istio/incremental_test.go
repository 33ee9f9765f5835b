package istio_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/meshrelay/meshrelay/plugins/istio"
	"github.com/meshrelay/meshrelay/sdk/sdktest"
)

// benchNamespace is where the services of benchFleet live, as in internal/bench.
const benchNamespace = "bench"

// benchFleet generates a fleet shaped like internal/bench's: Istio clusters
// each with Services, ServiceAccounts, Deployments and EndpointSlices in
// namespace bench, a Node and the Istio Mesh discovery computes, and
// internal/bench's fleet-wide AccessPolicy. Plugins do not import core, so the
// objects are generated here.
type benchFleet struct {
	clusters, services int
	// gateways gives every cluster an Istio east-west gateway, and virtual
	// adds internal/bench's global VirtualDestination of svc-000.
	gateways, virtual bool
	// marker is the AccessPolicy's path marker.
	marker string
	// rev is the selector label value of a Service and its Deployment,
	// by cluster and service; "r0" when absent.
	rev map[[2]int]string
	// address replaces the first endpoint address of a Service.
	address map[[2]int]string
	// zone replaces the zone of a cluster's endpoints.
	zone map[int]string
}

func newBenchFleet(clusters, services int) *benchFleet {
	return &benchFleet{clusters: clusters, services: services, marker: "p0",
		rev: map[[2]int]string{}, address: map[[2]int]string{}, zone: map[int]string{}}
}

// clone returns a copy that changes do not share.
func (b *benchFleet) clone() *benchFleet {
	c := *b
	c.rev, c.address, c.zone = maps.Clone(b.rev), maps.Clone(b.address), maps.Clone(b.zone)
	return &c
}

func benchCluster(i int) string { return fmt.Sprintf("bench-%05d", i) }

func benchService(j int) string { return fmt.Sprintf("svc-%03d", j) }

// fixture returns the fleet's inputs and policies.
func (b *benchFleet) fixture(t testing.TB) *sdktest.Fixture {
	t.Helper()
	f := &sdktest.Fixture{Policies: []json.RawMessage{encodeObj(t, mustDecode(b.accessPolicy()))}}
	if b.virtual {
		f.Policies = append(f.Policies, encodeObj(t, mustDecode(b.virtualDestination())))
	}
	for i := range b.clusters {
		c := sdktest.Cluster{Name: benchCluster(i), Meshes: []string{"istio"}}
		for _, o := range b.clusterObjects(i) {
			c.Objects = append(c.Objects, encodeObj(t, o))
		}
		f.Clusters = append(f.Clusters, c)
	}
	return f
}

func (b *benchFleet) clusterObjects(i int) []obj {
	name := benchCluster(i)
	region, zone := fmt.Sprintf("region-%d", i%4), fmt.Sprintf("zone-%d", i%12)
	if z, ok := b.zone[i]; ok {
		zone = z
	}
	objs := []obj{
		{"apiVersion": "v1", "kind": "Node", "metadata": obj{"name": name + "-node-1", "labels": obj{
			"topology.kubernetes.io/region": region, "topology.kubernetes.io/zone": zone}}},
		{"apiVersion": "discovery.meshrelay.io/v1alpha1", "kind": "Mesh", "metadata": obj{"name": "istio", "namespace": "istio-system"},
			"spec": obj{"type": "istio", "namespace": "istio-system", "trustDomain": "cluster.local", "network": "network-" + name}},
	}
	if b.gateways {
		objs = append(objs, obj{"apiVersion": "discovery.meshrelay.io/v1alpha1", "kind": "Gateway",
			"metadata": obj{"name": "istio-eastwestgateway", "namespace": "istio-system"},
			"spec":     obj{"mesh": "istio", "addresses": []any{fmt.Sprintf("198.18.0.%d", i+1)}, "port": 15443}})
	}
	for j := range b.services {
		objs = append(objs, b.serviceObjects(i, j, zone)...)
	}
	return objs
}

// serviceObjects returns service j of cluster i: its ServiceAccount,
// Service, Deployment and EndpointSlice of two endpoints.
func (b *benchFleet) serviceObjects(i, j int, zone string) []obj {
	svc := benchService(j)
	rev := b.rev[[2]int{i, j}]
	if rev == "" {
		rev = "r0"
	}
	objectMeta := func(name string) obj {
		return obj{"name": name, "namespace": benchNamespace, "labels": obj{"app": svc}}
	}
	var endpoints []any
	for k := range 2 {
		address := fmt.Sprintf("10.%d.%d.%d", 128+i>>8&127, i&255, (2*j+k)%254+1)
		if a, ok := b.address[[2]int{i, j}]; ok && k == 0 {
			address = a
		}
		endpoints = append(endpoints, obj{"addresses": []any{address}, "conditions": obj{"ready": true}, "zone": zone,
			"nodeName": benchCluster(i) + "-node-1"})
	}
	return []obj{
		{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": objectMeta(svc)},
		{"apiVersion": "v1", "kind": "Service", "metadata": objectMeta(svc), "spec": obj{
			"selector": obj{"app": svc, "bench.meshrelay.io/rev": rev},
			"ports":    []any{obj{"name": "http", "port": 8080, "targetPort": 8080, "protocol": "TCP"}},
		}},
		{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": objectMeta(svc + "-v1"), "spec": obj{
			"selector": obj{"matchLabels": obj{"app": svc, "version": "v1"}},
			"template": obj{"metadata": obj{"labels": obj{"app": svc, "version": "v1", "bench.meshrelay.io/rev": rev}},
				"spec": obj{"serviceAccountName": svc, "containers": []any{obj{"name": "app", "image": "app:1.0.0"}}}},
		}},
		{"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
			"metadata":  obj{"name": svc + "-1", "namespace": benchNamespace, "labels": obj{"kubernetes.io/service-name": svc}},
			"ports":     []any{obj{"name": "http", "port": 8080, "protocol": "TCP"}},
			"endpoints": endpoints},
	}
}

// accessPolicy is internal/bench's PolicyYAML: every Service of the namespace
// accepts GET on the marker's path from svc-000's service account.
func (b *benchFleet) accessPolicy() []byte {
	return fmt.Appendf(nil, `apiVersion: policy.meshrelay.io/v1alpha1
kind: AccessPolicy
metadata: {name: bench-access, namespace: %[1]s}
spec:
  destinationSelectors: [{namespaces: [%[1]s]}]
  action: Allow
  from:
  - serviceAccounts: [{namespace: %[1]s, name: svc-000}]
  ports: [8080]
  methods: [GET]
  paths: ["/%[2]s/*"]
`, benchNamespace, b.marker)
}

// virtualDestination is internal/bench's GlobalPolicyYAML: svc-000 of every
// cluster behind one hostname.
func (b *benchFleet) virtualDestination() []byte {
	return fmt.Appendf(nil, `apiVersion: policy.meshrelay.io/v1alpha1
kind: VirtualDestination
metadata: {name: bench-global, namespace: %[1]s}
spec:
  hostname: svc-000.%[1]s.global
  ports: [{number: 8080, protocol: HTTP, targetPort: 8080}]
  destinationSelectors: [{namespaces: [%[1]s], names: [svc-000]}]
  failover: {mode: Locality}
  outlierDetection: {consecutiveErrors: 5, interval: 10s, baseEjectionTime: 30s, maxEjectionPercent: 50}
`, benchNamespace)
}

// step is one change of a benchFleet with the targets it must compute.
type step struct {
	name   string
	change func(*benchFleet)
	want   []string
}

// runSteps applies the steps one after the other in one session, checks
// which targets each computes, and then that every step's incremental
// outputs equal a full translation.
func runSteps(t *testing.T, base *benchFleet, steps []step) {
	t.Helper()
	s := sdktest.NewSession(t, istio.New())
	fixtures := []*sdktest.Fixture{base.fixture(t)}
	s.Update(fixtures[0])
	var all []string
	for i := range base.clusters {
		all = append(all, benchCluster(i))
	}
	if got := s.Computed(); !slices.Equal(got, all) {
		t.Fatalf("full update computed %v, want %v", got, all)
	}
	b := base
	for _, st := range steps {
		b = b.clone()
		st.change(b)
		f := b.fixture(t)
		fixtures = append(fixtures, f)
		s.Update(f)
		if got := s.Computed(); !slices.Equal(got, st.want) {
			t.Errorf("%s computed %v, want %v", st.name, got, st.want)
		}
	}
	sdktest.CheckIncremental(t, istio.New(), fixtures...)
}

// TestIncrementalBenchFleet checks that with internal/bench's AccessPolicy a
// one-cluster change computes that cluster's target only, and a policy
// edit every target.
func TestIncrementalBenchFleet(t *testing.T) {
	runSteps(t, newBenchFleet(4, 5), []step{
		{"a Service selector and Deployment change in bench-00001", func(b *benchFleet) { b.rev[[2]int{1, 2}] = "r1" }, []string{"bench-00001"}},
		{"a second change of the same Service", func(b *benchFleet) { b.rev[[2]int{1, 2}] = "r2" }, []string{"bench-00001"}},
		{"a change in bench-00003", func(b *benchFleet) { b.rev[[2]int{3, 0}] = "r1" }, []string{"bench-00003"}},
		{"an endpoint change", func(b *benchFleet) { b.address[[2]int{2, 1}] = "100.64.0.1" }, nil},
		{"a policy edit", func(b *benchFleet) { b.marker = "p1" }, []string{"bench-00000", "bench-00001", "bench-00002", "bench-00003"}},
		{"a new Istio cluster", func(b *benchFleet) { b.clusters = 5 }, []string{"bench-00004"}},
		{"a removed Istio cluster", func(b *benchFleet) { b.clusters = 4 }, nil},
	})
}

// TestIncrementalGlobalVirtualDestination adds internal/bench's global
// VirtualDestination: every target imports svc-000 of every other cluster,
// but depends on its locality and gateways, not on its endpoints or Service.
func TestIncrementalGlobalVirtualDestination(t *testing.T) {
	base := newBenchFleet(4, 5)
	base.gateways, base.virtual = true, true
	all := []string{"bench-00000", "bench-00001", "bench-00002", "bench-00003"}
	runSteps(t, base, []step{
		{"an endpoint address of svc-000", func(b *benchFleet) { b.address[[2]int{2, 0}] = "100.64.0.1" }, []string{"bench-00002"}},
		{"a Service change of svc-003", func(b *benchFleet) { b.rev[[2]int{1, 3}] = "r1" }, []string{"bench-00001"}},
		{"a Service change of svc-000", func(b *benchFleet) { b.rev[[2]int{1, 0}] = "r1" }, []string{"bench-00001"}},
		{"the zone of bench-00002's endpoints", func(b *benchFleet) { b.zone[2] = "zone-9" }, all},
		{"a policy edit", func(b *benchFleet) { b.marker = "p1" }, all},
	})
}

// TestIncrementalRandom runs random changes of services, workloads,
// endpoints, gateways, meshes, nodes, policies (VirtualDestinations and
// TrafficPolicies across clusters among them) and clusters over the
// fixtures of testdata: after every step, incremental outputs must equal a
// full translation.
func TestIncrementalRandom(t *testing.T) {
	steps := 30
	if testing.Short() {
		steps = 10
	}
	for _, name := range goldenCases {
		for seed := range 2 {
			t.Run(fmt.Sprintf("%s/%d", name, seed), func(t *testing.T) {
				m := loadModel(t, name)
				if seed == 1 {
					for _, p := range poolPolicies {
						m.Policies = append(m.Policies, mustDecode([]byte(p)))
					}
				}
				r := rand.New(rand.NewPCG(uint64(seed), uint64(len(name))))
				sdktest.CheckIncremental(t, istio.New(), randomSteps(t, m, r, steps)...)
			})
		}
	}
}

// TestConflictsPerTarget shows where name conflicts are decided. An
// AccessPolicy whose AuthorizationPolicy takes, in one cluster, the name
// another policy's took is refused in that cluster only. A
// VirtualDestination whose DestinationRule takes, in one cluster, the name
// of a TrafficPolicy's is refused in every cluster.
func TestConflictsPerTarget(t *testing.T) {
	f := loadFixture(t, "testdata/access.yaml")
	for _, p := range poolPolicies {
		if strings.Contains(p, "name: pool-x") || strings.Contains(p, "name: pool,") || strings.Contains(p, "name: pool-ratings,") {
			f.Policies = append(f.Policies, encodeObj(t, mustDecode([]byte(p))))
		}
	}
	south := modelOf(t, loadFixture(t, "testdata/diagnostics.yaml")).Cluster("south")
	f.Clusters = append(f.Clusters, (&sdktest.Model{Clusters: []*clusterModel{south}}).Fixture(t).Clusters...)
	res := sdktest.RunFixture(t, istio.New(), f)
	names := outputNames(res)
	if want := "east security.istio.io/v1 AuthorizationPolicy bookinfo/pool-x-ratings-details"; !slices.Contains(names, want) {
		t.Errorf("outputs lack %s: %v", want, names)
	}
	for _, n := range names {
		if strings.HasSuffix(n, " ServiceEntry bookinfo/pool-ratings") {
			t.Errorf("refused VirtualDestination pool-ratings emitted %s", n)
		}
	}
	var refused []string
	for _, d := range res.Diagnostics {
		if strings.Contains(d.Summary, "is already generated") {
			refused = append(refused, d.Cluster+" "+d.Policy.String())
		}
	}
	slices.Sort(refused)
	want := []string{"east VirtualDestination/bookinfo/pool-ratings", "south AccessPolicy/bookinfo/pool-x-ratings"}
	if !slices.Equal(refused, want) {
		t.Errorf("conflicts %v, want %v", refused, want)
	}
}
