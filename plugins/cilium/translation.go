package cilium

import (
	"slices"
	"strconv"
	"strings"

	discoveryapi "github.com/meshrelay/meshrelay/api/discovery/v1alpha1"
	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/sdk"
)

// output is one object to emit to the target and the policies it derives
// from.
type output struct {
	obj     any
	parents []policyv1alpha1.Policy
}

// translation is the computation of one target cluster's outputs, a
// cluster where discovery found Cilium. It reads the target's own inputs
// through target; of the rest of the fleet it reads the policies and
// values computed once for every target (see runsCilium, virtualFactsOf
// and trafficWarningsOf).
type translation struct {
	fleet   *sdk.Fleet
	target  *sdk.Cluster
	outputs []output
	diags   diagnostics
}

func newTranslation(f *sdk.Fleet, target *sdk.Cluster) *translation {
	return &translation{fleet: f, target: target}
}

func (tr *translation) emit(obj any, parents ...policyv1alpha1.Policy) {
	tr.outputs = append(tr.outputs, output{obj: obj, parents: parents})
}

// diagnostics collects diagnostics.
type diagnostics []sdk.Diagnostic

// add appends d with the cluster it concerns ("" for none) and a detail.
func (ds *diagnostics) add(d sdk.Diagnostic, cluster, detail string) {
	d.Cluster, d.Detail = cluster, detail
	*ds = append(*ds, d)
}

// sharedRunsCilium answers, per cluster name, whether the cluster is in
// the fleet and runs Cilium (see runsCilium).
var sharedRunsCilium = sdk.NewSharedMap("cilium/runs-cilium", func(f *sdk.Fleet, name string) bool {
	c, ok := f.Cluster(name)
	return ok && c.HasMesh(discoveryapi.MeshCilium)
})

// runsCilium reports whether the named cluster is in the fleet and runs
// Cilium. The answer is shared, so a target that asks depends on the
// answer alone, not on the cluster's staleness or other meshes.
func runsCilium(f *sdk.Fleet, name string) bool {
	return sharedRunsCilium.Get(f, name)
}

// key returns the key of a Service of the target.
func (tr *translation) key(d sdk.Destination) sdk.ServiceKey {
	return sdk.ServiceKey{Cluster: tr.target.Name, Namespace: d.Service.Namespace, Name: d.Service.Name}
}

// ciliumDestinations returns the Services of the fleet the selectors select
// in clusters with Cilium, sorted by cluster, namespace and name. It reads
// across clusters: only the values every target shares use it.
func ciliumDestinations(f *sdk.Fleet, sels []policyv1alpha1.DestinationSelector) []sdk.Destination {
	return slices.DeleteFunc(f.Select(sels), func(d sdk.Destination) bool { return !d.Cluster.HasMesh(discoveryapi.MeshCilium) })
}

// findPolicy returns the policy of ps with reference ref.
func findPolicy[P policyv1alpha1.Policy](ps []P, ref sdk.PolicyRef) (P, bool) {
	for _, p := range ps {
		if sdk.RefOf(p) == ref {
			return p, true
		}
	}
	var zero P
	return zero, false
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
