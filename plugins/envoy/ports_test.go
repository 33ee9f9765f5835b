package envoy_test

import (
	"slices"
	"strings"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	rbacfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/meshrelay/meshrelay/api/xds"
	"github.com/meshrelay/meshrelay/plugins/envoy"
	"github.com/meshrelay/meshrelay/sdk"
	"github.com/meshrelay/meshrelay/sdk/sdktest"
)

// inboundRBAC returns the RBAC filter of each inbound Listener, by the
// address it listens on.
func inboundRBAC(t *testing.T, res *sdktest.Result) map[string]*rbacfilterv3.RBAC {
	t.Helper()
	out := map[string]*rbacfilterv3.RBAC{}
	for _, o := range res.Outputs {
		if o.Kind != xds.KindListener {
			continue
		}
		r, err := xds.Decode(o.Body)
		if err != nil {
			t.Fatal(err)
		}
		addr, ok := strings.CutPrefix(r.Name, envoy.InboundListenerPrefix)
		if !ok {
			continue
		}
		l := r.Message.(*listenerv3.Listener)
		var hcm hcmv3.HttpConnectionManager
		if err := l.GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
			t.Fatal(err)
		}
		for _, f := range hcm.GetHttpFilters() {
			if f.GetName() != envoy.RBACFilter {
				continue
			}
			var rbac rbacfilterv3.RBAC
			if err := f.GetTypedConfig().UnmarshalTo(&rbac); err != nil {
				t.Fatal(err)
			}
			out[addr] = &rbac
		}
	}
	return out
}

// destinationPorts returns the destination ports each RBAC policy
// requires, by policy name; nil for a policy requiring none.
func destinationPorts(rbac *rbacfilterv3.RBAC) map[string][]uint32 {
	out := map[string][]uint32{}
	for name, p := range rbac.GetRules().GetPolicies() {
		var ports []uint32
		var walk func(*rbacv3.Permission)
		walk = func(perm *rbacv3.Permission) {
			if n := perm.GetDestinationPort(); n != 0 {
				ports = append(ports, n)
			}
			for _, r := range perm.GetAndRules().GetRules() {
				walk(r)
			}
			for _, r := range perm.GetOrRules().GetRules() {
				walk(r)
			}
		}
		for _, perm := range p.GetPermissions() {
			walk(perm)
		}
		slices.Sort(ports)
		out[name] = ports
	}
	return out
}

// TestAccessPolicyTargetPorts checks that AccessPolicy ports, Service
// ports, become the ports connections arrive on in the inbound Listeners'
// RBAC (testdata/ports.yaml): a number target port (5000 → 8080), a named
// one resolved per workload (80 → http, 8080 in web-v1 and 9080 in
// web-v2), and ports that do not resolve — a named target port no
// container has, a port the Service lacks — which are left out with a
// warning naming the Service and the port; a policy left with no port
// admits nothing.
func TestAccessPolicyTargetPorts(t *testing.T) {
	res := sdktest.Run(t, envoy.New(), "testdata/ports.yaml")
	rbac := inboundRBAC(t, res)
	want := map[string]map[string][]uint32{
		"10.1.0.1:8080": {envoy.RBACPolicyName("shop", "api-port"): {8080}},
		"10.1.1.1:8080": {envoy.RBACPolicyName("shop", "web-named-port"): {8080, 9080}},
		"10.1.1.2:9080": {envoy.RBACPolicyName("shop", "web-named-port"): {8080, 9080}},
		"10.1.2.1:8080": {},
	}
	got := map[string]map[string][]uint32{}
	for addr, r := range rbac {
		got[addr] = destinationPorts(r)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("RBAC destination ports by listener (-want +got):\n%s", diff)
	}
	var warnings []string
	for _, d := range res.Diagnostics {
		if d.Policy.Name != "admin-ports" || d.Severity != sdk.SeverityWarning || d.Path != "spec.ports" || d.Cluster != "east" {
			t.Errorf("unexpected diagnostic %+v", d)
			continue
		}
		warnings = append(warnings, d.Summary)
	}
	slices.Sort(warnings)
	wantWarnings := []string{
		`port 80 of Service shop/admin in cluster "east" forwards to targetPort "admin-http", but no container port of its workloads (Deployment/admin) has that name, so the policy admits nothing on it`,
		`port 81 is not a port of Service shop/admin in cluster "east", so the policy admits nothing on it`,
	}
	if diff := cmp.Diff(wantWarnings, warnings); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}
}

// TestAccessPolicyTargetPortsIncremental changes the container port a
// named target port resolves to and checks that the target is computed
// again, with the outputs a full translation gives.
func TestAccessPolicyTargetPortsIncremental(t *testing.T) {
	base := loadFleet(t, "ports")
	changed := base.Clone(t)
	sts := changed.Cluster("east").Object("StatefulSet", "web-v2")
	ctr := listOf(get(sts, "spec", "template", "spec"), "containers")[0].(obj)
	listOf(ctr, "ports")[0].(obj)["containerPort"] = 9443
	s := sdktest.NewSession(t, envoy.New())
	s.Update(base.Fixture(t))
	res := s.Update(changed.Fixture(t))
	if got := s.Computed(); !slices.Equal(got, []string{"east"}) {
		t.Errorf("computed %v, want east", got)
	}
	ports := destinationPorts(inboundRBAC(t, res)["10.1.1.1:8080"])[envoy.RBACPolicyName("shop", "web-named-port")]
	if !slices.Equal(ports, []uint32{8080, 9443}) {
		t.Errorf("web's ports %v, want 8080 and 9443", ports)
	}
	sdktest.CheckIncremental(t, envoy.New(), base.Fixture(t), changed.Fixture(t))
}
