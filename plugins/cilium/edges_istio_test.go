package cilium

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	discoveryapi "github.com/meshrelay/meshrelay/api/discovery/v1alpha1"
	"github.com/meshrelay/meshrelay/plugins/istio"
	"github.com/meshrelay/meshrelay/sdk/sdktest"
	corev1 "k8s.io/api/core/v1"
)

// istioTwin returns a copy of the fixture with Istio where it has Cilium
// (each cluster with its own trust domain, <cluster>.local, so that Istio
// can tell clusters apart) and no mesh elsewhere.
func istioTwin(t *testing.T, fx *sdktest.Fixture) *sdktest.Fixture {
	t.Helper()
	twin := &sdktest.Fixture{Policies: fx.Policies}
	for _, c := range fx.Clusters {
		if !slices.Contains(c.Meshes, discoveryapi.MeshCilium) {
			c.Meshes = nil
			twin.Clusters = append(twin.Clusters, c)
			continue
		}
		c.Meshes = []string{discoveryapi.MeshIstio}
		mesh, err := json.Marshal(map[string]any{
			"apiVersion": discoveryapi.APIVersion, "kind": "Mesh",
			"metadata": map[string]any{"name": "istio"},
			"spec":     map[string]any{"type": discoveryapi.MeshIstio, "namespace": "istio-system", "trustDomain": c.Name + ".local"},
		})
		if err != nil {
			t.Fatal(err)
		}
		c.Objects = append(slices.Clone(c.Objects), mesh)
		twin.Clusters = append(twin.Clusters, c)
	}
	return twin
}

// compareWithIstio runs the Istio translator on the fixture's Istio twin
// and reports the edges on which its AuthorizationPolicies and the Cilium
// policies in outputs disagree, over the clients of the mesh's clusters
// and the TCP ports (Istio does not see UDP). It returns how many
// AuthorizationPolicies Istio emitted and how many edges they deny.
func compareWithIstio(t *testing.T, fx *sdktest.Fixture, outputs []goldenObject) (authz, denied int) {
	t.Helper()
	f := decodeFleet(t, fx)
	f.clients = slices.DeleteFunc(f.clients, func(c client) bool {
		return !slices.Contains(f.clusters[c.Cluster], discoveryapi.MeshCilium)
	})
	ours := slices.DeleteFunc(ciliumEdges(t, f, outputs), func(e edge) bool { return !tcpEdge(f, e) })
	res := sdktest.RunFixture(t, istio.New(), istioTwin(t, fx))
	for _, o := range res.Outputs {
		if o.Kind == "AuthorizationPolicy" {
			authz++
		}
	}
	theirs := istioEdges(t, f, res, true)
	f.destinations(func(_ string, _ *corev1.Service, p corev1.ServicePort) {
		if cmp.Or(p.Protocol, corev1.ProtocolTCP) == corev1.ProtocolTCP {
			denied += len(f.clients)
		}
	})
	denied -= len(theirs)
	missing, extra := diffEdges(ours, theirs)
	for _, e := range missing {
		t.Errorf("edge %s: admitted by the Cilium policies, not by Istio's", e)
	}
	for _, e := range extra {
		t.Errorf("edge %s: admitted by Istio's policies, not by the Cilium ones", e)
	}
	return authz, denied
}

// authorizationPolicy is the part of an Istio AuthorizationPolicy that
// decides edges.
type authorizationPolicy struct {
	Metadata struct {
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	Spec struct {
		Selector *struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		Action string `json:"action"`
		Rules  []struct {
			From []struct {
				Source struct {
					Principals []string `json:"principals"`
					Namespaces []string `json:"namespaces"`
				} `json:"source"`
			} `json:"from"`
			To []struct {
				Operation struct {
					Ports []string `json:"ports"`
				} `json:"operation"`
			} `json:"to"`
		} `json:"rules"`
	} `json:"spec"`
}

// istioEdges extracts the allowed edges from Istio AuthorizationPolicies:
// a workload selected by no ALLOW policy admits everything (unless a DENY
// policy matches); otherwise some rule of an ALLOW policy selecting it
// must match the client's principal <trust domain>/ns/<ns>/sa/<name> or
// namespace, and the ports of the workloads the Service port forwards to.
func istioEdges(t *testing.T, f *fleet, res *sdktest.Result, tcpOnly bool) []edge {
	t.Helper()
	policies := map[string][]authorizationPolicy{}
	for _, o := range res.Outputs {
		if o.Kind != "AuthorizationPolicy" {
			continue
		}
		var p authorizationPolicy
		if err := json.Unmarshal(o.Body, &p); err != nil {
			t.Fatal(err)
		}
		policies[o.Cluster] = append(policies[o.Cluster], p)
	}
	var out []edge
	f.destinations(func(cluster string, svc *corev1.Service, port corev1.ServicePort) {
		if tcpOnly && cmp.Or(port.Protocol, corev1.ProtocolTCP) != corev1.ProtocolTCP {
			return
		}
		var allow, deny []authorizationPolicy
		for _, p := range policies[cluster] {
			if p.Metadata.Namespace != svc.Namespace && p.Metadata.Namespace != "istio-system" {
				continue
			}
			if p.Spec.Selector != nil && !selectorMatches(selector{MatchLabels: p.Spec.Selector.MatchLabels}, svc.Spec.Selector) {
				continue
			}
			if p.Spec.Action == "DENY" {
				deny = append(deny, p)
			} else {
				allow = append(allow, p)
			}
		}
		for _, c := range f.clients {
			admitted := func(p authorizationPolicy) bool {
				for _, r := range p.Spec.Rules {
					if matchesSources(r.From, c) && matchesPorts(r.To, f.workloadPorts(cluster, svc, port)) {
						return true
					}
				}
				return false
			}
			ok := len(allow) == 0 || slices.ContainsFunc(allow, admitted)
			if ok && !slices.ContainsFunc(deny, admitted) {
				out = append(out, edge{Client: c.String(), Destination: cluster + "/" + svc.Namespace + "/" + svc.Name, Port: port.Port})
			}
		}
	})
	return sortEdges(out)
}

func matchesSources(from []struct {
	Source struct {
		Principals []string `json:"principals"`
		Namespaces []string `json:"namespaces"`
	} `json:"source"`
}, c client) bool {
	if len(from) == 0 {
		return true
	}
	principal := fmt.Sprintf("%s.local/ns/%s/sa/%s", c.Cluster, c.Namespace, c.Name)
	for _, f := range from {
		s := f.Source
		if len(s.Principals) > 0 && !slices.ContainsFunc(s.Principals, func(p string) bool { return istioMatch(p, principal) }) {
			continue
		}
		if len(s.Namespaces) > 0 && !slices.Contains(s.Namespaces, c.Namespace) {
			continue
		}
		return true
	}
	return false
}

// istioMatch matches a value the way Istio matches principals: exactly,
// or with one "*" at the start or the end.
func istioMatch(pattern, value string) bool {
	switch {
	case pattern == "*":
		return true
	case strings.HasSuffix(pattern, "*"):
		return strings.HasPrefix(value, strings.TrimSuffix(pattern, "*"))
	case strings.HasPrefix(pattern, "*"):
		return strings.HasSuffix(value, strings.TrimPrefix(pattern, "*"))
	default:
		return pattern == value
	}
}

// matchesPorts reports whether the operations admit a Service port, whose
// workloads listen on ports: Istio matches the port a connection arrives
// on, so every one of them must be admitted.
func matchesPorts(to []struct {
	Operation struct {
		Ports []string `json:"ports"`
	} `json:"operation"`
}, ports []string) bool {
	if len(to) == 0 {
		return true
	}
	for _, t := range to {
		if len(t.Operation.Ports) == 0 {
			return true
		}
		if len(ports) > 0 && !slices.ContainsFunc(ports, func(p string) bool { return !slices.Contains(t.Operation.Ports, p) }) {
			return true
		}
	}
	return false
}

// TestEdgeEquivalenceWithIstio runs the Istio translator on each fixture
// with Istio in place of Cilium and checks that its AuthorizationPolicies
// admit the same (client, destination, port) edges as this translator's
// Cilium policies.
func TestEdgeEquivalenceWithIstio(t *testing.T) {
	authz, denied := 0, 0
	for _, name := range goldenCases(t) {
		t.Run(name, func(t *testing.T) {
			fx, err := sdktest.LoadFixture(fixturePath(name))
			if err != nil {
				t.Fatal(err)
			}
			a, d := compareWithIstio(t, fx, readGolden(t, name))
			authz += a
			denied += d
		})
	}
	if authz == 0 || denied == 0 {
		t.Errorf("Istio emitted %d AuthorizationPolicies denying %d edges: the comparison proves nothing", authz, denied)
	}
}

// tcpEdge reports whether the edge's Service port is TCP.
func tcpEdge(f *fleet, e edge) bool {
	parts := strings.SplitN(e.Destination, "/", 3)
	for _, svc := range f.services[parts[0]] {
		if svc.Namespace == parts[1] && svc.Name == parts[2] {
			for _, p := range svc.Spec.Ports {
				if p.Port == e.Port {
					return cmp.Or(p.Protocol, corev1.ProtocolTCP) == corev1.ProtocolTCP
				}
			}
		}
	}
	return false
}
