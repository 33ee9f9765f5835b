package istio_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/plugins/istio"
	"github.com/meshrelay/meshrelay/sdk"
	"github.com/meshrelay/meshrelay/sdk/sdktest"
	clientnetworking "istio.io/client-go/pkg/apis/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// samples are Istio's own bookinfo networking samples.
const samples = "testdata/istio-samples/bookinfo/networking"

// versionCluster says where each reviews version runs in the bookinfo
// fixture: v1 and v2 in east, v3 in west.
var versionCluster = map[string]string{"v1": "east", "v2": "east", "v3": "west"}

// route is a weighted route to a subset of reviews, in meaning: the weight
// a single destination gets implicitly is made explicit.
type route struct {
	Subset string
	Labels map[string]string
	Weight int32
}

// TestBookinfoMatchesIstioSamples writes each of Istio's reviews routing
// samples as a TrafficPolicy over the two-cluster bookinfo, and checks that
// in both clusters the translated VirtualService and DestinationRules mean
// what the sample and destination-rule-all.yaml mean: the same subsets with
// the same labels and weights, each reaching the cluster that runs it.
func TestBookinfoMatchesIstioSamples(t *testing.T) {
	subsets := sampleSubsets(t, "reviews")
	for _, name := range []string{
		"virtual-service-reviews-80-20", "virtual-service-reviews-90-10", "virtual-service-reviews-50-v3",
		"virtual-service-reviews-v2-v3", "virtual-service-reviews-v3",
	} {
		t.Run(name, func(t *testing.T) {
			var vs clientnetworking.VirtualService
			readYAML(t, filepath.Join(samples, name+".yaml"), &vs)
			var want []route
			tp := &policyv1alpha1.TrafficPolicy{
				TypeMeta:   metav1.TypeMeta{APIVersion: policyv1alpha1.SchemeGroupVersion.String(), Kind: policyv1alpha1.KindTrafficPolicy},
				ObjectMeta: metav1.ObjectMeta{Name: "reviews-sample", Namespace: "bookinfo"},
				Spec: policyv1alpha1.TrafficPolicySpec{
					DestinationSelectors: []policyv1alpha1.DestinationSelector{{Namespaces: []string{"bookinfo"}, Names: []string{"reviews"}}},
				},
			}
			for _, r := range vs.Spec.Http[0].Route {
				subset := r.Destination.Subset
				want = append(want, route{Subset: subset, Labels: subsets[subset], Weight: r.Weight})
				tp.Spec.HTTP = appendRoute(tp.Spec.HTTP, policyv1alpha1.WeightedDestination{
					Destination: policyv1alpha1.Destination{
						Service: &policyv1alpha1.ServiceRef{Cluster: versionCluster[subset], Namespace: "bookinfo", Name: "reviews"},
						Subset:  subsets[subset],
					},
					Weight: r.Weight,
				})
			}
			want = explicitWeights(want)

			f := loadFixture(t, "testdata/bookinfo.yaml")
			f.Policies = []json.RawMessage{mustJSON(t, tp)}
			res := sdktest.RunFixture(t, istio.New(), f)
			if len(res.Diagnostics) > 0 {
				t.Fatalf("Translate() diagnostics = %v, want none", res.Diagnostics)
			}
			for _, cluster := range []string{"east", "west"} {
				got := translatedRoutes(t, res, cluster, "reviews.bookinfo.svc.cluster.local")
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("cluster %s: routes differ from %s (-istio sample +translated):\n%s", cluster, name, diff)
				}
			}
		})
	}
}

func appendRoute(rules []policyv1alpha1.HTTPRule, d policyv1alpha1.WeightedDestination) []policyv1alpha1.HTTPRule {
	if len(rules) == 0 {
		rules = []policyv1alpha1.HTTPRule{{}}
	}
	rules[0].Route = append(rules[0].Route, d)
	return rules
}

func explicitWeights(rs []route) []route {
	if len(rs) == 1 && rs[0].Weight == 0 {
		rs[0].Weight = 100
	}
	return rs
}

// translatedRoutes returns the routes of the VirtualService for host in
// cluster, checking that each destination is the reviews Service of the
// cluster running its subset, and resolving each subset's labels from the
// DestinationRules emitted there.
func translatedRoutes(t *testing.T, res *sdktest.Result, cluster, host string) []route {
	t.Helper()
	var vss []*clientnetworking.VirtualService
	rules := map[string]map[string]map[string]string{} // host -> subset -> labels
	for _, o := range res.Outputs {
		if o.Cluster != cluster {
			continue
		}
		switch o.Kind {
		case "VirtualService":
			vs := &clientnetworking.VirtualService{}
			decode(t, o.Body, vs)
			if slices.Equal(vs.Spec.Hosts, []string{host}) {
				vss = append(vss, vs)
			}
		case "DestinationRule":
			dr := &clientnetworking.DestinationRule{}
			decode(t, o.Body, dr)
			for _, s := range dr.Spec.Subsets {
				if rules[dr.Spec.Host] == nil {
					rules[dr.Spec.Host] = map[string]map[string]string{}
				}
				rules[dr.Spec.Host][s.Name] = s.Labels
			}
		}
	}
	if len(vss) != 1 {
		t.Fatalf("cluster %s: %d VirtualServices for %s, want 1", cluster, len(vss), host)
	}
	var got []route
	for _, r := range vss[0].Spec.Http[0].Route {
		d := r.Destination
		wantHost := "reviews.bookinfo.svc.cluster.local"
		if c := versionCluster[d.Subset]; c != cluster {
			wantHost = fmt.Sprintf("reviews.bookinfo.svc.%s.global", c)
		}
		if d.Host != wantHost {
			t.Errorf("cluster %s: subset %s goes to %s, want %s (reviews in the cluster running it)", cluster, d.Subset, d.Host, wantHost)
		}
		got = append(got, route{Subset: d.Subset, Labels: rules[d.Host][d.Subset], Weight: r.Weight})
	}
	return explicitWeights(got)
}

// sampleSubsets returns the subsets destination-rule-all.yaml defines for host.
func sampleSubsets(t *testing.T, host string) map[string]map[string]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(samples, "destination-rule-all.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var raw map[string]any
		if err := dec.Decode(&raw); err != nil {
			t.Fatalf("no DestinationRule for %s in destination-rule-all.yaml: %v", host, err)
		}
		dr := &clientnetworking.DestinationRule{}
		decode(t, mustJSON(t, raw), dr)
		if dr.Spec.Host != host {
			continue
		}
		out := map[string]map[string]string{}
		for _, s := range dr.Spec.Subsets {
			out[s.Name] = s.Labels
		}
		return out
	}
}

// TestCrossClusterRemoval checks that a destination in west used from east
// produces the resources east needs, and that they go when west's Service goes.
func TestCrossClusterRemoval(t *testing.T) {
	tp := &policyv1alpha1.TrafficPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: policyv1alpha1.SchemeGroupVersion.String(), Kind: policyv1alpha1.KindTrafficPolicy},
		ObjectMeta: metav1.ObjectMeta{Name: "reviews-v1", Namespace: "bookinfo"},
		Spec: policyv1alpha1.TrafficPolicySpec{
			DestinationSelectors: []policyv1alpha1.DestinationSelector{{Namespaces: []string{"bookinfo"}, Names: []string{"reviews"}}},
			HTTP: []policyv1alpha1.HTTPRule{{Route: []policyv1alpha1.WeightedDestination{{
				Destination: policyv1alpha1.Destination{
					Service: &policyv1alpha1.ServiceRef{Cluster: "east", Namespace: "bookinfo", Name: "reviews"},
					Subset:  map[string]string{"version": "v1"},
				},
			}}}},
		},
	}
	f := loadFixture(t, "testdata/bookinfo.yaml")
	f.Policies = []json.RawMessage{mustJSON(t, tp)}
	remote := []string{
		"east networking.istio.io/v1 ServiceEntry bookinfo/reviews-west",
		"east networking.istio.io/v1 VirtualService bookinfo/reviews-v1-reviews-west",
		"west networking.istio.io/v1 ServiceEntry bookinfo/reviews-west",
	}
	before := outputNames(sdktest.RunFixture(t, istio.New(), f))
	for _, name := range remote {
		if !slices.Contains(before, name) {
			t.Errorf("with reviews in west: no %s in %v", name, before)
		}
	}

	removeObject(t, f, "west", "Service", "bookinfo", "reviews")
	res := sdktest.RunFixture(t, istio.New(), f)
	after := outputNames(res)
	for _, name := range remote {
		if slices.Contains(after, name) {
			t.Errorf("without reviews in west: %s is still emitted", name)
		}
	}
	if local := "east networking.istio.io/v1 VirtualService bookinfo/reviews-v1-reviews"; !slices.Contains(after, local) {
		t.Errorf("without reviews in west: %s is gone too, want it kept; outputs %v", local, after)
	}
	if len(res.Diagnostics) > 0 {
		t.Errorf("diagnostics = %v, want none", res.Diagnostics)
	}
}

// TestRouteToRemovedService checks that a route to a Service that is gone
// is an error on the route's path, and the policy emits nothing.
func TestRouteToRemovedService(t *testing.T) {
	f := loadFixture(t, "testdata/bookinfo.yaml")
	removeObject(t, f, "west", "Service", "bookinfo", "reviews")
	res := sdktest.RunFixture(t, istio.New(), f)
	var found bool
	for _, d := range res.Diagnostics {
		if d.Policy.Name == "reviews-split" && d.Severity == sdk.SeverityError && d.Path == "spec.http[0].route[2].service" {
			found = true
		}
	}
	if !found {
		t.Errorf("diagnostics = %v, want an error on TrafficPolicy reviews-split at spec.http[0].route[2].service", res.Diagnostics)
	}
	for _, o := range res.Outputs {
		if strings.Contains(string(o.Body), "trafficpolicy.reviews-split") {
			t.Errorf("%s %s %s/%s emitted for the refused policy", o.Cluster, o.Kind, o.Namespace, o.Name)
		}
		if strings.Contains(string(o.Body), "svc.west.global") {
			t.Errorf("%s %s %s/%s still mentions west's reviews", o.Cluster, o.Kind, o.Namespace, o.Name)
		}
	}
}

// TestDeterministic checks that the same fleet, given in another order,
// gives the same bytes.
func TestDeterministic(t *testing.T) {
	for _, name := range goldenCases {
		t.Run(name, func(t *testing.T) {
			f := loadFixture(t, filepath.Join("testdata", name+".yaml"))
			first, err := sdktest.Marshal(sdktest.RunFixture(t, istio.New(), f))
			if err != nil {
				t.Fatal(err)
			}
			slices.Reverse(f.Clusters)
			for i := range f.Clusters {
				slices.Reverse(f.Clusters[i].Objects)
			}
			slices.Reverse(f.Policies)
			second, err := sdktest.Marshal(sdktest.RunFixture(t, istio.New(), f))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(first, second) {
				t.Errorf("Translate(%q) differs when the fixture is reordered:\n%s", name, cmp.Diff(string(first), string(second)))
			}
		})
	}
}

// removeObject deletes an object from a cluster of the fixture.
func removeObject(t *testing.T, f *sdktest.Fixture, cluster, kind, namespace, name string) {
	t.Helper()
	for i := range f.Clusters {
		if f.Clusters[i].Name != cluster {
			continue
		}
		before := len(f.Clusters[i].Objects)
		f.Clusters[i].Objects = slices.DeleteFunc(slices.Clone(f.Clusters[i].Objects), func(o json.RawMessage) bool {
			var m metav1.PartialObjectMetadata
			decode(t, o, &m)
			return m.Kind == kind && m.Namespace == namespace && m.Name == name
		})
		if len(f.Clusters[i].Objects) != before-1 {
			t.Fatalf("fixture cluster %s has no %s %s/%s", cluster, kind, namespace, name)
		}
		return
	}
	t.Fatalf("fixture has no cluster %s", cluster)
}

func outputNames(res *sdktest.Result) []string {
	var out []string
	for _, o := range res.Outputs {
		out = append(out, fmt.Sprintf("%s %s/%s %s %s/%s", o.Cluster, o.Group, o.Version, o.Kind, o.Namespace, o.Name))
	}
	return out
}

func loadFixture(t *testing.T, path string) *sdktest.Fixture {
	t.Helper()
	f, err := sdktest.LoadFixture(path)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func readYAML(t *testing.T, path string, into any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, into); err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
}

func decode(t *testing.T, data []byte, into any) {
	t.Helper()
	if err := json.Unmarshal(data, into); err != nil {
		t.Fatalf("decode %s: %v", data, err)
	}
}

func mustJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
