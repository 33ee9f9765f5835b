package conformance_test

import (
	"cmp"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/meshrelay/meshrelay/plugins/cilium"
	"github.com/meshrelay/meshrelay/plugins/envoy"
	"github.com/meshrelay/meshrelay/plugins/istio"
	"github.com/meshrelay/meshrelay/sdk"
	"github.com/meshrelay/meshrelay/sdk/sdktest"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// fleetPath is the fleet every backend translates.
const fleetPath = "testdata/fleet.yaml"

// client is a workload identity: a service account in a cluster.
type client struct {
	Cluster, Namespace, ServiceAccount string
}

func (c client) String() string { return c.Cluster + "/" + c.Namespace + "/" + c.ServiceAccount }

// destination is one workload behind one Service port: where a
// connection to that port arrives, and so what each backend decides on.
type destination struct {
	Cluster, Namespace, Service string
	ServicePort                 int32
	Workload                    string
	// Labels are the workload's pod labels.
	Labels map[string]string
	// Port is the port the workload listens on for the Service port, and
	// PortName the name of that container port ("" when it has none).
	Port     int32
	PortName string
	// Address is the workload's endpoint address.
	Address string
}

func (d destination) String() string {
	return fmt.Sprintf("%s/%s:%d (%s:%d)", d.Namespace, d.Service, d.ServicePort, d.Workload, d.Port)
}

// fleet is what the evaluators need to know of the fixture.
type fleet struct {
	clients      []client
	destinations []destination
}

// matrix is the decision for every (client, destination): "allow" or "deny",
// keyed "client -> destination".
type matrix map[string]string

// decide fills a matrix with allowed(c, d).
func (f *fleet) decide(allowed func(client, destination) bool) matrix {
	m := matrix{}
	for _, c := range f.clients {
		for _, d := range f.destinations {
			v := "deny"
			if allowed(c, d) {
				v = "allow"
			}
			m[c.String()+" -> "+d.String()] = v
		}
	}
	return m
}

// loadFleet reads the fixture and lists its clients (ServiceAccounts) and
// destinations: for every Service port, each workload the Service selects,
// with the port its targetPort names there (a number as is, a name through
// the workload's container ports) and the address of its endpoint, whose
// hostname is the workload's name.
func loadFleet(t *testing.T) (*sdktest.Fixture, *fleet) {
	t.Helper()
	fx, err := sdktest.LoadFixture(fleetPath)
	if err != nil {
		t.Fatal(err)
	}
	f := &fleet{}
	for _, c := range fx.Clusters {
		var services []*corev1.Service
		type workload struct {
			name, namespace string
			template        corev1.PodTemplateSpec
		}
		var workloads []workload
		addresses := map[string]string{} // namespace/workload -> address
		for _, raw := range c.Objects {
			var meta struct{ Kind string }
			decode(t, raw, &meta)
			switch meta.Kind {
			case "ServiceAccount":
				var sa corev1.ServiceAccount
				decode(t, raw, &sa)
				f.clients = append(f.clients, client{Cluster: c.Name, Namespace: sa.Namespace, ServiceAccount: sa.Name})
			case "Service":
				svc := &corev1.Service{}
				decode(t, raw, svc)
				services = append(services, svc)
			case "Deployment":
				var d appsv1.Deployment
				decode(t, raw, &d)
				workloads = append(workloads, workload{d.Name, d.Namespace, d.Spec.Template})
			case "StatefulSet":
				var s appsv1.StatefulSet
				decode(t, raw, &s)
				workloads = append(workloads, workload{s.Name, s.Namespace, s.Spec.Template})
			case "EndpointSlice":
				var es discoveryv1.EndpointSlice
				decode(t, raw, &es)
				for _, ep := range es.Endpoints {
					if ep.Hostname == nil || len(ep.Addresses) != 1 {
						t.Fatalf("EndpointSlice %s/%s: every endpoint needs one address and the hostname of its workload", es.Namespace, es.Name)
					}
					addresses[es.Namespace+"/"+*ep.Hostname] = ep.Addresses[0]
				}
			}
		}
		for _, svc := range services {
			for _, w := range workloads {
				if w.namespace != svc.Namespace || !subset(svc.Spec.Selector, w.template.Labels) {
					continue
				}
				for _, sp := range svc.Spec.Ports {
					d := destination{
						Cluster: c.Name, Namespace: svc.Namespace, Service: svc.Name, ServicePort: sp.Port,
						Workload: w.name, Labels: w.template.Labels, Address: addresses[svc.Namespace+"/"+w.name],
					}
					for _, ctr := range w.template.Spec.Containers {
						for _, cp := range ctr.Ports {
							if sp.TargetPort.StrVal != "" && cp.Name == sp.TargetPort.StrVal ||
								sp.TargetPort.StrVal == "" && cp.ContainerPort == int32(cmp.Or(sp.TargetPort.IntValue(), int(sp.Port))) {
								d.Port, d.PortName = cp.ContainerPort, cp.Name
							}
						}
					}
					if d.Port == 0 || d.Address == "" {
						t.Fatalf("%s: the fixture gives it no container port or no endpoint", d)
					}
					f.destinations = append(f.destinations, d)
				}
			}
		}
	}
	if len(f.clients) == 0 || len(f.destinations) == 0 {
		t.Fatal("the fixture has no clients or no destinations")
	}
	return fx, f
}

func decode(t *testing.T, raw []byte, into any) {
	t.Helper()
	if err := json.Unmarshal(raw, into); err != nil {
		t.Fatal(err)
	}
}

// subset reports whether every label of sel is in labels.
func subset(sel, labels map[string]string) bool {
	for k, v := range sel {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// onBackend returns the fixture with mesh as the only mesh of every cluster.
func onBackend(fx *sdktest.Fixture, mesh string) *sdktest.Fixture {
	out := &sdktest.Fixture{Policies: fx.Policies}
	for _, c := range fx.Clusters {
		c.Meshes = []string{mesh}
		out.Clusters = append(out.Clusters, c)
	}
	return out
}

// translate runs a translator on the fleet with its mesh and fails on an
// error diagnostic: the fleet must translate cleanly everywhere.
func translate(t *testing.T, tr sdk.Translator, fx *sdktest.Fixture, mesh string) *sdktest.Result {
	t.Helper()
	res := sdktest.RunFixture(t, tr, onBackend(fx, mesh))
	for _, d := range res.Diagnostics {
		if d.Severity == sdk.SeverityError {
			t.Errorf("%s: %+v", mesh, d)
		}
	}
	if len(res.Outputs) == 0 {
		t.Fatalf("%s: no outputs", mesh)
	}
	return res
}

// TestAccessDecisionsAgree translates one fleet with the Istio, Cilium and
// Envoy translators and evaluates, from each one's emitted resources, the
// decision on every connection of a client service account to a workload
// behind a Service port. The three must decide alike, and the fleet's
// default-deny must deny some connections and its policies admit others.
func TestAccessDecisionsAgree(t *testing.T) {
	fx, f := loadFleet(t)
	matrices := map[string]matrix{
		"istio":  f.decide(istioDecider(t, istioPolicies(t, translate(t, istio.New(), fx, "istio")))),
		"cilium": f.decide(ciliumDecider(t, ciliumRules(t, translate(t, cilium.New(), fx, "cilium")))),
		"envoy":  f.decide(envoyDecider(t, envoyListeners(t, translate(t, envoy.New(), fx, "envoy")))),
	}
	counts := map[string]int{}
	for _, v := range matrices["istio"] {
		counts[v]++
	}
	if counts["allow"] == 0 || counts["deny"] == 0 {
		t.Errorf("Istio's decisions: %v; the fleet must both admit and deny, or the comparison proves nothing", counts)
	}
	t.Logf("%d clients, %d destinations: %v", len(f.clients), len(f.destinations), counts)
	for _, name := range []string{"cilium", "envoy"} {
		if diff := gocmp.Diff(matrices["istio"], matrices[name]); diff != "" {
			t.Errorf("decisions of Istio (-) and %s (+) differ:\n%s", name, diff)
		}
	}
}

// portString is a port number as policies write it.
func portString(p int32) string { return strconv.Itoa(int(p)) }

// TestComparisonCatchesDivergence shows the comparison can fail: Istio
// policies whose operations name the Service ports, not the ports the
// workloads listen on (what the Istio translator emitted before it mapped
// ports), decide differently from Cilium's and Envoy's.
func TestComparisonCatchesDivergence(t *testing.T) {
	fx, f := loadFleet(t)
	policies := istioPolicies(t, translate(t, istio.New(), fx, "istio"))
	for _, aps := range policies {
		for _, ap := range aps {
			for _, d := range f.destinations {
				if sel := ap.Spec.GetSelector(); ap.Namespace != d.Namespace || sel == nil || !subset(sel.GetMatchLabels(), d.Labels) {
					continue
				}
				for _, r := range ap.Spec.GetRules() {
					for _, to := range r.GetTo() {
						for i, p := range to.GetOperation().GetPorts() {
							if p == portString(d.Port) {
								to.Operation.Ports[i] = portString(d.ServicePort)
							}
						}
					}
				}
			}
		}
	}
	broken := f.decide(istioDecider(t, policies))
	want := f.decide(ciliumDecider(t, ciliumRules(t, translate(t, cilium.New(), fx, "cilium"))))
	if gocmp.Equal(want, broken) {
		t.Error("Istio policies admitting Service ports decide like Cilium's: the comparison cannot tell them apart")
	}
}
