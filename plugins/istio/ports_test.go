package istio_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/meshrelay/meshrelay/plugins/istio"
	"github.com/meshrelay/meshrelay/sdk"
	"github.com/meshrelay/meshrelay/sdk/sdktest"
	clientsecurity "istio.io/client-go/pkg/apis/security/v1"
)

// outputsOf decodes the outputs of kind in a result, by
// "cluster namespace/name".
func outputsOf[T any](t *testing.T, res *sdktest.Result, kind string) map[string]*T {
	t.Helper()
	out := map[string]*T{}
	for _, o := range res.Outputs {
		if o.Kind != kind {
			continue
		}
		v := new(T)
		if err := json.Unmarshal(o.Body, v); err != nil {
			t.Fatalf("%s %s/%s: %v", kind, o.Namespace, o.Name, err)
		}
		out[o.Cluster+" "+o.Namespace+"/"+o.Name] = v
	}
	return out
}

// authorizationPolicies returns the AuthorizationPolicies of a result by
// "cluster namespace/name".
func authorizationPolicies(t *testing.T, res *sdktest.Result) map[string]*clientsecurity.AuthorizationPolicy {
	t.Helper()
	return outputsOf[clientsecurity.AuthorizationPolicy](t, res, "AuthorizationPolicy")
}

// operationPorts returns the ports of each rule's operations; nil for a
// policy without rules.
func operationPorts(ap *clientsecurity.AuthorizationPolicy) [][]string {
	var out [][]string
	for _, r := range ap.Spec.Rules {
		var ports []string
		for _, to := range r.To {
			ports = append(ports, to.Operation.GetPorts()...)
		}
		out = append(out, ports)
	}
	return out
}

// TestAccessPolicyTargetPorts checks that AccessPolicy ports, Service
// ports, become the ports of the workloads in the AuthorizationPolicy's
// operation, where Istio matches them (testdata/ports.yaml): a number
// target port (5000 → 8080), a named one resolved per workload (80 → http,
// 8080 in web-v1 and 9080 in web-v2), and ports that do not resolve —
// a named target port no container has, a port the Service lacks — which
// are left out with a warning naming the Service and the port, leaving a
// policy that admits nothing.
func TestAccessPolicyTargetPorts(t *testing.T) {
	res := sdktest.Run(t, istio.New(), "testdata/ports.yaml")
	aps := authorizationPolicies(t, res)
	tests := map[string][][]string{
		"east shop/api-port-api":       {{"8080"}},
		"east shop/web-named-port-web": {{"8080", "9080"}},
		"east shop/admin-ports-admin":  nil,
	}
	for name, want := range tests {
		ap, ok := aps[name]
		if !ok {
			t.Errorf("no AuthorizationPolicy %s", name)
			continue
		}
		if diff := cmp.Diff(want, operationPorts(ap)); diff != "" {
			t.Errorf("%s: operation ports (-want +got):\n%s", name, diff)
		}
		if ap.Spec.GetSelector() == nil || ap.Spec.Action.String() != "ALLOW" {
			t.Errorf("%s: selector %v action %v, want the Service's workloads and ALLOW", name, ap.Spec.GetSelector(), ap.Spec.Action)
		}
	}
	var warnings []string
	for _, d := range res.Diagnostics {
		if d.Policy.Name == "admin-ports" {
			if d.Severity != sdk.SeverityWarning || d.Path != "spec.ports" || d.Cluster != "east" {
				t.Errorf("diagnostic %+v, want a warning at spec.ports in east", d)
			}
			warnings = append(warnings, d.Summary)
			continue
		}
		t.Errorf("unexpected diagnostic %+v", d)
	}
	slices.Sort(warnings)
	want := []string{
		`port 80 of Service shop/admin in cluster "east" forwards to targetPort "admin-http", but no container port of its workloads (Deployment/admin) has that name, so the policy admits nothing on it`,
		`port 81 is not a port of Service shop/admin in cluster "east", so the policy admits nothing on it`,
	}
	if diff := cmp.Diff(want, warnings); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}
}

// TestAccessPolicyTargetPortsIncremental changes what named target ports
// resolve through — a workload's container port, the Service's
// targetPort — and checks that the target is computed again, with the
// outputs a full translation gives.
func TestAccessPolicyTargetPortsIncremental(t *testing.T) {
	m := modelOf(t, loadFixture(t, "testdata/ports.yaml"))
	object := func(kind, name string) obj {
		for _, o := range m.Cluster("east").Objects {
			if kindOf(o) == kind && meta(o)["name"] == name {
				return o
			}
		}
		t.Fatalf("no %s %s", kind, name)
		return nil
	}
	containerPorts := func(o obj) []any {
		ctr := child(child(spec(o), "template"), "spec")["containers"].([]any)[0].(obj)
		return ctr["ports"].([]any)
	}
	steps := []struct {
		name   string
		change func()
		want   []string
	}{
		{"base", func() {}, []string{"8080", "9080"}},
		{"web-v2's http port", func() { containerPorts(object("StatefulSet", "web-v2"))[0].(obj)["containerPort"] = 9443 }, []string{"8080", "9443"}},
		{"admin's container port named", func() { containerPorts(object("Deployment", "admin"))[0].(obj)["name"] = "admin-http" }, []string{"8080", "9443"}},
		{"web's targetPort a number", func() {
			spec(object("Service", "web"))["ports"].([]any)[0].(obj)["targetPort"] = 8443
		}, []string{"8443"}},
	}
	s := sdktest.NewSession(t, istio.New())
	var fixtures []*sdktest.Fixture
	for i, st := range steps {
		st.change()
		f := m.Fixture(t)
		fixtures = append(fixtures, f)
		res := s.Update(f)
		if i > 0 && !slices.Equal(s.Computed(), []string{"east"}) {
			t.Errorf("%s computed %v, want east", st.name, s.Computed())
		}
		ap := authorizationPolicies(t, res)["east shop/web-named-port-web"]
		if got := operationPorts(ap); !slices.Equal(got[0], st.want) {
			t.Errorf("%s: web's ports %v, want %v", st.name, got, st.want)
		}
		admin := authorizationPolicies(t, res)["east shop/admin-ports-admin"]
		named := slices.ContainsFunc(res.Diagnostics, func(d sdk.Diagnostic) bool { return strings.Contains(d.Summary, `"admin-http"`) })
		if resolved := len(admin.Spec.Rules) > 0; resolved == named {
			t.Errorf("%s: admin has rules %v and a warning about admin-http %v: want one of the two", st.name, resolved, named)
		}
	}
	sdktest.CheckIncremental(t, istio.New(), fixtures...)
}
