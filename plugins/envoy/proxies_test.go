package envoy_test

import (
	"slices"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/meshrelay/meshrelay/api/xds"
	"github.com/meshrelay/meshrelay/plugins/envoy"
	"github.com/meshrelay/meshrelay/sdk/sdktest"
)

// nodeResources decodes a result's outputs by node ID, checking each
// resource with its Validate rules and each node's set with
// go-control-plane's snapshot consistency check.
func nodeResources(t *testing.T, res *sdktest.Result) map[string][]xds.Resource {
	t.Helper()
	out := map[string][]xds.Resource{}
	for _, o := range res.Outputs {
		r, err := xds.Decode(o.Body)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Message.(interface{ Validate() error }).Validate(); err != nil {
			t.Errorf("%s %s: Validate() = %v", o.Kind, o.Name, err)
		}
		out[r.NodeID] = append(out[r.NodeID], r)
	}
	for node, rs := range out {
		byType := map[string][]types.Resource{}
		for _, r := range rs {
			byType[r.TypeURL] = append(byType[r.TypeURL], r.Message.(types.Resource))
		}
		snap, err := cachev3.NewSnapshot("1", byType)
		if err != nil {
			t.Fatal(err)
		}
		if err := snap.Consistent(); err != nil {
			t.Errorf("node %s: Consistent() = %v", node, err)
		}
	}
	return out
}

// TestEnvoyNodeGroupSocketListeners checks the two kinds of node group of
// testdata/envoyproxy.yaml: the Envoy group "edge" gets no api_listener
// (Envoy takes those from its bootstrap only) but a socket Listener on
// 0.0.0.0 per outbound port, whose connection manager loads over RDS a
// RouteConfiguration with a virtual host per hostname at that port; the
// gRPC group "frontend" keeps its api_listeners named after the hostnames.
// The Envoy group's inbound Listener forwards to the workload on
// 127.0.0.1, and its Clusters speak the downstream protocol upstream.
func TestEnvoyNodeGroupSocketListeners(t *testing.T) {
	res := sdktest.Run(t, envoy.New(), "testdata/envoyproxy.yaml")
	nodes := nodeResources(t, res)

	routes := map[string]*routev3.RouteConfiguration{}
	for _, r := range nodes["edge"] {
		if rc, ok := r.Message.(*routev3.RouteConfiguration); ok {
			routes[r.Name] = rc
		}
	}
	outbound := map[string][]string{}
	for _, r := range nodes["edge"] {
		l, ok := r.Message.(*listenerv3.Listener)
		if !ok {
			continue
		}
		if l.GetApiListener() != nil {
			t.Errorf("edge: listener %q is an api_listener", l.GetName())
		}
		sa := l.GetAddress().GetSocketAddress()
		if sa == nil {
			t.Errorf("edge: listener %q has no socket address", l.GetName())
			continue
		}
		if l.GetTrafficDirection().String() != "OUTBOUND" {
			continue
		}
		if sa.GetAddress() != "0.0.0.0" || l.GetName() != envoy.OutboundListenerName(int32(sa.GetPortValue())) {
			t.Errorf("edge: outbound listener %q listens on %s:%d", l.GetName(), sa.GetAddress(), sa.GetPortValue())
		}
		hcm := resourcev3.GetHTTPConnectionManager(l.GetFilterChains()[0].GetFilters()[0])
		name := hcm.GetRds().GetRouteConfigName()
		if want := envoy.OutboundRouteName(int32(sa.GetPortValue())); name != want {
			t.Errorf("edge: listener %q loads routes %q, want %q over RDS", l.GetName(), name, want)
		}
		var hosts []string
		for _, vh := range routes[name].GetVirtualHosts() {
			hosts = append(hosts, vh.GetName())
		}
		outbound[l.GetName()] = hosts
	}
	want := map[string][]string{
		"outbound|0.0.0.0:9080": {"reviews.global:9080", "reviews.shop.svc.cluster.local:9080"},
		"outbound|0.0.0.0:9090": {"ratings.shop.svc.cluster.local:9090"},
	}
	if diff := cmp.Diff(want, outbound); diff != "" {
		t.Errorf("edge: outbound listeners and their virtual hosts (-want +got):\n%s", diff)
	}

	// Inbound, Envoy forwards HTTP to the workload on 127.0.0.1 at its
	// port, with its routes inline: no non-forwarding route, which only
	// gRPC servers serve by.
	inbound := map[string]string{}
	for _, r := range nodes["edge"] {
		switch m := r.Message.(type) {
		case *routev3.RouteConfiguration:
			if strings.HasPrefix(m.GetName(), "inbound|") {
				t.Errorf("edge: RDS RouteConfiguration %q for an inbound Listener", m.GetName())
			}
		case *listenerv3.Listener:
			addr, ok := strings.CutPrefix(m.GetName(), envoy.InboundListenerPrefix)
			if !ok {
				continue
			}
			hcm := resourcev3.GetHTTPConnectionManager(m.GetFilterChains()[0].GetFilters()[0])
			for _, vh := range hcm.GetRouteConfig().GetVirtualHosts() {
				for _, route := range vh.GetRoutes() {
					inbound[addr] = route.GetRoute().GetCluster()
				}
			}
		}
	}
	if diff := cmp.Diff(map[string]string{"10.1.0.11:8080": envoy.InboundClusterName(8080)}, inbound); diff != "" {
		t.Errorf("edge: inbound listeners' routes (-want +got):\n%s", diff)
	}

	// Envoy speaks to upstreams the protocol requests came in with, so
	// gRPC through it stays HTTP/2; gRPC clients get no such option.
	for node, want := range map[string]bool{"edge": true, "frontend": false} {
		for _, r := range nodes[node] {
			c, ok := r.Message.(*clusterv3.Cluster)
			if !ok {
				continue
			}
			opts, ok := c.GetTypedExtensionProtocolOptions()[envoy.HTTPProtocolOptions]
			if ok != want {
				t.Errorf("%s: cluster %q has HTTP protocol options: %v, want %v", node, c.GetName(), ok, want)
				continue
			}
			if !ok {
				continue
			}
			var hpo upstreamhttpv3.HttpProtocolOptions
			if err := opts.UnmarshalTo(&hpo); err != nil {
				t.Fatal(err)
			}
			if d := hpo.GetUseDownstreamProtocolConfig(); d.GetHttp2ProtocolOptions() == nil || d.GetHttpProtocolOptions() == nil {
				t.Errorf("%s: cluster %q: HTTP protocol options %v, want the downstream protocol, HTTP/1.1 or HTTP/2", node, c.GetName(), &hpo)
			}
		}
	}

	var api []string
	for _, r := range nodes["frontend"] {
		if l, ok := r.Message.(*listenerv3.Listener); ok && l.GetApiListener() != nil {
			api = append(api, l.GetName())
		}
	}
	slices.Sort(api)
	wantAPI := []string{
		"ratings.shop.svc.cluster.local", "ratings.shop.svc.cluster.local:9090",
		"reviews.global", "reviews.global:9080",
		"reviews.shop.svc.cluster.local", "reviews.shop.svc.cluster.local:9080",
	}
	if diff := cmp.Diff(wantAPI, api); diff != "" {
		t.Errorf("frontend: api_listeners (-want +got):\n%s", diff)
	}
}
