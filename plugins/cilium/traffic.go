package cilium

import (
	"fmt"

	discoveryapi "github.com/meshrelay/meshrelay/api/discovery/v1alpha1"
	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/sdk"
)

// trafficKeyPrefix starts the key of a TrafficPolicy's shared warnings
// (see trafficWarningsOf); the policy's reference follows it.
const trafficKeyPrefix = "cilium/traffic-policy/"

// trafficPolicies reports, for each TrafficPolicy selecting destinations
// in the target when it runs Cilium and not Istio, each thing of its rules
// that Cilium cannot express: network policies and ClusterMesh global
// services carry no HTTP routing. Where Istio runs too, its translator
// serves the policy and nothing is reported here.
//
// The warnings name every cluster where a rule is not applied, so they are
// computed over the fleet once and shared by the targets they concern.
func (tr *translation) trafficPolicies(tps []*policyv1alpha1.TrafficPolicy) {
	if len(tps) == 0 || tr.target.HasMesh(discoveryapi.MeshIstio) {
		return
	}
	for _, tp := range tps {
		if len(tr.target.Select(tp.Spec.DestinationSelectors)) > 0 {
			tr.diags = append(tr.diags, trafficWarningsOf(tr.fleet, tp)...)
		}
	}
}

// trafficWarningsOf returns the warnings of a TrafficPolicy, computed over
// the fleet once per state of the fleet and shared by the targets where it
// selects destinations.
func trafficWarningsOf(f *sdk.Fleet, tp *policyv1alpha1.TrafficPolicy) diagnostics {
	ref := sdk.RefOf(tp)
	return sdk.Shared(f, trafficKeyPrefix+ref.String(), func(f *sdk.Fleet) diagnostics {
		tp, ok := findPolicy(f.TrafficPolicies(), ref)
		if !ok {
			return nil
		}
		return trafficWarnings(f, tp)
	})
}

// trafficWarnings returns a warning per field of the TrafficPolicy's rules
// that Cilium cannot express, naming the clusters where it selects
// destinations and Cilium runs without Istio; none when there are no such
// clusters.
func trafficWarnings(f *sdk.Fleet, tp *policyv1alpha1.TrafficPolicy) diagnostics {
	clusters := map[string]bool{}
	var services []string
	for _, d := range ciliumDestinations(f, tp.Spec.DestinationSelectors) {
		if d.Cluster.HasMesh(discoveryapi.MeshIstio) {
			continue
		}
		clusters[d.Cluster.Name] = true
		services = append(services, serviceKey{Cluster: d.Cluster.Name, Namespace: d.Service.Namespace, Name: d.Service.Name}.String())
	}
	if len(clusters) == 0 {
		return nil
	}
	names := sortedKeys(clusters)
	cluster := ""
	if len(names) == 1 {
		cluster = names[0]
	}
	detail := fmt.Sprintf("The policy selects Service %s, where Cilium runs and Istio does not. "+
		"Serve these destinations with the istio or envoy backend, or configure their proxy with a CiliumEnvoyConfig.", list(services))
	var ds diagnostics
	for i, r := range tp.Spec.HTTP {
		rule := fmt.Sprintf("spec.http[%d]", i)
		name := r.Name
		if name == "" {
			name = rule
		}
		for _, f := range unsupported(&r) {
			ds.add(sdk.Warningf(tp, rule+"."+f.field,
				"Cilium cannot express %s: rule %q is not applied in %s", f.what, name, list(names)), cluster, detail)
		}
	}
	return ds
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
