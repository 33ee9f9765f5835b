package sdktest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/meshrelay/meshrelay/sdk"
)

// exporter is a Translator that reads the way real ones do: per
// AccessPolicy, a ConfigMap per selected Service of the target; per
// VirtualDestination, a ConfigMap listing every selected Service of the
// fleet with its endpoints; and one ConfigMap with the fleet's trust
// domains, derived once through an sdk.Shared.
type exporter struct {
	fail error
}

func (exporter) Describe() sdk.Description {
	return sdk.Description{Name: "exporter", Version: "1", Backends: []string{"x"}, OutputKinds: []string{"/ConfigMap"}}
}

func (e exporter) TranslateTarget(_ context.Context, req *sdk.Request, resp *sdk.Response) error {
	if e.fail != nil && req.Target.Name == "c1" {
		return e.fail
	}
	t := req.Target
	for _, ap := range req.Fleet.AccessPolicies() {
		if !req.Fleet.SelectsAny(ap.Spec.DestinationSelectors) {
			resp.Diagnose(sdk.Warningf(ap, "spec.destinationSelectors", "selects no Service"))
		}
		for _, d := range t.Select(ap.Spec.DestinationSelectors) {
			resp.Emit(configMap("ap-"+ap.Name+"-"+d.Service.Name, map[string]any{"selector": fmt.Sprint(d.Service.Spec.Selector)}), ap)
		}
	}
	for _, vd := range req.Fleet.VirtualDestinations() {
		var members []string
		for _, d := range req.Fleet.Select(vd.Spec.DestinationSelectors) {
			var addrs []string
			for _, ep := range d.Cluster.Endpoints(d.Service.Namespace, d.Service.Name) {
				addrs = append(addrs, ep.Address)
			}
			members = append(members, d.Cluster.Name+"/"+d.Service.Name+"="+strings.Join(addrs, "+"))
		}
		resp.Emit(configMap("vd-"+vd.Name, map[string]any{"members": strings.Join(members, ",")}), vd)
	}
	domains := trustDomains.Get(req.Fleet)
	resp.Emit(configMap("domains", map[string]any{"domains": strings.Join(domains, ",")}))
	return nil
}

// trustDomains are the trust domains of the fleet's Istio clusters,
// sorted.
var trustDomains = sdk.NewShared("trust-domains", func(f *sdk.Fleet) []string {
	var out []string
	for _, c := range f.ClustersWithMesh("istio") {
		for _, m := range c.MeshInfo() {
			out = append(out, m.Spec.TrustDomain)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
})

func configMap(name string, data map[string]any) map[string]any {
	return map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": name, "namespace": "out"}, "data": data}
}

func raw(tb testing.TB, v any) json.RawMessage {
	tb.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// fleetSpec describes a random fleet: per cluster, its services with a
// selector revision, endpoint addresses and a trust domain.
type fleetSpec struct {
	clusters []clusterSpec
	policy   string // AccessPolicy paths marker
	vdName   string // the Service the VirtualDestination exports
}

type clusterSpec struct {
	name     string
	domain   string
	services []serviceSpec
}

type serviceSpec struct {
	name, rev, label string
	addrs            []string
}

func (fs fleetSpec) fixture(tb testing.TB) *Fixture {
	f := &Fixture{}
	for _, c := range fs.clusters {
		fc := Cluster{Name: c.name, Meshes: []string{"istio"}}
		fc.Objects = append(fc.Objects, raw(tb, map[string]any{
			"apiVersion": "discovery.meshrelay.io/v1alpha1", "kind": "Mesh", "metadata": map[string]any{"name": "istio"},
			"spec": map[string]any{"type": "istio", "trustDomain": c.domain},
		}))
		for _, s := range c.services {
			fc.Objects = append(fc.Objects, raw(tb, map[string]any{
				"apiVersion": "v1", "kind": "Service", "metadata": map[string]any{"name": s.name, "namespace": "ns", "labels": map[string]any{"tier": s.label}},
				"spec": map[string]any{"selector": map[string]any{"app": s.name, "rev": s.rev}},
			}))
			var eps []any
			for _, a := range s.addrs {
				eps = append(eps, map[string]any{"addresses": []any{a}})
			}
			fc.Objects = append(fc.Objects, raw(tb, map[string]any{
				"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
				"metadata":    map[string]any{"name": s.name + "-1", "namespace": "ns", "labels": map[string]any{"kubernetes.io/service-name": s.name}},
				"addressType": "IPv4", "endpoints": eps,
			}))
		}
		f.Clusters = append(f.Clusters, fc)
	}
	f.Policies = append(f.Policies, raw(tb, map[string]any{
		"apiVersion": "policy.meshrelay.io/v1alpha1", "kind": "AccessPolicy", "metadata": map[string]any{"name": "front", "namespace": "ns"},
		"spec": map[string]any{"destinationSelectors": []any{map[string]any{"labels": map[string]any{"tier": "front"}}},
			"from": []any{map[string]any{"namespaces": []any{"ns"}}}, "paths": []any{"/" + fs.policy}},
	}))
	f.Policies = append(f.Policies, raw(tb, map[string]any{
		"apiVersion": "policy.meshrelay.io/v1alpha1", "kind": "VirtualDestination", "metadata": map[string]any{"name": "global", "namespace": "ns"},
		"spec": map[string]any{"hostname": "global.example.com", "ports": []any{map[string]any{"number": 80, "protocol": "HTTP"}},
			"destinationSelectors": []any{map[string]any{"names": []any{fs.vdName}, "namespaces": []any{"ns"}}}},
	}))
	return f
}

func newFleetSpec(clusters, services int) fleetSpec {
	fs := fleetSpec{policy: "p0", vdName: "s0"}
	for i := range clusters {
		c := clusterSpec{name: fmt.Sprintf("c%d", i), domain: "cluster.local"}
		for j := range services {
			label := "back"
			if j%2 == 0 {
				label = "front"
			}
			c.services = append(c.services, serviceSpec{name: fmt.Sprintf("s%d", j), rev: "r0", label: label, addrs: []string{fmt.Sprintf("10.%d.%d.1", i, j)}})
		}
		fs.clusters = append(fs.clusters, c)
	}
	return fs
}

func (fs fleetSpec) clone() fleetSpec {
	out := fs
	out.clusters = nil
	for _, c := range fs.clusters {
		cc := c
		cc.services = nil
		for _, s := range c.services {
			s.addrs = slices.Clone(s.addrs)
			cc.services = append(cc.services, s)
		}
		out.clusters = append(out.clusters, cc)
	}
	return out
}

func TestTargetsRecomputeOnlyWhatAChangeConcerns(t *testing.T) {
	fs := newFleetSpec(4, 3)
	s := NewSession(t, exporter{})
	s.Update(fs.fixture(t))
	if got := s.Computed(); len(got) != 4 {
		t.Fatalf("full update computed %v, want every target", got)
	}
	all := []string{"c0", "c1", "c2", "c3"}
	steps := []struct {
		name   string
		change func(*fleetSpec)
		want   []string
	}{
		{"a selector change of a service no other cluster reads", func(f *fleetSpec) { f.clusters[1].services[1].rev = "r1" }, []string{"c1"}},
		{"an endpoint change of a service nothing exports", func(f *fleetSpec) { f.clusters[2].services[2].addrs = []string{"10.9.9.9"} }, nil},
		{"an endpoint change of the exported service", func(f *fleetSpec) { f.clusters[2].services[0].addrs = []string{"10.8.8.8"} }, all},
		{"a label change that changes what the policy selects", func(f *fleetSpec) { f.clusters[3].services[1].label = "front" }, all},
		{"a policy edit", func(f *fleetSpec) { f.policy = "p1" }, all},
		{"a trust domain change, which changes the shared value", func(f *fleetSpec) { f.clusters[0].domain = "west.local" }, all},
		{"no change", func(*fleetSpec) {}, nil},
	}
	for _, step := range steps {
		step.change(&fs)
		s.Update(fs.fixture(t))
		if got := s.Computed(); !slices.Equal(got, step.want) {
			t.Errorf("%s: computed %v, want %v", step.name, got, step.want)
		}
	}
	// A trust domain change that leaves the shared value as it was
	// recomputes only the cluster whose Mesh changed, for its own reads.
	fs.clusters[1].domain = "west.local"
	fs.clusters[0].domain = "cluster.local"
	s.Update(fs.fixture(t))
	fs.clusters[1].domain = "cluster.local"
	fs.clusters[0].domain = "west.local"
	s.Update(fs.fixture(t))
	if got := s.Computed(); len(got) != 0 {
		t.Errorf("a change that keeps the shared value computed %v, want none", got)
	}
}

func TestIncrementalEqualsFull(t *testing.T) {
	for _, tr := range []Translator{exporter{}, lister{}} {
		t.Run(tr.Describe().Name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			fs := newFleetSpec(3, 3)
			fixtures := []*Fixture{fs.fixture(t)}
			for i := range 40 {
				fs = fs.clone()
				randomChange(rng, &fs, i)
				fixtures = append(fixtures, fs.fixture(t))
			}
			CheckIncremental(t, tr, fixtures...)
		})
	}
}

// randomChange makes one random change to the fleet.
func randomChange(rng *rand.Rand, fs *fleetSpec, step int) {
	c := &fs.clusters[rng.IntN(len(fs.clusters))]
	switch rng.IntN(8) {
	case 0:
		fs.policy = fmt.Sprintf("p%d", step)
	case 1:
		fs.vdName = fmt.Sprintf("s%d", rng.IntN(4))
	case 2:
		c.domain = []string{"cluster.local", "west.local"}[rng.IntN(2)]
	case 3: // a cluster joins or leaves
		if len(fs.clusters) > 1 && rng.IntN(2) == 0 {
			i := rng.IntN(len(fs.clusters))
			fs.clusters = slices.Delete(fs.clusters, i, i+1)
		} else {
			fs.clusters = append(fs.clusters, clusterSpec{name: fmt.Sprintf("n%d", step), domain: "cluster.local",
				services: []serviceSpec{{name: "s0", rev: "r0", label: "front", addrs: []string{"10.99.0.1"}}}})
		}
	case 4: // a service comes or goes
		if len(c.services) > 0 && rng.IntN(2) == 0 {
			c.services = c.services[:len(c.services)-1]
		} else {
			c.services = append(c.services, serviceSpec{name: fmt.Sprintf("s%d", len(c.services)), rev: "r0", label: "front"})
		}
	default:
		if len(c.services) == 0 {
			return
		}
		svc := &c.services[rng.IntN(len(c.services))]
		switch rng.IntN(3) {
		case 0:
			svc.rev = fmt.Sprintf("r%d", step)
		case 1:
			svc.label = []string{"front", "back"}[rng.IntN(2)]
		default:
			svc.addrs = []string{fmt.Sprintf("10.1.%d.%d", step, rng.IntN(200))}
		}
	}
}

func TestScopedSessionComputesOnlyItsTargets(t *testing.T) {
	fs := newFleetSpec(3, 2)
	s := NewSession(t, exporter{})
	s.Scope("c0", "c2")
	res := s.Update(fs.fixture(t))
	if got := s.Computed(); !slices.Equal(got, []string{"c0", "c2"}) {
		t.Fatalf("scoped full update computed %v, want [c0 c2]", got)
	}
	for _, o := range res.Outputs {
		if o.Cluster == "c1" {
			t.Fatalf("scoped update sent output for c1: %s", o.Name)
		}
	}
	// c1 joins the scope: it is computed, and nothing else is.
	s.Scope("c0", "c1", "c2")
	s.Update(fs.fixture(t))
	if got := s.Computed(); !slices.Equal(got, []string{"c1"}) {
		t.Errorf("widening the scope computed %v, want [c1]", got)
	}
	if sent := s.Sent(); len(sent) != 1 || sent[0][0] != "c1" {
		t.Errorf("widening the scope sent %v, want c1's output only", sent)
	}
	// c1 leaves the scope and comes back: it is computed again and its
	// set sent, as new, since another replica may have served it.
	s.Scope("c0", "c2")
	s.Update(fs.fixture(t))
	s.Scope("c0", "c1", "c2")
	s.Update(fs.fixture(t))
	if got := s.Computed(); !slices.Equal(got, []string{"c1"}) {
		t.Errorf("c1 back in the scope computed %v, want [c1]", got)
	}
	if sent := s.Sent(); len(sent) != 1 || sent[0][0] != "c1" {
		t.Errorf("c1 back in the scope sent %v, want c1's output", sent)
	}
	// While c1 is out, a change it reads does not compute it (c0 and c2
	// export from it, so they are).
	s.Scope("c0", "c2")
	s.Update(fs.fixture(t))
	fs.clusters[1].services[0].rev = "r9"
	fs.policy = "p9"
	s.Update(fs.fixture(t))
	if got := s.Computed(); slices.Contains(got, "c1") || len(got) == 0 {
		t.Errorf("a change outside the scope computed %v, want c0 and c2 only", got)
	}
	for _, k := range s.Sent() {
		if k[0] == "c1" {
			t.Errorf("a change of c1 outside the scope sent %v", k)
		}
	}
}

func TestTargetErrorKeepsNothingHalfSent(t *testing.T) {
	fs := newFleetSpec(2, 2)
	ok := NewSession(t, exporter{})
	ok.Update(fs.fixture(t))
	conn, stop, err := sdk.ServeInProcess(exporter{fail: errors.New("boom")})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	_ = conn
	// A failing target fails the whole update with its error and no output.
	s := NewSession(t, exporter{fail: errors.New("boom")})
	err = s.translate(fs.fixture(t))
	if err == nil || !strings.Contains(err.Error(), `target "c1"`) || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("failing target answered %v, want an error naming target c1", err)
	}
}
