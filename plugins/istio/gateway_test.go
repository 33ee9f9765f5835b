package istio_test

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/meshrelay/meshrelay/plugins/istio"
	"github.com/meshrelay/meshrelay/sdk"
	"github.com/meshrelay/meshrelay/sdk/sdktest"
	"google.golang.org/protobuf/testing/protocmp"
	networking "istio.io/api/networking/v1alpha3"
	clientnetworking "istio.io/client-go/pkg/apis/networking/v1"
)

// gatewaysOf returns the Gateways of a result by "cluster namespace/name",
// and checks they are networking.istio.io/v1.
func gatewaysOf(t *testing.T, res *sdktest.Result) map[string]*clientnetworking.Gateway {
	t.Helper()
	for _, o := range res.Outputs {
		if o.Kind == "Gateway" && (o.Group != "networking.istio.io" || o.Version != "v1") {
			t.Errorf("Gateway %s/%s is %s/%s, want networking.istio.io/v1", o.Namespace, o.Name, o.Group, o.Version)
		}
	}
	return outputsOf[clientnetworking.Gateway](t, res, "Gateway")
}

// passthrough is the server of a Gateway admitting the hosts through an
// east-west gateway's cross-network port.
func passthrough(port uint32, hosts ...string) []*networking.Server {
	return []*networking.Server{{
		Port:  &networking.Port{Number: port, Name: "tls", Protocol: "TLS"},
		Hosts: hosts,
		Tls:   &networking.ServerTLSSettings{Mode: networking.ServerTLSSettings_AUTO_PASSTHROUGH},
	}}
}

// TestCrossNetworkGateways checks the Gateways of testdata/gateway.yaml:
// one per east-west gateway of a cluster whose Services clients of other
// clusters reach, selecting the gateway as discovered (Istio's default
// labels when discovery reported none), on its cross-network port, for
// the remote hosts and the VirtualDestination hostnames outside .global;
// none in a cluster that exports nothing or has no gateway, which a
// diagnostic names.
func TestCrossNetworkGateways(t *testing.T) {
	res := sdktest.Run(t, istio.New(), "testdata/gateway.yaml")
	got := gatewaysOf(t, res)
	want := map[string]struct {
		selector map[string]string
		servers  []*networking.Server
		policies string
	}{
		"east istio-gateways/eastwest-global": {
			selector: map[string]string{"app": "istio-eastwestgateway", "istio": "eastwestgateway", "topology.istio.io/network": "network-east"},
			servers:  passthrough(15443, "reviews.example.com"),
			policies: "VirtualDestination/bookinfo/reviews-global",
		},
		"west istio-system/istio-eastwestgateway-global": {
			selector: map[string]string{"istio": "eastwestgateway"},
			servers:  passthrough(16443, "*.global"),
			policies: "TrafficPolicy/bookinfo/ratings-timeout,VirtualDestination/bookinfo/ratings-global",
		},
	}
	if !slices.Equal(slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want))) {
		t.Fatalf("Gateways %v, want %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
	}
	for k, w := range want {
		gw := got[k]
		if diff := cmp.Diff(w.selector, gw.Spec.Selector); diff != "" {
			t.Errorf("%s: selector (-want +got):\n%s", k, diff)
		}
		if diff := cmp.Diff(w.servers, gw.Spec.Servers, protocmp.Transform()); diff != "" {
			t.Errorf("%s: servers (-want +got):\n%s", k, diff)
		}
		if gw.Labels[sdk.ManagedByLabel] != sdk.ManagedByValue || gw.Labels[sdk.PluginLabel] != istio.Name {
			t.Errorf("%s: labels %v, want meshrelay's ownership labels", k, gw.Labels)
		}
		if got := gw.Annotations[sdk.PoliciesAnnotation]; got != w.policies {
			t.Errorf("%s: policies %q, want %q", k, got, w.policies)
		}
	}
	var unreachable []string
	for _, d := range res.Diagnostics {
		if d.Policy.Name == "reviews-global" && strings.Contains(d.Summary, "north/bookinfo/reviews: its cluster has no Istio east-west gateway") {
			unreachable = append(unreachable, d.Cluster)
		}
	}
	if slices.Sort(unreachable); !slices.Equal(unreachable, []string{"east", "south", "west"}) {
		t.Errorf("clients warned that north's reviews is unreachable: %v, want east, south, west; diagnostics %+v", unreachable, res.Diagnostics)
	}
}

// TestCrossNetworkGatewaysFollowExports changes testdata/gateway.yaml step
// by step in one session: each Gateway goes when the last policy exporting
// through it goes, when its east-west gateway goes or when no other
// cluster runs Istio, and comes when a policy exports; incremental outputs
// equal full translations throughout.
func TestCrossNetworkGatewaysFollowExports(t *testing.T) {
	m := modelOf(t, loadFixture(t, "testdata/gateway.yaml"))
	removePolicy := func(name string) func() {
		return func() {
			m.Policies = slices.DeleteFunc(m.Policies, func(p obj) bool { return meta(p)["name"] == name })
		}
	}
	var eastGateway obj
	steps := []struct {
		name   string
		change func()
		want   []string
	}{
		{"base", func() {}, []string{"east istio-gateways/eastwest-global", "west istio-system/istio-eastwestgateway-global"}},
		{"the TrafficPolicy exporting ratings removed", removePolicy("ratings-timeout"),
			[]string{"east istio-gateways/eastwest-global", "west istio-system/istio-eastwestgateway-global"}},
		{"the VirtualDestination backed by ratings removed", removePolicy("ratings-global"),
			[]string{"east istio-gateways/eastwest-global"}},
		{"east's east-west gateway gone", func() {
			east := m.Cluster("east")
			i := slices.IndexFunc(east.Objects, func(o obj) bool { return kindOf(o) == "Gateway" })
			eastGateway = east.Objects[i]
			east.Objects = slices.Delete(east.Objects, i, i+1)
		}, nil},
		{"a TrafficPolicy exporting south's details", func() {
			m.Policies = append(m.Policies, mustDecode([]byte(`apiVersion: policy.meshrelay.io/v1alpha1
kind: TrafficPolicy
metadata: {name: details-timeout, namespace: bookinfo}
spec:
  destinationSelectors: [{clusters: [south], names: [details]}]
  http: [{timeout: 1s}]`)))
		}, []string{"south istio-system/istio-eastwestgateway-global"}},
		{"east's gateway back", func() {
			m.Cluster("east").Objects = append(m.Cluster("east").Objects, eastGateway)
		}, []string{"east istio-gateways/eastwest-global", "south istio-system/istio-eastwestgateway-global"}},
		{"east the only Istio cluster", func() {
			for _, c := range m.Clusters {
				if c.Name != "east" {
					c.Meshes = nil
				}
			}
		}, nil},
	}
	s := sdktest.NewSession(t, istio.New())
	var fixtures []*sdktest.Fixture
	for _, st := range steps {
		st.change()
		f := m.Fixture(t)
		fixtures = append(fixtures, f)
		got := slices.Sorted(maps.Keys(gatewaysOf(t, s.Update(f))))
		if !slices.Equal(got, st.want) {
			t.Errorf("%s: Gateways %v, want %v", st.name, got, st.want)
		}
	}
	sdktest.CheckIncremental(t, istio.New(), fixtures...)
}
