package envoy_test

import (
	"slices"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacnetworkv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/meshrelay/meshrelay/plugins/envoy"
	"github.com/meshrelay/meshrelay/sdk/sdktest"
)

// TestTCPPorts checks the inbound Listeners of testdata/tcp.yaml: a port
// whose name (tcp-redis, https) or appProtocol (mysql) selects a protocol
// other than HTTP gets the RBAC network filter, when AccessPolicies select
// its Service, and a TCP proxy to the workload port on 127.0.0.1; HTTP
// ports (named http, or appProtocol kubernetes.io/h2c) keep the HTTP
// connection manager. A policy naming paths admits nothing on a TCP port,
// with a warning, and a TrafficPolicy's routes leave TCP ports out.
func TestTCPPorts(t *testing.T) {
	res := sdktest.Run(t, envoy.New(), "testdata/tcp.yaml")
	nodes := nodeResources(t, res)
	clusters := map[string]*clusterv3.Cluster{}
	for _, r := range nodes["edge"] {
		if c, ok := r.Message.(*clusterv3.Cluster); ok {
			clusters[c.GetName()] = c
		}
	}
	filters := map[string][]string{}
	rbacPolicies := map[string][]string{}
	for _, r := range nodes["edge"] {
		l, ok := r.Message.(*listenerv3.Listener)
		if !ok {
			continue
		}
		addr, ok := strings.CutPrefix(l.GetName(), envoy.InboundListenerPrefix)
		if !ok {
			continue
		}
		for _, f := range l.GetFilterChains()[0].GetFilters() {
			filters[addr] = append(filters[addr], f.GetName())
			switch f.GetName() {
			case envoy.NetworkRBACFilter:
				var rbac rbacnetworkv3.RBAC
				if err := f.GetTypedConfig().UnmarshalTo(&rbac); err != nil {
					t.Fatal(err)
				}
				names := []string{}
				for name := range rbac.GetRules().GetPolicies() {
					names = append(names, name)
				}
				slices.Sort(names)
				rbacPolicies[addr] = names
			case envoy.TCPProxyFilter:
				var tcp tcpproxyv3.TcpProxy
				if err := f.GetTypedConfig().UnmarshalTo(&tcp); err != nil {
					t.Fatal(err)
				}
				port := l.GetAddress().GetSocketAddress().GetPortValue()
				if want := envoy.InboundClusterName(int32(port)); tcp.GetCluster() != want {
					t.Errorf("%s: tcp proxy to %q, want %q", addr, tcp.GetCluster(), want)
				}
				c := clusters[tcp.GetCluster()]
				sa := c.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
				if c.GetType() != clusterv3.Cluster_STATIC || sa.GetAddress() != "127.0.0.1" || sa.GetPortValue() != port {
					t.Errorf("%s: cluster %q is %v", addr, tcp.GetCluster(), c)
				}
			}
		}
	}
	hcm := []string{envoy.HCMFilter}
	tcp := []string{envoy.TCPProxyFilter}
	rbacTCP := []string{envoy.NetworkRBACFilter, envoy.TCPProxyFilter}
	wantFilters := map[string][]string{
		"10.1.0.31:6379": rbacTCP,
		"10.1.0.41:3306": tcp,
		"10.1.0.51:8080": hcm,
		"10.1.0.51:8443": rbacTCP,
		"10.1.0.51:9090": hcm,
	}
	if diff := cmp.Diff(wantFilters, filters); diff != "" {
		t.Errorf("inbound listeners' network filters (-want +got):\n%s", diff)
	}
	wantPolicies := map[string][]string{
		"10.1.0.31:6379": {envoy.RBACPolicyName("shop", "cache-from-web")},
		// web-from-shop admits port 80 only.
		"10.1.0.51:8443": {},
	}
	if diff := cmp.Diff(wantPolicies, rbacPolicies); diff != "" {
		t.Errorf("RBAC network filter policies (-want +got):\n%s", diff)
	}
	var warnings []string
	for _, d := range res.Diagnostics {
		warnings = append(warnings, d.Policy.Name+" "+d.Path+": "+d.Summary)
	}
	slices.Sort(warnings)
	wantWarnings := []string{
		`cache-paths spec.paths: port 6379 of Service shop/cache is not HTTP (name tcp-redis), so methods and paths cannot be checked there and the policy admits nothing on it`,
		`web spec.destinationSelectors: port 443 of Service shop/web is not HTTP (name https): the envoy backend routes only HTTP, so the policy's rules do not apply there`,
	}
	if diff := cmp.Diff(wantWarnings, warnings); diff != "" {
		t.Errorf("diagnostics (-want +got):\n%s", diff)
	}
}
