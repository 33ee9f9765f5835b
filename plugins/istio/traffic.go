package istio

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	discoveryapi "github.com/meshrelay/meshrelay/api/discovery/v1alpha1"
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

// translateTraffic turns each TrafficPolicy into VirtualServices and
// DestinationRules. Several TrafficPolicies may shape one destination: its
// VirtualService holds the rules of each, oldest policy first (then by
// namespace and name). A policy is refused with a diagnostic when an older
// one on the same destination would shadow one of its rules: a rule that
// matches every request, or the same match.
func translateTraffic(ctx context.Context, v *view, out *outputs, remote *remoteServices) error {
	shapers := map[serviceKey][]*trafficTranslation{}
	for _, tp := range byAge(v.fleet.TrafficPolicies()) {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("translate traffic policies: %w", err)
		}
		tr := &trafficTranslation{
			v: v, tp: tp, s: newStaged(tp),
			subsets: map[clientService]map[string]map[string]string{},
			routes:  map[clientService][]*networking.HTTPRoute{},
		}
		tr.dests = selectIstio(v, tp.Spec.DestinationSelectors)
		if len(tr.dests) == 0 {
			tr.s.warnf("", "spec.destinationSelectors", "selects no Service in a cluster that runs Istio")
		}
		for _, d := range tr.dests {
			for _, older := range shapers[d] {
				tr.checkShadowing(older, d)
			}
		}
		tr.validate()
		if !tr.s.failed() {
			for _, client := range v.istio {
				for _, d := range tr.dests {
					tr.virtualServiceRoutes(client.Name, d)
				}
			}
			tr.destinationRules()
		}
		if out.commit(tr.s) {
			for _, d := range tr.dests {
				shapers[d] = append(shapers[d], tr)
			}
			remote.add(tp, tr.uses)
		}
	}
	for _, d := range slices.SortedFunc(maps.Keys(shapers), serviceKey.compare) {
		for _, client := range v.istio {
			virtualService(out, client.Name, d, shapers[d])
		}
	}
	return nil
}

// virtualService emits the VirtualService of destination d for clients in
// cluster client, with the rules of the policies shaping it, in order. It
// is named after the oldest of them.
func virtualService(out *outputs, client string, d serviceKey, shapers []*trafficTranslation) {
	var (
		parents []policyv1alpha1.Policy
		routes  []*networking.HTTPRoute
		names   = map[string]bool{}
	)
	cs := clientService{Client: client, Service: d}
	for _, tr := range shapers {
		rs, ok := tr.routes[cs]
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

// checkShadowing reports the rules of the policy that an older policy
// shaping destination d would shadow.
func (tr *trafficTranslation) checkShadowing(older *trafficTranslation, d serviceKey) {
	matches := map[string]int{}
	for i := range older.tp.Spec.HTTP {
		rule := &older.tp.Spec.HTTP[i]
		if len(rule.Matches) == 0 {
			tr.s.errorf(d.Cluster, "spec.destinationSelectors",
				"destination %s is already shaped by %s, whose rule spec.http[%d] matches every request, so this policy's rules would never apply; merge the two policies",
				d, sdk.RefOf(older.tp), i)
			return
		}
		for _, m := range rule.Matches {
			matches[matchKey(&m)] = i
		}
	}
	for j := range tr.tp.Spec.HTTP {
		for k, m := range tr.tp.Spec.HTTP[j].Matches {
			if i, ok := matches[matchKey(&m)]; ok {
				tr.s.errorf(d.Cluster, fmt.Sprintf("spec.http[%d].matches[%d]", j, k),
					"destination %s is already shaped by %s, whose rule spec.http[%d] has the same match, so this rule would never apply",
					d, sdk.RefOf(older.tp), i)
			}
		}
	}
}

// matchKey is the canonical form of a request match.
func matchKey(m *policyv1alpha1.HTTPMatch) string {
	data, _ := json.Marshal(httpMatch(m))
	return string(data)
}

// selectIstio returns the Services the selectors select in clusters that run Istio.
func selectIstio(v *view, selectors []policyv1alpha1.DestinationSelector) []serviceKey {
	var out []serviceKey
	for _, d := range v.fleet.Select(selectors) {
		if d.Cluster.HasMesh(discoveryapi.MeshIstio) {
			out = append(out, serviceKey{Cluster: d.Cluster.Name, Namespace: d.Service.Namespace, Name: d.Service.Name})
		}
	}
	return out
}

// clientService is a Service as seen from a client cluster.
type clientService struct {
	Client  string
	Service serviceKey
}

// trafficTranslation is the translation of one TrafficPolicy.
type trafficTranslation struct {
	v  *view
	tp *policyv1alpha1.TrafficPolicy
	s  *staged
	// subsets are the subsets routed to, per client cluster and Service:
	// name -> labels.
	subsets map[clientService]map[string]map[string]string
	// uses are the remote Services the policy's clients reach.
	uses []remoteUse
	// dests are the destinations the policy selects.
	dests []serviceKey
	// routes are the policy's HTTP routes per client cluster and destination.
	routes map[clientService][]*networking.HTTPRoute
}

// validate checks the policy's destinations against the fleet.
func (tr *trafficTranslation) validate() {
	for i := range tr.tp.Spec.HTTP {
		rule := &tr.tp.Spec.HTTP[i]
		rp := fmt.Sprintf("spec.http[%d]", i)
		for j := range rule.Route {
			tr.validateDestination(&rule.Route[j].Destination, fmt.Sprintf("%s.route[%d]", rp, j))
		}
		if rule.Mirror != nil {
			tr.validateDestination(&rule.Mirror.Destination, rp+".mirror.destination")
		}
	}
}

func (tr *trafficTranslation) validateDestination(d *policyv1alpha1.Destination, path string) {
	v := tr.v
	if ref := d.VirtualDestination; ref != nil {
		vd, ok := tr.virtualDestination(ref)
		if !ok {
			tr.s.errorf("", path+".virtualDestination", "unknown VirtualDestination %s/%s", cmp.Or(ref.Namespace, tr.tp.Namespace), ref.Name)
			return
		}
		if ref.Port != 0 && !slices.ContainsFunc(vd.Spec.Ports, func(p policyv1alpha1.VirtualPort) bool { return p.Number == ref.Port }) {
			tr.s.errorf("", path+".virtualDestination.port", "VirtualDestination %s/%s has no port %d", vd.Namespace, vd.Name, ref.Port)
		}
		if len(d.Subset) > 0 {
			tr.s.errorf("", path+".subset", "the istio backend does not support subsets of a VirtualDestination; route to the Services instead")
		}
		return
	}
	ref := d.Service
	k := serviceKey{Cluster: ref.Cluster, Namespace: ref.Namespace, Name: ref.Name}
	if _, ok := v.fleet.Cluster(ref.Cluster); !ok {
		tr.s.errorf("", path+".service.cluster", "unknown cluster %q", ref.Cluster)
		return
	}
	if !v.isIstio(ref.Cluster) {
		tr.s.errorf(ref.Cluster, path+".service.cluster", "cluster %q does not run Istio", ref.Cluster)
		return
	}
	svc, ok := v.service(k)
	if !ok {
		tr.s.errorf(ref.Cluster, path+".service", "unknown service %s", k)
		return
	}
	if ref.Port != 0 && !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Port == ref.Port }) {
		tr.s.errorf(ref.Cluster, path+".service.port", "service %s has no port %d", k, ref.Port)
	}
	if len(d.Subset) > 0 {
		workloads := v.workloadLabels(k, svc)
		if !slices.ContainsFunc(workloads, func(l map[string]string) bool { return containsLabels(l, d.Subset) }) {
			tr.s.errorf(ref.Cluster, path+".subset", "no workload of service %s has the labels %s", k, strings.TrimSuffix(labelsKey(d.Subset), ","))
		}
	}
	if len(v.istio) > 1 && len(svc.Spec.Selector) == 0 {
		tr.s.errorf(ref.Cluster, path+".service",
			"service %s has no selector, so clients in other clusters cannot reach its workloads through the east-west gateway", k)
	}
	if len(v.istio) > 1 && len(v.gateways(ref.Cluster)) == 0 {
		tr.s.errorf(ref.Cluster, path+".service.cluster",
			"cluster %q has no Istio east-west gateway, so clients in other clusters cannot reach %s", ref.Cluster, k)
	}
}

func (tr *trafficTranslation) virtualDestination(ref *policyv1alpha1.VirtualDestinationRef) (*policyv1alpha1.VirtualDestination, bool) {
	return tr.v.fleet.VirtualDestination(cmp.Or(ref.Namespace, tr.tp.Namespace), ref.Name)
}

// virtualServiceRoutes translates the policy's rules for destination d
// as clients in cluster client see it.
func (tr *trafficTranslation) virtualServiceRoutes(client string, d serviceKey) {
	if client != d.Cluster {
		if len(tr.v.gateways(d.Cluster)) == 0 {
			tr.s.warnf(client, "spec.destinationSelectors",
				"clients in cluster %q cannot reach %s: its cluster has no Istio east-west gateway", client, d)
			return
		}
		if svc, _ := tr.v.service(d); len(svc.Spec.Selector) == 0 {
			tr.s.warnf(client, "spec.destinationSelectors",
				"clients in cluster %q cannot reach %s: the service has no selector for its east-west gateway to route to", client, d)
			return
		}
		tr.uses = append(tr.uses, remoteUse{clientService: clientService{Client: client, Service: d}})
	}
	host := hostFrom(client, d)
	cs := clientService{Client: client, Service: d}
	for i := range tr.tp.Spec.HTTP {
		tr.routes[cs] = append(tr.routes[cs], tr.httpRoute(client, host, &tr.tp.Spec.HTTP[i]))
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
		vd, _ := tr.virtualDestination(ref)
		out := &networking.Destination{Host: vd.Spec.Hostname}
		if ref.Port != 0 {
			out.Port = &networking.PortSelector{Number: uint32(ref.Port)}
		}
		return out
	}
	ref := d.Service
	k := serviceKey{Cluster: ref.Cluster, Namespace: ref.Namespace, Name: ref.Name}
	out := &networking.Destination{Host: hostFrom(client, k)}
	if ref.Port != 0 {
		out.Port = &networking.PortSelector{Number: uint32(ref.Port)}
	}
	if len(d.Subset) > 0 {
		out.Subset = subsetName(d.Subset)
		cs := clientService{Client: client, Service: k}
		if tr.subsets[cs] == nil {
			tr.subsets[cs] = map[string]map[string]string{}
		}
		if prev, ok := tr.subsets[cs][out.Subset]; ok && labelsKey(prev) != labelsKey(d.Subset) {
			tr.s.errorf(client, "spec.http", "subsets %s and %s of %s would both be named %q; add a label that tells them apart",
				strings.TrimSuffix(labelsKey(prev), ","), strings.TrimSuffix(labelsKey(d.Subset), ","), k, out.Subset)
		}
		tr.subsets[cs][out.Subset] = d.Subset
	}
	if client != k.Cluster {
		tr.uses = append(tr.uses, remoteUse{clientService: clientService{Client: client, Service: k}, subset: d.Subset})
	}
	return out
}

// destinationRules stages the DestinationRules defining the subsets the
// policy routes to: in each client cluster for the host it uses, and, for a
// remote Service, in the Service's own cluster for the remote host, so that
// its east-west gateway knows the subsets too.
func (tr *trafficTranslation) destinationRules() {
	exports := map[serviceKey]map[string]map[string]string{}
	for _, cs := range slices.SortedFunc(maps.Keys(tr.subsets), func(a, b clientService) int {
		return cmp.Or(cmp.Compare(a.Client, b.Client), a.Service.compare(b.Service))
	}) {
		subsets := tr.subsets[cs]
		k := cs.Service
		if cs.Client == k.Cluster {
			tr.s.add(cs.Client, destinationRule(objectName(tr.tp.Name, k.Name), k.Namespace, localHost(k.Namespace, k.Name), subsets, false))
			continue
		}
		tr.s.add(cs.Client, destinationRule(objectName(tr.tp.Name, k.Name, k.Cluster), k.Namespace, remoteHost(k), subsets, true))
		if exports[k] == nil {
			exports[k] = map[string]map[string]string{}
		}
		maps.Copy(exports[k], subsets)
	}
	for _, k := range slices.SortedFunc(maps.Keys(exports), serviceKey.compare) {
		tr.s.add(k.Cluster, destinationRule(objectName(tr.tp.Name, k.Name, k.Cluster), k.Namespace, remoteHost(k), exports[k], false))
	}
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
