package cilium

import (
	"cmp"
	"fmt"
	"slices"

	discoveryapi "github.com/meshrelay/meshrelay/api/discovery/v1alpha1"
	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/sdk"
	corev1 "k8s.io/api/core/v1"
)

// sharedTrafficWarnings are the warnings of each TrafficPolicy, by its
// reference, that targets share (see trafficWarningsOf).
var sharedTrafficWarnings = sdk.NewSharedMap("cilium/traffic-policy", func(f *sdk.Fleet, ref sdk.PolicyRef) diagnostics {
	tp, ok := findPolicy(f.TrafficPolicies(), ref)
	if !ok {
		return nil
	}
	return trafficWarnings(f, tp)
})

// trafficPolicies serves the TrafficPolicies selecting destinations in
// the target when it runs Cilium and not Istio (where Istio runs too, its
// translator serves them and nothing is done here). Where Cilium's Envoy
// takes CiliumEnvoyConfig, each selected Service gets one (see
// envoyConfigs) and only what it cannot express is reported; elsewhere
// network policies and ClusterMesh global services carry no HTTP routing,
// and each field of the rules is reported as not applied.
//
// The warnings name every cluster where a rule is not applied, so they are
// computed over the fleet once and shared by the targets they concern.
func (tr *translation) trafficPolicies(tps []*policyv1alpha1.TrafficPolicy) {
	if len(tps) == 0 || tr.target.HasMesh(discoveryapi.MeshIstio) {
		return
	}
	withEnvoy := envoyConfigEnabled(tr.target)
	var services []*corev1.Service
	selected := map[*corev1.Service][]*policyv1alpha1.TrafficPolicy{}
	for _, tp := range tps {
		dests := tr.target.Select(tp.Spec.DestinationSelectors)
		if len(dests) == 0 {
			continue
		}
		tr.diags = append(tr.diags, trafficWarningsOf(tr.fleet, tp)...)
		for _, d := range dests {
			if withEnvoy && !slices.Contains(services, d.Service) {
				services = append(services, d.Service)
			}
			selected[d.Service] = append(selected[d.Service], tp)
		}
	}
	slices.SortFunc(services, func(a, b *corev1.Service) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	tr.envoyConfigs(services, selected)
}

// trafficWarningsOf returns the warnings of a TrafficPolicy, computed over
// the fleet once per state of the fleet and shared by the targets where it
// selects destinations.
func trafficWarningsOf(f *sdk.Fleet, tp *policyv1alpha1.TrafficPolicy) diagnostics {
	return sharedTrafficWarnings.Get(f, sdk.RefOf(tp))
}

// trafficWarnings returns a warning per field of the TrafficPolicy's rules
// that Cilium cannot express, naming the clusters where it selects
// destinations and Cilium runs without Istio; none when there are no such
// clusters. Where Cilium's Envoy takes CiliumEnvoyConfig only fault
// injection is missing (Cilium's Envoy has no fault filter); destinations
// that it cannot reach are reported by the targets (see resolve).
func trafficWarnings(f *sdk.Fleet, tp *policyv1alpha1.TrafficPolicy) diagnostics {
	plain, withEnvoy := map[string]bool{}, map[string]bool{}
	var services, envoyServices []string
	for _, d := range ciliumDestinations(f, tp.Spec.DestinationSelectors) {
		if d.Cluster.HasMesh(discoveryapi.MeshIstio) {
			continue
		}
		name := d.Key().InCluster()
		if envoyConfigEnabled(d.Cluster) {
			withEnvoy[d.Cluster.Name] = true
			envoyServices = append(envoyServices, name)
			continue
		}
		plain[d.Cluster.Name] = true
		services = append(services, name)
	}
	var ds diagnostics
	ds = append(ds, fieldWarnings(tp, plain, unsupported, fmt.Sprintf("The policy selects Service %s, where Cilium runs and Istio does not, "+
		"and Cilium's Envoy does not take CiliumEnvoyConfig. Turn it on (Cilium's Helm value envoyConfig.enabled), "+
		"or serve these destinations with the istio or envoy backend.", list(services)))...)
	ds = append(ds, fieldWarnings(tp, withEnvoy, faultOnly, fmt.Sprintf("The policy selects Service %s, served by a CiliumEnvoyConfig; "+
		"Cilium's Envoy is built without the HTTP fault filter.", list(envoyServices)))...)
	return ds
}

// fieldWarnings warns about each field of each rule of tp that fields
// lists, as not applied in clusters; none when clusters is empty.
func fieldWarnings(tp *policyv1alpha1.TrafficPolicy, clusters map[string]bool, fields func(*policyv1alpha1.HTTPRule) []feature, detail string) diagnostics {
	if len(clusters) == 0 {
		return nil
	}
	names := sortedKeys(clusters)
	cluster := ""
	if len(names) == 1 {
		cluster = names[0]
	}
	var ds diagnostics
	for i, r := range tp.Spec.HTTP {
		rule := fmt.Sprintf("spec.http[%d]", i)
		name := cmp.Or(r.Name, rule)
		for _, f := range fields(&r) {
			ds.add(sdk.Warningf(tp, rule+"."+f.field,
				"Cilium cannot express %s: rule %q is not applied in %s", f.what, name, list(names)), cluster, detail)
		}
	}
	return ds
}

// faultOnly lists the fault injection of r, which Cilium's Envoy cannot
// express.
func faultOnly(r *policyv1alpha1.HTTPRule) []feature {
	if r.Fault == nil {
		return nil
	}
	return []feature{{"fault", "fault injection"}}
}

// feature is a field of an HTTP rule and what it does.
type feature struct{ field, what string }

// unsupported lists the fields set in r, none of which Cilium can express.
func unsupported(r *policyv1alpha1.HTTPRule) []feature {
	var out []feature
	if len(r.Route) > 0 {
		what := "routing to chosen destinations"
		weighted := len(r.Route) > 1
		for _, d := range r.Route {
			weighted = weighted || d.Weight > 0 && d.Weight < 100 || len(d.Subset) > 0
		}
		if weighted {
			what = "weighted routing across destinations and subsets"
		}
		out = append(out, feature{"route", what})
	}
	if r.Retries != nil {
		out = append(out, feature{"retries", "retries"})
	}
	if r.Timeout != nil {
		out = append(out, feature{"timeout", "request timeouts"})
	}
	if r.Fault != nil {
		out = append(out, feature{"fault", "fault injection"})
	}
	if r.Mirror != nil {
		out = append(out, feature{"mirror", "traffic mirroring"})
	}
	if r.Headers != nil {
		out = append(out, feature{"headers", "header manipulation"})
	}
	return out
}
