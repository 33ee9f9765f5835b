package envoy_test

import (
	"path/filepath"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/meshrelay/meshrelay/api/xds"
	"github.com/meshrelay/meshrelay/plugins/envoy"
	"github.com/meshrelay/meshrelay/sdk/sdktest"
)

// routeConfigs returns every RouteConfiguration of a result, by node and
// name: RDS resources and the inline ones of api_listeners.
func routeConfigs(t *testing.T, res *sdktest.Result) map[string]*routev3.RouteConfiguration {
	t.Helper()
	out := map[string]*routev3.RouteConfiguration{}
	for _, o := range res.Outputs {
		r, err := xds.Decode(o.Body)
		if err != nil {
			t.Fatal(err)
		}
		switch m := r.Message.(type) {
		case *routev3.RouteConfiguration:
			out[o.Cluster+"/"+r.NodeID+"/"+m.GetName()] = m
		case *listenerv3.Listener:
			api := m.GetApiListener().GetApiListener()
			if api == nil {
				continue
			}
			var hcm hcmv3.HttpConnectionManager
			if err := api.UnmarshalTo(&hcm); err != nil {
				t.Fatal(err)
			}
			if rc := hcm.GetRouteConfig(); rc != nil {
				out[o.Cluster+"/"+r.NodeID+"/"+m.GetName()] = rc
			}
		}
	}
	return out
}

func isCatchAll(r *routev3.Route) bool {
	m := r.GetMatch()
	return m.GetPrefix() == "/" && len(m.GetHeaders()) == 0 && len(m.GetQueryParameters()) == 0 && m.GetRuntimeFraction() == nil
}

// TestNoUnreachableDefaultRoute checks, over every fixture, that each
// virtual host ends with exactly one catch-all route: a rule without
// matches (testdata/subsets.yaml, details-canary's "canary" rule) is one, and
// the default route is then left out rather than added unreachable after
// it; without such a rule the default route ends the list.
func TestNoUnreachableDefaultRoute(t *testing.T) {
	sawRuleCatchAll, sawDefault := false, false
	for _, name := range cases(t) {
		res := sdktest.Run(t, envoy.New(), filepath.Join("testdata", name+".yaml"))
		for key, rc := range routeConfigs(t, res) {
			for _, vh := range rc.GetVirtualHosts() {
				routes := vh.GetRoutes()
				if len(routes) == 0 {
					t.Errorf("%s: %s: virtual host %q has no routes", name, key, vh.GetName())
					continue
				}
				for i, r := range routes[:len(routes)-1] {
					if isCatchAll(r) {
						t.Errorf("%s: %s: virtual host %q: route %d %q matches every request; the %d routes after it are unreachable",
							name, key, vh.GetName(), i, r.GetName(), len(routes)-1-i)
					}
				}
				last := routes[len(routes)-1]
				if !isCatchAll(last) {
					if len(vh.GetDomains()) == 1 && vh.GetDomains()[0] == "*" {
						continue // inbound route configurations
					}
					t.Errorf("%s: %s: virtual host %q ends with %q, not a catch-all route", name, key, vh.GetName(), last.GetName())
				}
				switch {
				case last.GetName() == "default":
					sawDefault = true
				case name == "subsets" && last.GetName() == "shop/details-canary/canary/0":
					sawRuleCatchAll = true
				}
			}
		}
	}
	if !sawRuleCatchAll {
		t.Error("no virtual host ends with the catch-all rule shop/details-canary/canary/0 of testdata/subsets.yaml")
	}
	if !sawDefault {
		t.Error("no virtual host ends with the default route")
	}
}
