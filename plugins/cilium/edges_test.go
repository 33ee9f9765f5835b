package cilium

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	discoveryapi "github.com/meshrelay/meshrelay/api/discovery/v1alpha1"
	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/sdk/sdktest"
	corev1 "k8s.io/api/core/v1"
)

// An edge is an allowed connection: a client identity may open
// connections to a destination Service's port.
type edge struct {
	Client      string // cluster/namespace/serviceaccount
	Destination string // cluster/namespace/service
	Port        int32  // the Service port
}

func (e edge) String() string { return fmt.Sprintf("%s -> %s:%d", e.Client, e.Destination, e.Port) }

// client is a workload identity: a service account in a cluster.
type client struct{ Cluster, Namespace, Name string }

func (c client) String() string { return c.Cluster + "/" + c.Namespace + "/" + c.Name }

// identityLabels returns the labels Cilium gives the client's endpoints,
// without source prefix.
func (c client) identityLabels() map[string]string {
	return map[string]string{
		bare(LabelNamespace):      c.Namespace,
		bare(LabelServiceAccount): c.Name,
		bare(LabelCluster):        c.Cluster,
	}
}

// fleet is what the edge computations read of a fixture.
type fleet struct {
	clusters map[string][]string // cluster name -> meshes
	services map[string][]*corev1.Service
	// templates are the pod templates of each cluster's workloads.
	templates map[string][]*corev1.PodTemplateSpec
	clients   []client
	access    []*policyv1alpha1.AccessPolicy
}

func loadFleet(t *testing.T, path string) *fleet {
	t.Helper()
	fx, err := sdktest.LoadFixture(path)
	if err != nil {
		t.Fatal(err)
	}
	return decodeFleet(t, fx)
}

// decodeFleet decodes the Services, ServiceAccounts and valid
// AccessPolicies of a fixture.
func decodeFleet(t *testing.T, fx *sdktest.Fixture) *fleet {
	t.Helper()
	f := &fleet{clusters: map[string][]string{}, services: map[string][]*corev1.Service{}, templates: map[string][]*corev1.PodTemplateSpec{}}
	for _, c := range fx.Clusters {
		f.clusters[c.Name] = c.Meshes
		for _, raw := range c.Objects {
			var meta struct{ Kind string }
			if err := json.Unmarshal(raw, &meta); err != nil {
				t.Fatal(err)
			}
			switch meta.Kind {
			case "Service":
				svc := &corev1.Service{}
				if err := json.Unmarshal(raw, svc); err != nil {
					t.Fatal(err)
				}
				f.services[c.Name] = append(f.services[c.Name], svc)
			case "ServiceAccount":
				sa := &corev1.ServiceAccount{}
				if err := json.Unmarshal(raw, sa); err != nil {
					t.Fatal(err)
				}
				f.clients = append(f.clients, client{Cluster: c.Name, Namespace: sa.Namespace, Name: sa.Name})
			case "Deployment", "StatefulSet", "DaemonSet":
				var w struct {
					Metadata struct{ Namespace string }
					Spec     struct{ Template corev1.PodTemplateSpec }
				}
				if err := json.Unmarshal(raw, &w); err != nil {
					t.Fatal(err)
				}
				w.Spec.Template.Namespace = w.Metadata.Namespace
				f.templates[c.Name] = append(f.templates[c.Name], &w.Spec.Template)
			}
		}
	}
	for _, raw := range fx.Policies {
		var meta struct{ Kind string }
		if err := json.Unmarshal(raw, &meta); err != nil {
			t.Fatal(err)
		}
		if meta.Kind != "AccessPolicy" {
			continue
		}
		ap := &policyv1alpha1.AccessPolicy{}
		if err := json.Unmarshal(raw, ap); err != nil {
			t.Fatal(err)
		}
		if errs := ap.Validate(); len(errs) > 0 {
			continue // the SDK drops invalid policies
		}
		f.access = append(f.access, ap)
	}
	return f
}

// destinations calls fn for every Service port in a Cilium cluster whose
// endpoints Cilium can select (the Service has a selector).
func (f *fleet) destinations(fn func(cluster string, svc *corev1.Service, port corev1.ServicePort)) {
	for cluster, meshes := range f.clusters {
		if !slices.Contains(meshes, discoveryapi.MeshCilium) {
			continue
		}
		for _, svc := range f.services[cluster] {
			if len(svc.Spec.Selector) == 0 {
				continue
			}
			for _, p := range svc.Spec.Ports {
				fn(cluster, svc, p)
			}
		}
	}
}

// workloadPorts returns the ports of a Service port's workloads, as
// Kubernetes resolves its targetPort: the number (the port's own when
// unset), or the number of the container port of that name and protocol
// in each workload the Service selects.
func (f *fleet) workloadPorts(cluster string, svc *corev1.Service, p corev1.ServicePort) []string {
	if p.TargetPort.StrVal == "" {
		return []string{targetPort(p)}
	}
	var out []string
	for _, tpl := range f.templates[cluster] {
		if tpl.Namespace != svc.Namespace || !selectorMatches(selector{MatchLabels: svc.Spec.Selector}, tpl.Labels) {
			continue
		}
		for _, ctr := range tpl.Spec.Containers {
			for _, cp := range ctr.Ports {
				if cp.Name == p.TargetPort.StrVal && cmp.Or(cp.Protocol, corev1.ProtocolTCP) == cmp.Or(p.Protocol, corev1.ProtocolTCP) {
					out = append(out, strconv.Itoa(int(cp.ContainerPort)))
				}
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// forwardsNowhere reports whether a Service port's named targetPort is
// no container port of the workloads the Service selects: no connection
// to it reaches a pod.
func (f *fleet) forwardsNowhere(cluster string, svc *corev1.Service, p corev1.ServicePort) bool {
	if p.TargetPort.StrVal == "" || len(f.workloadPorts(cluster, svc, p)) > 0 {
		return false
	}
	return slices.ContainsFunc(f.templates[cluster], func(tpl *corev1.PodTemplateSpec) bool {
		return tpl.Namespace == svc.Namespace && selectorMatches(selector{MatchLabels: svc.Spec.Selector}, tpl.Labels)
	})
}

// expectedEdges computes the allowed edges from the AccessPolicies' own
// semantics: a destination selected by no AccessPolicy admits everyone;
// one selected by some admits what an Allow policy selecting it admits.
// A Service port that forwards nowhere has no edge.
func expectedEdges(f *fleet) []edge {
	var out []edge
	f.destinations(func(cluster string, svc *corev1.Service, port corev1.ServicePort) {
		if f.forwardsNowhere(cluster, svc, port) {
			return
		}
		var covering []*policyv1alpha1.AccessPolicy
		for _, ap := range f.access {
			if slices.ContainsFunc(ap.Spec.DestinationSelectors, func(s policyv1alpha1.DestinationSelector) bool {
				return s.Matches(policyv1alpha1.ClusterMeta{Name: cluster}, svc.Namespace, svc.Name, svc.Labels)
			}) {
				covering = append(covering, ap)
			}
		}
		for _, c := range f.clients {
			allowed := len(covering) == 0
			for _, ap := range covering {
				if ap.Spec.Action == policyv1alpha1.ActionDenyAll {
					continue
				}
				http := len(ap.Spec.Methods) > 0 || len(ap.Spec.Paths) > 0
				if !clientMatches(ap.Spec.From, c) ||
					len(ap.Spec.Ports) > 0 && !slices.Contains(ap.Spec.Ports, port.Port) ||
					http && cmp.Or(port.Protocol, corev1.ProtocolTCP) != corev1.ProtocolTCP {
					continue
				}
				allowed = true
			}
			if allowed {
				out = append(out, edge{Client: c.String(), Destination: cluster + "/" + svc.Namespace + "/" + svc.Name, Port: port.Port})
			}
		}
	})
	return sortEdges(out)
}

// clientMatches applies ClientSelector semantics: any entry; within one,
// every set field.
func clientMatches(from []policyv1alpha1.ClientSelector, c client) bool {
	for _, f := range from {
		if len(f.ServiceAccounts) > 0 && !slices.ContainsFunc(f.ServiceAccounts, func(sa policyv1alpha1.ServiceAccountRef) bool {
			return sa.Namespace == c.Namespace && sa.Name == c.Name && (sa.Cluster == "" || sa.Cluster == c.Cluster)
		}) {
			continue
		}
		if len(f.Namespaces) > 0 && !slices.Contains(f.Namespaces, c.Namespace) {
			continue
		}
		if len(f.Clusters) > 0 && !slices.Contains(f.Clusters, c.Cluster) {
			continue
		}
		return true
	}
	return false
}

// ciliumEdges extracts the allowed edges from emitted Cilium policies,
// following Cilium's semantics: an endpoint selected by no rule admits
// everything; otherwise it admits what some ingress rule of a rule
// selecting it admits. fromEndpoints selectors get what Cilium adds when
// it parses a policy: in a CiliumNetworkPolicy, the policy's namespace
// unless they name one; in a CiliumClusterwideNetworkPolicy, any
// namespace; and, with policy-default-local-cluster, the local cluster
// unless they name one.
func ciliumEdges(t *testing.T, f *fleet, outputs []goldenObject) []edge {
	t.Helper()
	type scoped struct {
		namespace string // empty for a clusterwide policy
		rule      rule
	}
	rules := map[string][]scoped{}
	for _, o := range outputs {
		if !isCiliumPolicy(o.Object) {
			continue
		}
		data, err := json.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		var p networkPolicy
		if err := json.Unmarshal(data, &p); err != nil {
			t.Fatal(err)
		}
		for _, r := range p.rules() {
			rules[o.Cluster] = append(rules[o.Cluster], scoped{namespace: p.Namespace, rule: r})
		}
	}
	var out []edge
	f.destinations(func(cluster string, svc *corev1.Service, port corev1.ServicePort) {
		pod := map[string]string{bare(LabelNamespace): svc.Namespace, bare(LabelCluster): cluster}
		for k, v := range svc.Spec.Selector {
			pod[k] = v
		}
		var selecting []scoped
		for _, r := range rules[cluster] {
			if r.namespace != "" && r.namespace != svc.Namespace {
				continue
			}
			if selectorMatches(r.rule.EndpointSelector, pod) {
				selecting = append(selecting, r)
			}
		}
		for _, c := range f.clients {
			allowed := len(selecting) == 0
			for _, r := range selecting {
				for _, in := range r.rule.Ingress {
					if admitsClient(in, r.namespace, cluster, c) && admitsPort(in, port) {
						allowed = true
					}
				}
			}
			if allowed {
				out = append(out, edge{Client: c.String(), Destination: cluster + "/" + svc.Namespace + "/" + svc.Name, Port: port.Port})
			}
		}
	})
	return sortEdges(out)
}

func admitsClient(in ingressRule, namespace, localCluster string, c client) bool {
	if in.FromEndpoints == nil {
		return len(in.ToPorts) > 0 // no peers and ports: any peer; neither: nothing
	}
	for _, sel := range in.FromEndpoints {
		sel = withCiliumDefaults(sel, namespace, localCluster)
		if selectorMatches(sel, c.identityLabels()) {
			return true
		}
	}
	return false
}

// withCiliumDefaults adds to a fromEndpoints selector the namespace and
// cluster requirements Cilium adds when it parses a policy.
func withCiliumDefaults(sel selector, namespace, localCluster string) selector {
	out := selector{MatchLabels: map[string]string{}, MatchExpressions: slices.Clone(sel.MatchExpressions)}
	for k, v := range sel.MatchLabels {
		out.MatchLabels[k] = v
	}
	if !hasKey(sel, LabelNamespace) {
		if namespace != "" {
			out.MatchLabels[LabelNamespace] = namespace
		} else {
			out.MatchExpressions = append(out.MatchExpressions, requirement{Key: LabelNamespace, Operator: operatorExists})
		}
	}
	if !hasKey(sel, LabelCluster) {
		out.MatchLabels[LabelCluster] = localCluster
	}
	return out
}

// hasKey reports whether the selector constrains the label, with the k8s
// or any source prefix.
func hasKey(sel selector, key string) bool {
	for k := range sel.MatchLabels {
		if k == key || k == "any:"+bare(key) {
			return true
		}
	}
	for _, r := range sel.MatchExpressions {
		if r.Key == key || r.Key == "any:"+bare(key) {
			return true
		}
	}
	return false
}

func admitsPort(in ingressRule, port corev1.ServicePort) bool {
	if len(in.ToPorts) == 0 {
		return true
	}
	proto := string(cmp.Or(port.Protocol, corev1.ProtocolTCP))
	for _, pr := range in.ToPorts {
		for _, pp := range pr.Ports {
			if pp.Port == targetPort(port) && pp.Protocol == proto {
				return true
			}
		}
	}
	return false
}

// targetPort is the port Cilium matches for a Service port: a numeric
// targetPort (the port itself when unset), or a named one as a container
// port name.
func targetPort(sp corev1.ServicePort) string {
	switch {
	case sp.TargetPort.StrVal != "":
		return strings.ToLower(sp.TargetPort.StrVal)
	case sp.TargetPort.IntVal != 0:
		return strconv.Itoa(int(sp.TargetPort.IntVal))
	default:
		return strconv.Itoa(int(sp.Port))
	}
}

// bare strips a label key's source prefix.
func bare(key string) string {
	for _, p := range []string{"k8s:", "any:"} {
		key = strings.TrimPrefix(key, p)
	}
	return key
}

// selectorMatches evaluates a label selector over labels without source
// prefixes.
func selectorMatches(sel selector, labels map[string]string) bool {
	for k, v := range sel.MatchLabels {
		if got, ok := labels[bare(k)]; !ok || got != v {
			return false
		}
	}
	for _, r := range sel.MatchExpressions {
		v, ok := labels[bare(r.Key)]
		switch r.Operator {
		case "Exists":
			if !ok {
				return false
			}
		case "DoesNotExist":
			if ok {
				return false
			}
		case "In":
			if !ok || !slices.Contains(r.Values, v) {
				return false
			}
		case "NotIn":
			if ok && slices.Contains(r.Values, v) {
				return false
			}
		default:
			return false
		}
	}
	return true
}

func sortEdges(es []edge) []edge {
	slices.SortFunc(es, func(a, b edge) int {
		return cmp.Or(cmp.Compare(a.Client, b.Client), cmp.Compare(a.Destination, b.Destination), cmp.Compare(a.Port, b.Port))
	})
	return slices.Compact(es)
}

// diffEdges lists the edges only in want (missing) and only in got (extra).
func diffEdges(want, got []edge) (missing, extra []edge) {
	for _, e := range want {
		if _, ok := slices.BinarySearchFunc(got, e, compareEdge); !ok {
			missing = append(missing, e)
		}
	}
	for _, e := range got {
		if _, ok := slices.BinarySearchFunc(want, e, compareEdge); !ok {
			extra = append(extra, e)
		}
	}
	return missing, extra
}

func compareEdge(a, b edge) int {
	return cmp.Or(cmp.Compare(a.Client, b.Client), cmp.Compare(a.Destination, b.Destination), cmp.Compare(a.Port, b.Port))
}

// TestEdgeEquivalence checks, for every fixture, that the Cilium policies
// of the golden output admit exactly the (client, destination, port) edges
// the AccessPolicies admit — the same edges the Istio translator's
// AuthorizationPolicies must admit.
func TestEdgeEquivalence(t *testing.T) {
	restricted := 0
	for _, name := range goldenCases(t) {
		t.Run(name, func(t *testing.T) {
			f := loadFleet(t, fixturePath(name))
			want := expectedEdges(f)
			got := ciliumEdges(t, f, readGolden(t, name))
			missing, extra := diffEdges(want, got)
			for _, e := range missing {
				t.Errorf("edge %s: allowed by the AccessPolicies, denied by the Cilium policies", e)
			}
			for _, e := range extra {
				t.Errorf("edge %s: denied by the AccessPolicies, allowed by the Cilium policies", e)
			}
			all := 0
			f.destinations(func(string, *corev1.Service, corev1.ServicePort) { all += len(f.clients) })
			restricted += all - len(want)
		})
	}
	if restricted == 0 {
		t.Error("no fixture denies any edge: the comparison proves nothing")
	}
}

// TestEdgeExtractorCatchesWidening shows the comparison can fail: dropping
// the namespace and cluster keys from the client selectors lets Cilium
// narrow them to the policy's namespace and the local cluster, and
// dropping the fromEndpoints of a rule with ports admits every client.
func TestEdgeExtractorCatchesWidening(t *testing.T) {
	f := loadFleet(t, fixturePath("access-allow"))
	want := expectedEdges(f)
	mutations := map[string]func(r *rule){
		"no cluster key": func(r *rule) {
			for i := range r.Ingress {
				for j := range r.Ingress[i].FromEndpoints {
					delete(r.Ingress[i].FromEndpoints[j].MatchLabels, LabelCluster)
					r.Ingress[i].FromEndpoints[j].MatchExpressions = slices.DeleteFunc(r.Ingress[i].FromEndpoints[j].MatchExpressions,
						func(q requirement) bool { return q.Key == LabelCluster })
				}
			}
		},
		"no peers": func(r *rule) {
			for i := range r.Ingress {
				r.Ingress[i].FromEndpoints = nil
			}
		},
	}
	for name, mutate := range mutations {
		t.Run(name, func(t *testing.T) {
			var outputs []goldenObject
			for _, o := range readGolden(t, "access-allow") {
				if isCiliumPolicy(o.Object) {
					data, _ := json.Marshal(o.Object)
					var p networkPolicy
					if err := json.Unmarshal(data, &p); err != nil {
						t.Fatal(err)
					}
					if p.Spec != nil {
						mutate(p.Spec)
					}
					for i := range p.Specs {
						mutate(&p.Specs[i])
					}
					data, _ = json.Marshal(p)
					o.Object = nil
					if err := json.Unmarshal(data, &o.Object); err != nil {
						t.Fatal(err)
					}
				}
				outputs = append(outputs, o)
			}
			missing, extra := diffEdges(want, ciliumEdges(t, f, outputs))
			if len(missing)+len(extra) == 0 {
				t.Errorf("mutation %q: edges unchanged, want a difference", name)
			}
		})
	}
}
