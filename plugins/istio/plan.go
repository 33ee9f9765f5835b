package istio

import (
	"maps"
	"slices"

	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/sdk"
)

// sharedPlan is the trafficPlan that targets share.
var sharedPlan = sdk.NewShared("istio/traffic-plan", computePlan)

// trafficPlan is what every target needs to know of the TrafficPolicies and
// VirtualDestinations over the whole fleet: which are valid, what they
// select, and which are accepted. A policy's objects are all emitted or
// none is: one whose object would take, in any cluster, a name that an
// older policy's object has is refused everywhere. The plan is computed
// once per state of the fleet and shared by the targets, which depend on
// it, not on everything it read.
type trafficPlan struct {
	// Multi is true when more than one cluster runs Istio.
	Multi bool
	// Traffic and Virtual hold the facts of each policy.
	Traffic map[sdk.PolicyRef]*trafficFacts
	Virtual map[sdk.PolicyRef]*virtualFacts
	// Addresses are the virtual IPs of the hosts under .global that
	// accepted policies may make ServiceEntries for, by hostname
	// (allocateGlobalAddresses).
	Addresses map[string]string
	// Diags are the diagnostics about the policies as a whole: what they
	// select, their validation, and name conflicts. Targets report those
	// about their own clients.
	Diags []sdk.Diagnostic
}

// trafficFacts are the fleet-wide facts of one TrafficPolicy.
type trafficFacts struct {
	// Valid is true when the policy has no error of validation and no
	// rule an older policy shadows: clients translate its rules.
	Valid bool
	// Accepted is true when the policy's objects are emitted.
	Accepted bool
	// Dests are the destinations the policy selects, sorted.
	Dests []trafficDest
	// Remote is true when clients in other clusters reach one of them.
	Remote bool
}

// trafficDest is a destination of a TrafficPolicy.
type trafficDest struct {
	Key sdk.ServiceKey
	// Reach says whether clients in other clusters reach it.
	Reach reach
}

// reach is whether clients in other clusters reach a Service, and if not, why.
type reach uint8

const (
	reachable reach = iota
	// noGateway: the Service's cluster has no Istio east-west gateway.
	noGateway
	// noSelector: the Service has no selector for the gateway to route to.
	noSelector
)

// translators returns the clusters whose clients translate the policy's
// rules: every Istio cluster when clients reach a destination from other
// clusters, else the clusters of the destinations.
func (f *trafficFacts) translators(istio []string) []string {
	if f.Remote {
		return istio
	}
	var out []string
	for _, d := range f.Dests {
		out = append(out, d.Key.Cluster)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// translatedElsewhere reports whether clients of a cluster other than
// target translate the policy's rules, and so use target's Services.
func (f *trafficFacts) translatedElsewhere(target string, multi bool) bool {
	if f.Remote {
		return multi
	}
	return slices.ContainsFunc(f.Dests, func(d trafficDest) bool { return d.Key.Cluster != target })
}

// virtualFacts are the fleet-wide facts of one VirtualDestination.
type virtualFacts struct {
	// Accepted is true when the policy's objects are emitted.
	Accepted bool
	// Backing are the existing backing Services in clusters that run
	// Istio, sorted.
	Backing []sdk.ServiceKey
}

// planOf returns the fleet's plan, computed once and shared by the targets.
func planOf(f *sdk.Fleet) *trafficPlan { return sharedPlan.Get(f) }

// computePlan decides the TrafficPolicies in order of age, then the
// VirtualDestinations, as the objects of each claim their names in every
// Istio cluster.
func computePlan(f *sdk.Fleet) *trafficPlan {
	p := &trafficPlan{Traffic: map[sdk.PolicyRef]*trafficFacts{}, Virtual: map[sdk.PolicyRef]*virtualFacts{}}
	tps, vds := f.TrafficPolicies(), f.VirtualDestinations()
	if len(tps)+len(vds) == 0 {
		return p
	}
	v := newView(f)
	istio := v.istioClusters()
	if len(istio) == 0 {
		return p
	}
	p.Multi = len(istio) > 1
	taken := claims{}
	planTraffic(v, p, istio, tps, taken)
	planVirtual(v, p, istio, vds, taken)
	p.Addresses = allocateGlobalAddresses(p, tps, vds)
	return p
}

// planTraffic decides each TrafficPolicy: its validity against the fleet and
// the older policies shaping its destinations, and whether its
// DestinationRules take names already taken.
func planTraffic(v *view, p *trafficPlan, istio []string, tps []*policyv1alpha1.TrafficPolicy, taken claims) {
	shapers := map[sdk.ServiceKey][]*policyv1alpha1.TrafficPolicy{}
	for _, tp := range byAge(tps) {
		facts := &trafficFacts{}
		p.Traffic[sdk.RefOf(tp)] = facts
		s := newStaged(tp)
		dests := selectIstio(v, tp.Spec.DestinationSelectors)
		if len(dests) == 0 {
			s.warnf("", "spec.destinationSelectors", "selects no Service in a cluster that runs Istio")
		}
		for _, d := range dests {
			for _, older := range shapers[d.key] {
				checkShadowing(s, tp, older, d.key)
			}
		}
		validate(v, tp, s, p.Multi)
		p.Diags = append(p.Diags, s.diags...)
		if facts.Valid = !s.failed(); !facts.Valid {
			continue
		}
		for _, d := range dests {
			r := reachOf(v, d)
			facts.Dests = append(facts.Dests, trafficDest{Key: d.key, Reach: r})
			facts.Remote = facts.Remote || r == reachable
		}
		keys, ok := plannedRules(tp, facts, istio)
		if !ok {
			continue
		}
		if d, ok := taken.take(tp, keys); !ok {
			p.Diags = append(p.Diags, d)
			continue
		}
		facts.Accepted = true
		for _, d := range facts.Dests {
			shapers[d.Key] = append(shapers[d.Key], tp)
		}
	}
}

// reachOf says whether clients in other clusters reach a destination.
func reachOf(v *view, d destination) reach {
	switch {
	case len(v.gateways(d.key.Cluster)) == 0:
		return noGateway
	case len(d.svc.Spec.Selector) == 0:
		return noSelector
	}
	return reachable
}

// plannedRules returns the keys of the DestinationRules a valid policy
// emits, in the order the clients stage them: in each translating client
// for each Service routed to a subset of, then in the Service's own cluster
// for the clients of other clusters. It is false when two subsets would
// share a name and some client translates the rules: the policy then fails.
func plannedRules(tp *policyv1alpha1.TrafficPolicy, facts *trafficFacts, istio []string) ([]outputKey, bool) {
	subsets, collide := policySubsets(tp)
	clients := facts.translators(istio)
	if collide && len(clients) > 0 {
		return nil, false
	}
	services := slices.SortedFunc(maps.Keys(subsets), sdk.ServiceKey.Compare)
	var keys []outputKey
	exported := map[sdk.ServiceKey]bool{}
	for _, client := range clients {
		for _, k := range services {
			if client == k.Cluster {
				keys = append(keys, keyFor(client, destinationRuleType, k.Namespace, objectName(tp.Name, k.Name)))
				continue
			}
			keys = append(keys, keyFor(client, destinationRuleType, k.Namespace, objectName(tp.Name, k.Name, k.Cluster)))
			exported[k] = true
		}
	}
	for _, k := range services {
		if exported[k] {
			keys = append(keys, keyFor(k.Cluster, destinationRuleType, k.Namespace, objectName(tp.Name, k.Name, k.Cluster)))
		}
	}
	return keys, true
}

// policySubsets returns the subsets the policy's routes and mirrors go to,
// per Service: name -> labels, the last of one name winning. collide is
// true when two different label sets get the same name.
func policySubsets(tp *policyv1alpha1.TrafficPolicy) (subsets map[sdk.ServiceKey]map[string]map[string]string, collide bool) {
	subsets = map[sdk.ServiceKey]map[string]map[string]string{}
	for _, d := range serviceDestinations(tp) {
		if len(d.Subset) == 0 {
			continue
		}
		k := sdk.ServiceKey{Cluster: d.Service.Cluster, Namespace: d.Service.Namespace, Name: d.Service.Name}
		if subsets[k] == nil {
			subsets[k] = map[string]map[string]string{}
		}
		name := subsetName(d.Subset)
		if prev, ok := subsets[k][name]; ok && labelsKey(prev) != labelsKey(d.Subset) {
			collide = true
		}
		subsets[k][name] = d.Subset
	}
	return subsets, collide
}

// serviceDestinations returns the policy's route and mirror destinations
// that are Services, in the order its rules name them.
func serviceDestinations(tp *policyv1alpha1.TrafficPolicy) []*policyv1alpha1.Destination {
	var out []*policyv1alpha1.Destination
	add := func(d *policyv1alpha1.Destination) {
		if d.VirtualDestination == nil && d.Service != nil {
			out = append(out, d)
		}
	}
	for i := range tp.Spec.HTTP {
		rule := &tp.Spec.HTTP[i]
		for j := range rule.Route {
			add(&rule.Route[j].Destination)
		}
		if rule.Mirror != nil {
			add(&rule.Mirror.Destination)
		}
	}
	return out
}

// planVirtual decides each VirtualDestination: its backing Services, and
// whether its ServiceEntry and DestinationRule, in every Istio cluster,
// take names already taken.
func planVirtual(v *view, p *trafficPlan, istio []string, vds []*policyv1alpha1.VirtualDestination, taken claims) {
	for _, vd := range vds {
		s := newStaged(vd)
		facts := &virtualFacts{Backing: backingServices(v, vd, s)}
		p.Virtual[sdk.RefOf(vd)] = facts
		if len(facts.Backing) == 0 {
			s.warnf("", "spec.services", "no backing Service found in a cluster that runs Istio")
		}
		p.Diags = append(p.Diags, s.diags...)
		var keys []outputKey
		if len(facts.Backing) > 0 {
			for _, client := range istio {
				namespace := virtualNamespace(v, vd, client)
				keys = append(keys, keyFor(client, serviceEntryType, namespace, objectName(vd.Name)))
				if hasVirtualDestinationRule(vd) {
					keys = append(keys, keyFor(client, destinationRuleType, namespace, objectName(vd.Name)))
				}
			}
		}
		d, ok := taken.take(vd, keys)
		if !ok {
			p.Diags = append(p.Diags, d)
		}
		facts.Accepted = ok
	}
}
