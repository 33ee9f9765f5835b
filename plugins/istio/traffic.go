package istio

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/sdk"
	"google.golang.org/protobuf/types/known/durationpb"
	networking "istio.io/api/networking/v1alpha3"
	clientnetworking "istio.io/client-go/pkg/apis/networking/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// defaultRetryOn are the retry conditions of a RetryPolicy without retryOn.
var defaultRetryOn = []string{"5xx", "connect-failure", "refused-stream", "reset"}

// translateTraffic turns each TrafficPolicy into the target's
// VirtualServices and DestinationRules. Several TrafficPolicies may shape
// one destination: its VirtualService holds the rules of each, oldest
// policy first (then by namespace and name). Which policies are valid and
// accepted, the plan decided for the whole fleet.
func translateTraffic(ctx context.Context, t *target, plan *trafficPlan, out *outputs, remote *remoteServices) error {
	shapers := map[sdk.ServiceKey][]*trafficTranslation{}
	for _, tp := range byAge(t.fleet.TrafficPolicies()) {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("translate traffic policies: %w", err)
		}
		facts := plan.Traffic[sdk.RefOf(tp)]
		if facts == nil || !facts.Valid {
			continue
		}
		tr := &trafficTranslation{
			t: t, tp: tp, facts: facts, s: newStaged(tp),
			subsets: map[sdk.ServiceKey]map[string]map[string]string{},
			routes:  map[sdk.ServiceKey][]*networking.HTTPRoute{},
		}
		for _, d := range facts.Dests {
			tr.virtualServiceRoutes(d)
		}
		if !facts.Accepted {
			out.commitPlanned(tr.s, false)
			continue
		}
		tr.destinationRules(plan.Multi)
		if out.commitPlanned(tr.s, true) {
			for _, d := range facts.Dests {
				shapers[d.Key] = append(shapers[d.Key], tr)
			}
			remote.add(tp, tr.uses)
			remote.export(tp, tr.exported(plan.Multi))
		}
	}
	for _, d := range slices.SortedFunc(maps.Keys(shapers), sdk.ServiceKey.Compare) {
		virtualService(out, t.name, d, shapers[d])
	}
	return nil
}

// virtualService emits the VirtualService of destination d for clients in
// cluster client, with the rules of the policies shaping it, in order. It
// is named after the oldest of them.
func virtualService(out *outputs, client string, d sdk.ServiceKey, shapers []*trafficTranslation) {
	var (
		parents []policyv1alpha1.Policy
		routes  []*networking.HTTPRoute
		names   = map[string]bool{}
	)
	for _, tr := range shapers {
		rs, ok := tr.routes[d]
		if !ok {
			continue
		}
		parents = append(parents, tr.tp)
		for _, r := range rs {
			if r.Name != "" && names[r.Name] {
				r.Name = objectName(tr.tp.Name, r.Name)
			}
			names[r.Name] = true
			routes = append(routes, r)
		}
	}
	if len(parents) == 0 {
		return
	}
	name := objectName(parents[0].GetName(), d.Name)
	if client != d.Cluster {
		name = objectName(parents[0].GetName(), d.Name, d.Cluster)
	}
	vs := &clientnetworking.VirtualService{
		TypeMeta:   virtualServiceType,
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: d.Namespace},
	}
	vs.Spec.Hosts = []string{hostFrom(client, d)}
	vs.Spec.Http = routes
	out.putShared(client, vs, parents)
}

// checkShadowing reports the rules of tp that an older policy shaping
// destination d would shadow.
func checkShadowing(s *staged, tp, older *policyv1alpha1.TrafficPolicy, d sdk.ServiceKey) {
	matches := map[string]int{}
	for i := range older.Spec.HTTP {
		rule := &older.Spec.HTTP[i]
		if len(rule.Matches) == 0 {
			s.errorf(d.Cluster, "spec.destinationSelectors",
				"destination %s is already shaped by %s, whose rule spec.http[%d] matches every request, so this policy's rules would never apply; merge the two policies",
				d, sdk.RefOf(older), i)
			return
		}
		for _, m := range rule.Matches {
			matches[matchKey(&m)] = i
		}
	}
	for j := range tp.Spec.HTTP {
		for k, m := range tp.Spec.HTTP[j].Matches {
			if i, ok := matches[matchKey(&m)]; ok {
				s.errorf(d.Cluster, fmt.Sprintf("spec.http[%d].matches[%d]", j, k),
					"destination %s is already shaped by %s, whose rule spec.http[%d] has the same match, so this rule would never apply",
					d, sdk.RefOf(older), i)
			}
		}
	}
}

// matchKey is the canonical form of a request match.
func matchKey(m *policyv1alpha1.HTTPMatch) string {
	data, _ := json.Marshal(httpMatch(m))
	return string(data)
}

// remoteUse is a client reaching a Service of another cluster, optionally
// one subset of it.
type remoteUse struct {
	Service sdk.ServiceKey
	subset  map[string]string
}

// trafficTranslation is the translation of one TrafficPolicy for the
// clients of one target cluster.
type trafficTranslation struct {
	t     *target
	tp    *policyv1alpha1.TrafficPolicy
	facts *trafficFacts
	s     *staged
	// subsets are the subsets routed to, per Service: name -> labels.
	subsets map[sdk.ServiceKey]map[string]map[string]string
	// uses are the remote Services the target's clients reach.
	uses []remoteUse
	// routes are the policy's HTTP routes per destination.
	routes map[sdk.ServiceKey][]*networking.HTTPRoute
}

// validate checks the policy's destinations against the fleet; multi is
// true when more than one cluster runs Istio.
func validate(v *view, tp *policyv1alpha1.TrafficPolicy, s *staged, multi bool) {
	for i := range tp.Spec.HTTP {
		rule := &tp.Spec.HTTP[i]
		rp := fmt.Sprintf("spec.http[%d]", i)
		for j := range rule.Route {
			validateDestination(v, tp, s, multi, &rule.Route[j].Destination, fmt.Sprintf("%s.route[%d]", rp, j))
		}
		if rule.Mirror != nil {
			validateDestination(v, tp, s, multi, &rule.Mirror.Destination, rp+".mirror.destination")
		}
	}
}

func validateDestination(v *view, tp *policyv1alpha1.TrafficPolicy, s *staged, multi bool, d *policyv1alpha1.Destination, path string) {
	if ref := d.VirtualDestination; ref != nil {
		vd, ok := virtualDestinationOf(v.fleet, tp, ref)
		if !ok {
			s.errorf("", path+".virtualDestination", "unknown VirtualDestination %s/%s", cmp.Or(ref.Namespace, tp.Namespace), ref.Name)
			return
		}
		if ref.Port != 0 && !slices.ContainsFunc(vd.Spec.Ports, func(p policyv1alpha1.VirtualPort) bool { return p.Number == ref.Port }) {
			s.errorf("", path+".virtualDestination.port", "VirtualDestination %s/%s has no port %d", vd.Namespace, vd.Name, ref.Port)
		}
		if len(d.Subset) > 0 {
			s.errorf("", path+".subset", "the istio backend does not support subsets of a VirtualDestination; route to the Services instead")
		}
		return
	}
	ref := d.Service
	k := sdk.ServiceKey{Cluster: ref.Cluster, Namespace: ref.Namespace, Name: ref.Name}
	if _, ok := v.fleet.Cluster(ref.Cluster); !ok {
		s.errorf("", path+".service.cluster", "unknown cluster %q", ref.Cluster)
		return
	}
	if !v.isIstio(ref.Cluster) {
		s.errorf(ref.Cluster, path+".service.cluster", "cluster %q does not run Istio", ref.Cluster)
		return
	}
	svc, ok := v.service(k)
	if !ok {
		s.errorf(ref.Cluster, path+".service", "unknown service %s", k)
		return
	}
	if ref.Port != 0 && !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Port == ref.Port }) {
		s.errorf(ref.Cluster, path+".service.port", "service %s has no port %d", k, ref.Port)
	}
	if len(d.Subset) > 0 {
		workloads := v.workloadLabels(k, svc)
		if !slices.ContainsFunc(workloads, func(l map[string]string) bool { return containsLabels(l, d.Subset) }) {
			s.errorf(ref.Cluster, path+".subset", "no workload of service %s has the labels %s", k, strings.TrimSuffix(labelsKey(d.Subset), ","))
		}
	}
	if multi && len(svc.Spec.Selector) == 0 {
		s.errorf(ref.Cluster, path+".service",
			"service %s has no selector, so clients in other clusters cannot reach its workloads through the east-west gateway", k)
	}
	if multi && len(v.gateways(ref.Cluster)) == 0 {
		s.errorf(ref.Cluster, path+".service.cluster",
			"cluster %q has no Istio east-west gateway, so clients in other clusters cannot reach %s", ref.Cluster, k)
	}
}

// virtualDestinationOf returns the VirtualDestination a route of tp refers to.
func virtualDestinationOf(f *sdk.Fleet, tp *policyv1alpha1.TrafficPolicy, ref *policyv1alpha1.VirtualDestinationRef) (*policyv1alpha1.VirtualDestination, bool) {
	return f.VirtualDestination(cmp.Or(ref.Namespace, tp.Namespace), ref.Name)
}

// virtualServiceRoutes translates the policy's rules for destination d as
// the target's clients see it.
func (tr *trafficTranslation) virtualServiceRoutes(d trafficDest) {
	client := tr.t.name
	if client != d.Key.Cluster {
		switch d.Reach {
		case noGateway:
			tr.s.warnf(client, "spec.destinationSelectors",
				"clients in cluster %q cannot reach %s: its cluster has no Istio east-west gateway", client, d.Key)
			return
		case noSelector:
			tr.s.warnf(client, "spec.destinationSelectors",
				"clients in cluster %q cannot reach %s: the service has no selector for its east-west gateway to route to", client, d.Key)
			return
		}
		tr.uses = append(tr.uses, remoteUse{Service: d.Key})
	}
	host := hostFrom(client, d.Key)
	for i := range tr.tp.Spec.HTTP {
		tr.routes[d.Key] = append(tr.routes[d.Key], tr.httpRoute(client, host, &tr.tp.Spec.HTTP[i]))
	}
}

// httpRoute translates one rule for clients in cluster client of host.
func (tr *trafficTranslation) httpRoute(client, host string, rule *policyv1alpha1.HTTPRule) *networking.HTTPRoute {
	r := &networking.HTTPRoute{Name: rule.Name}
	for i := range rule.Matches {
		r.Match = append(r.Match, httpMatch(&rule.Matches[i]))
	}
	if len(rule.Route) == 0 {
		r.Route = []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: host}}}
	}
	weights := splitWeights(rule.Route)
	for j := range rule.Route {
		r.Route = append(r.Route, &networking.HTTPRouteDestination{
			Destination: tr.destination(client, &rule.Route[j].Destination),
			Weight:      weights[j],
		})
	}
	if rule.Timeout != nil {
		r.Timeout = durationpb.New(rule.Timeout.Duration)
	}
	if rp := rule.Retries; rp != nil {
		retryOn := make([]string, 0, len(rp.RetryOn))
		for _, c := range rp.RetryOn {
			retryOn = append(retryOn, string(c))
		}
		if len(retryOn) == 0 {
			retryOn = defaultRetryOn
		}
		r.Retries = &networking.HTTPRetry{Attempts: rp.Attempts}
		if rp.Attempts > 0 {
			r.Retries.RetryOn = strings.Join(retryOn, ",")
			if rp.PerTryTimeout != nil {
				r.Retries.PerTryTimeout = durationpb.New(rp.PerTryTimeout.Duration)
			}
		}
	}
	if f := rule.Fault; f != nil {
		r.Fault = &networking.HTTPFaultInjection{}
		if d := f.Delay; d != nil {
			r.Fault.Delay = &networking.HTTPFaultInjection_Delay{
				HttpDelayType: &networking.HTTPFaultInjection_Delay_FixedDelay{FixedDelay: durationpb.New(d.FixedDelay.Duration)},
				Percentage:    &networking.Percent{Value: float64(d.Percent)},
			}
		}
		if a := f.Abort; a != nil {
			r.Fault.Abort = &networking.HTTPFaultInjection_Abort{
				ErrorType:  &networking.HTTPFaultInjection_Abort_HttpStatus{HttpStatus: a.HTTPStatus},
				Percentage: &networking.Percent{Value: float64(a.Percent)},
			}
		}
	}
	if m := rule.Mirror; m != nil {
		r.Mirror = tr.destination(client, &m.Destination)
		if m.Percent != nil {
			r.MirrorPercentage = &networking.Percent{Value: float64(*m.Percent)}
		}
	}
	if h := rule.Headers; h != nil && (h.Request != nil || h.Response != nil) {
		r.Headers = &networking.Headers{Request: headerOperations(h.Request), Response: headerOperations(h.Response)}
	}
	return r
}

// splitWeights returns the Istio weights of a route: the policy's, or an
// equal split (the first routes taking the remainder) when all are omitted.
// A single destination needs no weight.
func splitWeights(route []policyv1alpha1.WeightedDestination) []int32 {
	weights := make([]int32, len(route))
	var sum int32
	for i, r := range route {
		weights[i] = r.Weight
		sum += r.Weight
	}
	if sum != 0 || len(route) < 2 {
		if len(route) == 1 && sum == 100 {
			weights[0] = 0
		}
		return weights
	}
	n := int32(len(route))
	for i := range weights {
		weights[i] = 100 / n
		if int32(i) < 100%n {
			weights[i]++
		}
	}
	return weights
}

// destination translates a route or mirror destination as seen from
// clients in cluster client, and records the subsets and remote Services
// it needs.
func (tr *trafficTranslation) destination(client string, d *policyv1alpha1.Destination) *networking.Destination {
	if ref := d.VirtualDestination; ref != nil {
		vd, _ := virtualDestinationOf(tr.t.fleet, tr.tp, ref)
		out := &networking.Destination{Host: vd.Spec.Hostname}
		if ref.Port != 0 {
			out.Port = &networking.PortSelector{Number: uint32(ref.Port)}
		}
		return out
	}
	ref := d.Service
	k := sdk.ServiceKey{Cluster: ref.Cluster, Namespace: ref.Namespace, Name: ref.Name}
	out := &networking.Destination{Host: hostFrom(client, k)}
	if ref.Port != 0 {
		out.Port = &networking.PortSelector{Number: uint32(ref.Port)}
	}
	if len(d.Subset) > 0 {
		out.Subset = subsetName(d.Subset)
		if tr.subsets[k] == nil {
			tr.subsets[k] = map[string]map[string]string{}
		}
		if prev, ok := tr.subsets[k][out.Subset]; ok && labelsKey(prev) != labelsKey(d.Subset) {
			tr.s.errorf(client, "spec.http", "subsets %s and %s of %s would both be named %q; add a label that tells them apart",
				strings.TrimSuffix(labelsKey(prev), ","), strings.TrimSuffix(labelsKey(d.Subset), ","), k, out.Subset)
		}
		tr.subsets[k][out.Subset] = d.Subset
	}
	if client != k.Cluster {
		tr.uses = append(tr.uses, remoteUse{Service: k, subset: d.Subset})
	}
	return out
}

// destinationRules stages the DestinationRules defining the subsets the
// policy routes to: for the target's clients, for the host they use; and,
// for the target's Services that clients of other clusters route to
// subsets of, for the remote host, so that its east-west gateway knows the
// subsets too.
func (tr *trafficTranslation) destinationRules(multi bool) {
	client := tr.t.name
	for _, k := range slices.SortedFunc(maps.Keys(tr.subsets), sdk.ServiceKey.Compare) {
		subsets := tr.subsets[k]
		if client == k.Cluster {
			tr.s.add(client, destinationRule(objectName(tr.tp.Name, k.Name), k.Namespace, localHost(k.Namespace, k.Name), subsets, false))
			continue
		}
		tr.s.add(client, destinationRule(objectName(tr.tp.Name, k.Name, k.Cluster), k.Namespace, remoteHost(k), subsets, true))
	}
	if !tr.facts.translatedElsewhere(client, multi) {
		return
	}
	exports, _ := policySubsets(tr.tp)
	for _, k := range slices.SortedFunc(maps.Keys(exports), sdk.ServiceKey.Compare) {
		if k.Cluster == client {
			tr.s.add(client, destinationRule(objectName(tr.tp.Name, k.Name, k.Cluster), k.Namespace, remoteHost(k), exports[k], false))
		}
	}
}

// exported returns the target's Services that clients of other clusters
// reach through the policy: destinations they reach, and Services its
// rules route or mirror to.
func (tr *trafficTranslation) exported(multi bool) []sdk.ServiceKey {
	client := tr.t.name
	var out []sdk.ServiceKey
	for _, d := range tr.facts.Dests {
		if d.Key.Cluster == client && d.Reach == reachable && multi {
			out = append(out, d.Key)
		}
	}
	if tr.facts.translatedElsewhere(client, multi) {
		for _, d := range serviceDestinations(tr.tp) {
			if d.Service.Cluster == client {
				out = append(out, sdk.ServiceKey{Cluster: d.Service.Cluster, Namespace: d.Service.Namespace, Name: d.Service.Name})
			}
		}
	}
	return out
}

// destinationRule returns a DestinationRule for host with the subsets;
// mutual makes clients use Istio mTLS, which carries the SNI an east-west
// gateway routes on.
func destinationRule(name, namespace, host string, subsets map[string]map[string]string, mutual bool) *clientnetworking.DestinationRule {
	dr := &clientnetworking.DestinationRule{
		TypeMeta:   destinationRuleType,
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
	}
	dr.Spec.Host = host
	for _, n := range slices.Sorted(maps.Keys(subsets)) {
		dr.Spec.Subsets = append(dr.Spec.Subsets, &networking.Subset{Name: n, Labels: maps.Clone(subsets[n])})
	}
	if mutual {
		dr.Spec.TrafficPolicy = &networking.TrafficPolicy{Tls: &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_ISTIO_MUTUAL}}
	}
	return dr
}

// httpMatch translates a request match.
func httpMatch(m *policyv1alpha1.HTTPMatch) *networking.HTTPMatchRequest {
	r := &networking.HTTPMatchRequest{}
	if p := m.Path; p != nil {
		t := p.Type
		if t == "" {
			t = policyv1alpha1.MatchPrefix
		}
		r.Uri = stringMatch(t, p.Value)
	}
	if m.Method != "" {
		r.Method = stringMatch(policyv1alpha1.MatchExact, string(m.Method))
	}
	for _, h := range m.Headers {
		name := strings.ToLower(h.Name)
		if h.Invert {
			if r.WithoutHeaders == nil {
				r.WithoutHeaders = map[string]*networking.StringMatch{}
			}
			r.WithoutHeaders[name] = stringMatch(h.Type, h.Value)
			continue
		}
		if r.Headers == nil {
			r.Headers = map[string]*networking.StringMatch{}
		}
		r.Headers[name] = stringMatch(h.Type, h.Value)
	}
	for _, q := range m.QueryParams {
		if r.QueryParams == nil {
			r.QueryParams = map[string]*networking.StringMatch{}
		}
		r.QueryParams[q.Name] = stringMatch(q.Type, q.Value)
	}
	return r
}

// stringMatch translates a value match; Present is Istio's empty match.
func stringMatch(t policyv1alpha1.MatchType, value string) *networking.StringMatch {
	switch t {
	case policyv1alpha1.MatchPrefix:
		return &networking.StringMatch{MatchType: &networking.StringMatch_Prefix{Prefix: value}}
	case policyv1alpha1.MatchRegex:
		return &networking.StringMatch{MatchType: &networking.StringMatch_Regex{Regex: value}}
	case policyv1alpha1.MatchPresent:
		return &networking.StringMatch{}
	default:
		return &networking.StringMatch{MatchType: &networking.StringMatch_Exact{Exact: value}}
	}
}

// headerOperations translates header changes; of two values set or added
// for one header, the last wins.
func headerOperations(ops *policyv1alpha1.HeaderOperations) *networking.Headers_HeaderOperations {
	if ops == nil {
		return nil
	}
	out := &networking.Headers_HeaderOperations{}
	for _, name := range ops.Remove {
		out.Remove = append(out.Remove, strings.ToLower(name))
	}
	for _, h := range ops.Set {
		if out.Set == nil {
			out.Set = map[string]string{}
		}
		out.Set[strings.ToLower(h.Name)] = h.Value
	}
	for _, h := range ops.Add {
		if out.Add == nil {
			out.Add = map[string]string{}
		}
		out.Add[strings.ToLower(h.Name)] = h.Value
	}
	return out
}
