package cilium

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/sdk"
	"github.com/meshrelay/meshrelay/sdk/sdktest"
)

// toPortsOf returns the ports each Cilium policy of a result admits, by
// policy name: "port/protocol" per port of its rules' toPorts, nil for a
// policy whose rules admit nothing.
func toPortsOf(t *testing.T, res *sdktest.Result) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, o := range res.Outputs {
		if o.Kind != KindNetworkPolicy {
			continue
		}
		var p networkPolicy
		if err := json.Unmarshal(o.Body, &p); err != nil {
			t.Fatal(err)
		}
		var ports []string
		for _, r := range p.rules() {
			for _, in := range r.Ingress {
				for _, pr := range in.ToPorts {
					for _, pp := range pr.Ports {
						ports = append(ports, pp.Port+"/"+pp.Protocol)
					}
				}
			}
		}
		out[o.Name] = ports
	}
	return out
}

// TestAccessPolicyTargetPorts checks that AccessPolicy ports, Service
// ports, become the endpoints' ports in toPorts (testdata/ports.yaml): a
// number target port (5000 → 8080), a named one as the container port
// name, which Cilium resolves per endpoint (80 → http), and ports that do
// not resolve — a named target port no container has, a port the Service
// lacks — which are left out with a warning naming the Service and the
// port, leaving a rule that admits nothing. Without workloads in the
// inputs a named target port still becomes its name, without warning.
func TestAccessPolicyTargetPorts(t *testing.T) {
	fx, err := sdktest.LoadFixture(fixturePath("ports"))
	if err != nil {
		t.Fatal(err)
	}
	res := sdktest.RunFixture(t, New(), fx)
	want := map[string][]string{
		objectName("access", policyNamed(t, fx, "api-port")):       {"8080/TCP"},
		objectName("access", policyNamed(t, fx, "web-named-port")): {"http/TCP"},
		objectName("access", policyNamed(t, fx, "admin-ports")):    nil,
	}
	if diff := cmp.Diff(want, toPortsOf(t, res)); diff != "" {
		t.Errorf("toPorts by policy (-want +got):\n%s", diff)
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

	// Without workloads, web's http (and admin's admin-http) has no known
	// number: Cilium still matches the name.
	var kept []json.RawMessage
	for _, raw := range fx.Clusters[0].Objects {
		var o struct{ Kind string }
		if err := json.Unmarshal(raw, &o); err != nil {
			t.Fatal(err)
		}
		if o.Kind != "Deployment" && o.Kind != "StatefulSet" {
			kept = append(kept, raw)
		}
	}
	fx.Clusters[0].Objects = kept
	res = sdktest.RunFixture(t, New(), fx)
	if got := toPortsOf(t, res)[objectName("access", policyNamed(t, fx, "web-named-port"))]; !slices.Equal(got, []string{"http/TCP"}) {
		t.Errorf("web without workloads admits %v, want http/TCP", got)
	}
	for _, d := range res.Diagnostics {
		if d.Policy.Name == "web-named-port" {
			t.Errorf("unexpected diagnostic %+v", d)
		}
	}
}

// policyNamed returns the fixture's AccessPolicy of that name.
func policyNamed(t *testing.T, fx *sdktest.Fixture, name string) *policyv1alpha1.AccessPolicy {
	t.Helper()
	for _, raw := range fx.Policies {
		var ap policyv1alpha1.AccessPolicy
		if err := json.Unmarshal(raw, &ap); err != nil {
			t.Fatal(err)
		}
		if ap.Kind == "AccessPolicy" && ap.Name == name {
			return &ap
		}
	}
	t.Fatalf("no AccessPolicy %s", name)
	return nil
}
