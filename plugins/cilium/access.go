package cilium

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	discoveryapi "github.com/meshrelay/meshrelay/api/discovery/v1alpha1"
	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/sdk"
	corev1 "k8s.io/api/core/v1"
)

// namespacedRule is one rule of an AccessPolicy's Cilium policy in the
// target and the namespace of what it selects: the endpoints of a
// Service, or of a whole namespace.
type namespacedRule struct {
	namespace string
	rule      rule
}

// accessPolicy emits, when ap selects destinations in the target, one
// CiliumNetworkPolicy with a rule per destination — or a
// CiliumClusterwideNetworkPolicy when they span namespaces.
//
// Cilium admits what any rule selecting an endpoint admits, and a rule
// with ingress rules turns on default-deny for the endpoints it selects,
// which is the AccessPolicy's own semantics: an Allow policy becomes rules
// admitting its clients, a DenyAll policy rules admitting nothing.
func (tr *translation) accessPolicy(ap *policyv1alpha1.AccessPolicy, globals map[sdk.ServiceKey]*globalService) {
	deny := ap.Spec.Action == policyv1alpha1.ActionDenyAll
	var clients []selector
	if !deny {
		clients = tr.clientSelectors(ap)
	}
	var nrs []namespacedRule
	var parents []policyv1alpha1.Policy

	// A DenyAll selector naming whole namespaces selects every endpoint there,
	// Services or not.
	wholeNamespace := map[string]bool{}
	if deny {
		for _, ns := range tr.wholeNamespaces(ap) {
			wholeNamespace[ns] = true
			nrs = append(nrs, namespacedRule{namespace: ns, rule: denyRule(selector{},
				fmt.Sprintf("meshrelay AccessPolicy %s/%s (DenyAll): every endpoint of namespace %s", ap.Namespace, ap.Name, ns))})
		}
	}

	for _, d := range tr.target.Select(ap.Spec.DestinationSelectors) {
		svc := d.Service
		key := tr.key(d)
		if g := globals[key]; g != nil {
			for _, vd := range g.vds {
				parents = append(parents, vd)
			}
		}
		if wholeNamespace[key.Namespace] {
			continue
		}
		if len(svc.Spec.Selector) == 0 {
			tr.diags.add(sdk.Warningf(ap, "spec.destinationSelectors",
				"Service %s has no selector: Cilium selects endpoints by their labels, so the policy does not protect it", key.InCluster()),
				key.Cluster, "")
			continue
		}
		es := selector{MatchLabels: maps.Clone(svc.Spec.Selector)}
		desc := fmt.Sprintf("meshrelay AccessPolicy %s/%s (%s): Service %s/%s", ap.Namespace, ap.Name, action(ap), svc.Namespace, svc.Name)
		r := denyRule(es, desc)
		if !deny {
			r = tr.allowRule(ap, svc, es, clients, desc)
		}
		nrs = append(nrs, namespacedRule{namespace: svc.Namespace, rule: r})
	}
	if len(nrs) == 0 {
		return
	}
	ps := append([]policyv1alpha1.Policy{ap}, dedupePolicies(parents)...)
	tr.emit(policyObject(objectName("access", ap), nrs), ps...)
}

// wholeNamespaces returns the namespaces of the target that a DenyAll
// policy selects whole — by a selector naming namespaces with neither
// names nor labels — and that the target's inputs show, in the order the
// selectors name them.
func (tr *translation) wholeNamespaces(ap *policyv1alpha1.AccessPolicy) []string {
	var out []string
	for _, sel := range ap.Spec.DestinationSelectors {
		if len(sel.Namespaces) == 0 || len(sel.Names) > 0 || len(sel.Labels) > 0 {
			continue
		}
		if !tr.target.Admits(sel) {
			continue
		}
		for _, ns := range sel.Namespaces {
			if !slices.Contains(out, ns) && hasNamespace(tr.target, ns) {
				out = append(out, ns)
			}
		}
	}
	return out
}

// action returns the policy's action, Allow when unset.
func action(ap *policyv1alpha1.AccessPolicy) policyv1alpha1.AccessAction {
	return cmp.Or(ap.Spec.Action, policyv1alpha1.ActionAllow)
}

// policyObject builds the Cilium policy holding the rules: a
// CiliumNetworkPolicy in their namespace, or a
// CiliumClusterwideNetworkPolicy whose rules select the namespace
// explicitly when they span namespaces.
func policyObject(name string, nrs []namespacedRule) *networkPolicy {
	slices.SortStableFunc(nrs, func(a, b namespacedRule) int {
		return cmp.Or(cmp.Compare(a.namespace, b.namespace), cmp.Compare(a.rule.Description, b.rule.Description))
	})
	namespaces := map[string]bool{}
	for _, t := range nrs {
		namespaces[t.namespace] = true
	}
	p := &networkPolicy{}
	p.APIVersion = APIVersion
	p.Name = name
	rules := make([]rule, 0, len(nrs))
	if len(namespaces) == 1 {
		p.Kind = KindNetworkPolicy
		p.Namespace = nrs[0].namespace
		for _, t := range nrs {
			rules = append(rules, t.rule)
		}
	} else {
		p.Kind = KindClusterwidePolicy
		for _, t := range nrs {
			r := t.rule
			labels := maps.Clone(r.EndpointSelector.MatchLabels)
			if labels == nil {
				labels = map[string]string{}
			}
			labels[LabelNamespace] = t.namespace
			r.EndpointSelector.MatchLabels = labels
			rules = append(rules, r)
		}
	}
	if len(rules) == 1 {
		p.Spec = &rules[0]
	} else {
		p.Specs = rules
	}
	return p
}

// denyRule selects the endpoints and admits nothing: an ingress rule with
// no peers and no ports matches no traffic, and turns on default-deny.
// (An empty ingress list would instead leave ingress unenforced, and
// ingressDeny would override the Allow policies that select the same
// endpoints.)
func denyRule(es selector, desc string) rule {
	yes := true
	return rule{
		Description:       desc,
		EndpointSelector:  es,
		Ingress:           []ingressRule{{}},
		EnableDefaultDeny: &defaultDeny{Ingress: &yes},
	}
}

// allowRule admits the clients to the target's Service's target ports for
// the policy's ports, with HTTP rules for its methods and paths.
func (tr *translation) allowRule(ap *policyv1alpha1.AccessPolicy, svc *corev1.Service, es selector, clients []selector, desc string) rule {
	if len(clients) == 0 {
		return denyRule(es, desc)
	}
	http := httpRules(ap.Spec.Methods, ap.Spec.Paths)
	in := ingressRule{FromEndpoints: clients}
	if len(ap.Spec.Ports) > 0 || len(http) > 0 {
		ports := tr.targetPorts(ap, svc, len(http) > 0)
		if len(ports) == 0 {
			return denyRule(es, desc)
		}
		var l7 *l7Rules
		// Istio's sidecars encrypt the traffic between them, which hides HTTP
		// from Cilium's proxy: where Istio runs, its AuthorizationPolicy
		// enforces methods and paths, and Cilium enforces L3 and L4.
		if len(http) > 0 && !tr.target.HasMesh(discoveryapi.MeshIstio) {
			l7 = &l7Rules{HTTP: http}
		}
		for chunk := range slices.Chunk(ports, maxPortsPerRule) {
			in.ToPorts = append(in.ToPorts, portRule{Ports: chunk, Rules: l7})
		}
	}
	return rule{Description: desc, EndpointSelector: es, Ingress: []ingressRule{in}}
}

// targetPorts returns the target's Service's target ports for the policy's
// ports (every port of the Service when the policy lists none), sorted:
// the policy's ports are Service ports, and Cilium matches the port of the
// endpoint. A numeric targetPort is that number; a named one stays a name,
// which Cilium resolves per endpoint from its container ports. Ports that
// do not resolve — not a port of the Service, or a name no container port
// of the Service's workloads has — are left out with a warning. With
// httpOnly, only TCP ports are kept: HTTP rules need TCP.
func (tr *translation) targetPorts(ap *policyv1alpha1.AccessPolicy, svc *corev1.Service, httpOnly bool) []portProtocol {
	cluster := tr.target.Name
	key := sdk.ServiceKey{Cluster: cluster, Namespace: svc.Namespace, Name: svc.Name}
	resolved, problems := tr.target.TargetPorts(svc, ap.Spec.Ports)
	path := "spec.ports"
	if len(ap.Spec.Ports) == 0 {
		path = "spec.destinationSelectors"
	}
	for _, p := range problems {
		// Cilium resolves a container port name itself, once endpoints
		// carry it: an unknown number is no problem here.
		if p.Reason != sdk.PortNumberUnknown {
			tr.diags.add(p.Warning(ap, path), cluster, "")
		}
	}
	var out []portProtocol
	var notTCP []string
	for _, tp := range resolved {
		sp := tp.Service
		proto := string(cmp.Or(sp.Protocol, corev1.ProtocolTCP))
		if httpOnly && proto != protocolTCP {
			notTCP = append(notTCP, fmt.Sprintf("%d/%s", sp.Port, proto))
			continue
		}
		if tp.Name != "" {
			out = append(out, portProtocol{Port: strings.ToLower(tp.Name), Protocol: proto})
			continue
		}
		for _, n := range tp.Numbers {
			out = append(out, portProtocol{Port: strconv.Itoa(int(n)), Protocol: proto})
		}
	}
	if len(notTCP) > 0 {
		path := "spec.methods"
		if len(ap.Spec.Methods) == 0 {
			path = "spec.paths"
		}
		tr.diags.add(sdk.Warningf(ap, path,
			"HTTP rules need TCP: the policy admits nothing on ports %s of Service %s", list(notTCP), key.InCluster()), cluster, "")
	}
	slices.SortFunc(out, func(a, b portProtocol) int {
		return cmp.Or(cmp.Compare(a.Protocol, b.Protocol), cmp.Compare(len(a.Port), len(b.Port)), cmp.Compare(a.Port, b.Port))
	})
	return slices.Compact(out)
}

// httpRules returns Cilium HTTP rules admitting requests whose method is
// one of methods and whose path one of paths; an empty list matches
// anything. Cilium matches both as regular expressions over the whole
// value.
func httpRules(methods []policyv1alpha1.HTTPMethod, paths []string) []httpRule {
	if len(methods) == 0 && len(paths) == 0 {
		return nil
	}
	ms := []string{""}
	if len(methods) > 0 {
		ms = nil
		for _, m := range methods {
			ms = append(ms, string(m))
		}
	}
	ps := []string{""}
	if len(paths) > 0 {
		ps = nil
		for _, p := range paths {
			ps = append(ps, PathRegex(p))
		}
	}
	var out []httpRule
	for _, m := range ms {
		for _, p := range ps {
			out = append(out, httpRule{Method: m, Path: p})
		}
	}
	slices.SortFunc(out, func(a, b httpRule) int { return cmp.Or(cmp.Compare(a.Method, b.Method), cmp.Compare(a.Path, b.Path)) })
	return slices.Compact(out)
}

// PathRegex returns the Cilium path expression for an AccessPolicy path:
// "/x" matches exactly (^/x$), "/x*" any path starting with /x (^/x.*).
func PathRegex(path string) string {
	if prefix, ok := strings.CutSuffix(path, "*"); ok {
		return "^" + regexp.QuoteMeta(prefix) + ".*"
	}
	return "^" + regexp.QuoteMeta(path) + "$"
}

// clientSelectors returns the fromEndpoints selectors matching the
// policy's clients by their Cilium identity labels, sorted and without
// duplicates. Every selector names the namespace and cluster keys, so
// Cilium narrows none of them to the policy's namespace or to the local
// cluster. The selectors name the clusters the policy names or selects by
// label (see sdk.Fleet.ClientClusters), and a client selector whose
// cluster fields admit no cluster adds none; only the warning about
// clusters without Cilium asks whether they run it.
func (tr *translation) clientSelectors(ap *policyv1alpha1.AccessPolicy) []selector {
	seen := map[string]selector{}
	notCilium := map[string]bool{}
	for i, from := range ap.Spec.From {
		at := fmt.Sprintf("spec.from[%d]", i)
		cc := tr.fleet.ClientClusters(&ap.Spec.From[i])
		if d, ok := cc.Warning(ap, at); ok {
			tr.diags.add(d, "", "")
		}
		if cc.None() {
			continue
		}
		var sels []selector
		for _, c := range from.Clusters {
			if !runsCilium(tr.fleet, c) {
				notCilium[c] = true
			}
		}
		switch {
		case len(from.ServiceAccounts) > 0:
			for _, sa := range from.ServiceAccounts {
				if len(from.Namespaces) > 0 && !slices.Contains(from.Namespaces, sa.Namespace) {
					continue
				}
				clusters := cc.Names
				if sa.Cluster != "" {
					if !cc.Admits(sa.Cluster) {
						continue
					}
					if !runsCilium(tr.fleet, sa.Cluster) {
						notCilium[sa.Cluster] = true
					}
					clusters = []string{sa.Cluster}
				}
				sels = append(sels, identitySelector(sa.Namespace, sa.Name, clusters))
			}
		case len(from.Namespaces) > 0:
			for _, ns := range from.Namespaces {
				sels = append(sels, identitySelector(ns, "", cc.Names))
			}
		default:
			sels = append(sels, identitySelector("", "", cc.Names))
		}
		for _, s := range sels {
			seen[selectorKey(s)] = s
		}
		if len(sels) == 0 {
			tr.diags.add(sdk.Warningf(ap, at,
				"matches no client: none of its service accounts is in its namespaces and clusters"), "", "")
		}
	}
	if len(notCilium) > 0 {
		tr.diags.add(sdk.Warningf(ap, "spec.from",
			"Cilium cannot identify clients in clusters without Cilium (%s): they are not admitted to destinations in Cilium clusters",
			list(sortedKeys(notCilium))), "", "")
	}
	out := make([]selector, 0, len(seen))
	for _, k := range sortedKeys(seen) {
		out = append(out, seen[k])
	}
	return out
}

// identitySelector matches endpoints by namespace, service account and
// cluster; an empty namespace or cluster list matches any.
func identitySelector(namespace, serviceAccount string, clusters []string) selector {
	s := selector{MatchLabels: map[string]string{}}
	if namespace != "" {
		s.MatchLabels[LabelNamespace] = namespace
	} else {
		s.MatchExpressions = append(s.MatchExpressions, requirement{Key: LabelNamespace, Operator: operatorExists})
	}
	if serviceAccount != "" {
		s.MatchLabels[LabelServiceAccount] = serviceAccount
	}
	cs := slices.Sorted(slices.Values(clusters))
	cs = slices.Compact(cs)
	switch len(cs) {
	case 0:
		s.MatchExpressions = append(s.MatchExpressions, requirement{Key: LabelCluster, Operator: operatorExists})
	case 1:
		s.MatchLabels[LabelCluster] = cs[0]
	default:
		s.MatchExpressions = append(s.MatchExpressions, requirement{Key: LabelCluster, Operator: operatorIn, Values: cs})
	}
	if len(s.MatchLabels) == 0 {
		s.MatchLabels = nil
	}
	return s
}

// selectorKey returns a canonical string of a selector, for sorting and
// removing duplicates.
func selectorKey(s selector) string {
	b, _ := json.Marshal(s) // A selector always encodes; map keys are sorted.
	return string(b)
}

// dedupePolicies removes repeated policies, keeping the first of each.
func dedupePolicies(ps []policyv1alpha1.Policy) []policyv1alpha1.Policy {
	var out []policyv1alpha1.Policy
	seen := map[string]bool{}
	for _, p := range ps {
		ref := sdk.RefOf(p).String()
		if !seen[ref] {
			seen[ref] = true
			out = append(out, p)
		}
	}
	return out
}
