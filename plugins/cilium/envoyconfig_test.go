package cilium

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"
)

// decodedEnvoyConfig is a CiliumEnvoyConfig of a golden file with its
// Envoy resources decoded.
type decodedEnvoyConfig struct {
	spec      envoyConfigSpec
	listeners map[string]*routev3.RouteConfiguration
	clusters  map[string]*clusterv3.Cluster
}

// decodeEnvoyConfig decodes a golden CiliumEnvoyConfig and checks each
// Envoy resource with go-control-plane's ValidateAll, and that the
// listeners' HTTP connection managers carry their routes inline.
func decodeEnvoyConfig(t *testing.T, obj map[string]any) decodedEnvoyConfig {
	t.Helper()
	raw, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	var cfg envoyConfig
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	d := decodedEnvoyConfig{spec: cfg.Spec, listeners: map[string]*routev3.RouteConfiguration{}, clusters: map[string]*clusterv3.Cluster{}}
	for i, res := range cfg.Spec.Resources {
		var a anypb.Any
		if err := protojson.Unmarshal(res, &a); err != nil {
			t.Fatalf("%s resources[%d]: %v", cfg.Name, i, err)
		}
		m, err := a.UnmarshalNew()
		if err != nil {
			t.Fatalf("%s resources[%d]: %v", cfg.Name, i, err)
		}
		if v, ok := m.(interface{ ValidateAll() error }); !ok {
			t.Fatalf("%s resources[%d]: %T has no validation", cfg.Name, i, m)
		} else if err := v.ValidateAll(); err != nil {
			t.Errorf("%s resources[%d] (%s) is invalid: %v", cfg.Name, i, a.GetTypeUrl(), err)
		}
		switch m := m.(type) {
		case *listenerv3.Listener:
			d.listeners[m.GetName()] = inlineRoutes(t, m)
		case *clusterv3.Cluster:
			d.clusters[m.GetName()] = m
		default:
			t.Errorf("%s resources[%d]: unexpected %T", cfg.Name, i, m)
		}
	}
	return d
}

// inlineRoutes returns the route configuration of a listener's one HTTP
// connection manager.
func inlineRoutes(t *testing.T, l *listenerv3.Listener) *routev3.RouteConfiguration {
	t.Helper()
	chains := l.GetFilterChains()
	if len(chains) != 1 || len(chains[0].GetFilters()) != 1 {
		t.Fatalf("listener %s: want one filter chain with one filter", l.GetName())
	}
	var hcm hcmv3.HttpConnectionManager
	if err := chains[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		t.Fatalf("listener %s: %v", l.GetName(), err)
	}
	if hcm.GetRouteConfig() == nil {
		t.Fatalf("listener %s: routes are not inline", l.GetName())
	}
	return hcm.GetRouteConfig()
}

// routeClusters lists every cluster a route configuration sends to.
func routeClusters(rc *routev3.RouteConfiguration) []string {
	var out []string
	for _, vh := range rc.GetVirtualHosts() {
		for _, r := range vh.GetRoutes() {
			a := r.GetRoute()
			if c := a.GetCluster(); c != "" {
				out = append(out, c)
			}
			for _, w := range a.GetWeightedClusters().GetClusters() {
				out = append(out, w.GetName())
			}
			for _, m := range a.GetRequestMirrorPolicies() {
				out = append(out, m.GetCluster())
			}
		}
	}
	return out
}

// TestEnvoyConfigsAreConsistent checks every golden CiliumEnvoyConfig as
// Cilium will use it: each resource is valid Envoy configuration; each
// redirected Service port names a listener of the config; each cluster a
// route uses is a cluster of the config, an EDS cluster whose service name
// "namespace/name:port" is a listed backend Service port (so Cilium syncs
// its endpoints); and no resource name contains "/", so that Cilium
// qualifies the names of clusters and of the routes' references alike.
func TestEnvoyConfigsAreConsistent(t *testing.T) {
	checked := 0
	for _, name := range goldenCases(t) {
		for _, o := range readGolden(t, name) {
			if o.Object["kind"] != KindEnvoyConfig {
				continue
			}
			checked++
			d := decodeEnvoyConfig(t, o.Object)
			backends := map[string]bool{}
			for _, b := range d.spec.BackendServices {
				for _, n := range b.Number {
					backends[b.Namespace+"/"+b.Name+":"+n] = true
				}
			}
			for _, s := range d.spec.Services {
				if _, ok := d.listeners[s.Listener]; !ok || len(s.Ports) == 0 {
					t.Errorf("%s: service %s/%s redirects ports %v to listener %q, which is not in the config", name, s.Namespace, s.Name, s.Ports, s.Listener)
				}
			}
			for lname, rc := range d.listeners {
				for _, c := range routeClusters(rc) {
					cl, ok := d.clusters[c]
					switch {
					case !ok:
						t.Errorf("%s: listener %s routes to cluster %q, which is not in the config", name, lname, c)
					case cl.GetType() != clusterv3.Cluster_EDS || !backends[cl.GetEdsClusterConfig().GetServiceName()]:
						t.Errorf("%s: cluster %q is not an EDS cluster of a backend Service port: %v", name, c, cl)
					}
				}
			}
			for _, n := range slices.Concat(mapKeys(d.listeners), mapKeys(d.clusters)) {
				if strings.Contains(n, "/") {
					t.Errorf("%s: resource name %q contains a slash", name, n)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no golden CiliumEnvoyConfig checked")
	}
}

// TestEnvoyConfigCheckFails shows that the consistency checks can fail: a
// route to a cluster the config lacks is found.
func TestEnvoyConfigCheckFails(t *testing.T) {
	rc := &routev3.RouteConfiguration{VirtualHosts: []*routev3.VirtualHost{{Routes: []*routev3.Route{{
		Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: "ns:missing:80"}}},
	}}}}}
	if got := routeClusters(rc); !slices.Equal(got, []string{"ns:missing:80"}) {
		t.Fatalf("routeClusters() = %v", got)
	}
	bad := &clusterv3.Cluster{Name: "x", ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS}, LbPolicy: clusterv3.Cluster_LbPolicy(99)}
	if err := bad.ValidateAll(); err == nil {
		t.Error("ValidateAll of a cluster with an unknown lb policy: no error")
	}
}

func mapKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
