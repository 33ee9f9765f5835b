package cilium

import (
	"cmp"
	"slices"
	"strconv"
	"strings"

	discoveryapi "github.com/meshrelay/meshrelay/api/discovery/v1alpha1"
	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/sdk"
)

// serviceKey names a Service in one cluster.
type serviceKey struct {
	Cluster, Namespace, Name string
}

func (k serviceKey) compare(o serviceKey) int {
	return cmp.Or(cmp.Compare(k.Cluster, o.Cluster), cmp.Compare(k.Namespace, o.Namespace), cmp.Compare(k.Name, o.Name))
}

// String returns "namespace/name in cluster".
func (k serviceKey) String() string { return k.Namespace + "/" + k.Name + " in " + k.Cluster }

// output is one object to emit and the policies it derives from.
type output struct {
	cluster string
	obj     any
	parents []policyv1alpha1.Policy
}

// translation is the state of one Translate call.
type translation struct {
	fleet *sdk.Fleet
	// cilium holds the clusters where discovery found Cilium.
	cilium map[string]*sdk.Cluster
	// covered lists, per Service, the AccessPolicies that select it.
	covered map[serviceKey][]*policyv1alpha1.AccessPolicy
	outputs []output
	diags   []sdk.Diagnostic
}

func newTranslation(f *sdk.Fleet) *translation {
	tr := &translation{
		fleet:   f,
		cilium:  map[string]*sdk.Cluster{},
		covered: map[serviceKey][]*policyv1alpha1.AccessPolicy{},
	}
	for _, c := range f.ClustersWithMesh(discoveryapi.MeshCilium) {
		tr.cilium[c.Name] = c
	}
	return tr
}

func (tr *translation) emit(cluster string, obj any, parents ...policyv1alpha1.Policy) {
	tr.outputs = append(tr.outputs, output{cluster: cluster, obj: obj, parents: parents})
}

func (tr *translation) diagnose(d sdk.Diagnostic, cluster, detail string) {
	d.Cluster, d.Detail = cluster, detail
	tr.diags = append(tr.diags, d)
}

// ciliumDestinations returns the Services the selectors select in clusters
// with Cilium, sorted by cluster, namespace and name.
func (tr *translation) ciliumDestinations(sels []policyv1alpha1.DestinationSelector) []sdk.Destination {
	return slices.DeleteFunc(tr.fleet.Select(sels), func(d sdk.Destination) bool { return tr.cilium[d.Cluster.Name] == nil })
}

// hasNamespace reports whether the cluster's inputs show the namespace:
// a Namespace or a Service in it.
func hasNamespace(c *sdk.Cluster, ns string) bool {
	for _, n := range c.Namespaces() {
		if n.Name == ns {
			return true
		}
	}
	for _, s := range c.Services() {
		if s.Namespace == ns {
			return true
		}
	}
	return false
}

// sortedKeys returns the keys of a set, sorted.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// list joins values for a message, cutting long lists.
func list(values []string) string {
	const max = 8
	if len(values) > max {
		return strings.Join(values[:max], ", ") + " and " + strconv.Itoa(len(values)-max) + " more"
	}
	return strings.Join(values, ", ")
}
