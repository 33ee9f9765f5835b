package istio

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"

	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/sdk"
	security "istio.io/api/security/v1beta1"
	typev1beta1 "istio.io/api/type/v1beta1"
	clientsecurity "istio.io/client-go/pkg/apis/security/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// sharedAccess is the accessFacts that targets share.
var sharedAccess = sdk.NewShared("istio/access", computeAccess)

// accessFacts are the fleet-wide facts of the AccessPolicies: the clients
// each Allow policy admits, as Istio identities, and the diagnostics about
// the policies as a whole. Computed once per state of the fleet, they are
// shared by the targets, which depend on the facts, not on every cluster's
// trust domain.
type accessFacts struct {
	// Sources are each Allow policy's client selectors translated, nil
	// for one that matches no client.
	Sources map[sdk.PolicyRef][]*clientSource
	Diags   []sdk.Diagnostic
}

// clientSource is the source of an AuthorizationPolicy rule.
type clientSource struct {
	Principals, Namespaces []string
}

func (c *clientSource) proto() *security.Source {
	return &security.Source{Principals: slices.Clone(c.Principals), Namespaces: slices.Clone(c.Namespaces)}
}

// computeAccess computes the fleet's accessFacts.
func computeAccess(f *sdk.Fleet) *accessFacts {
	a := &accessFacts{Sources: map[sdk.PolicyRef][]*clientSource{}}
	aps := f.AccessPolicies()
	if len(aps) == 0 {
		return a
	}
	v := newView(f)
	istio := v.istioClusters()
	for _, ap := range aps {
		s := newStaged(ap)
		if !f.SelectsAny(ap.Spec.DestinationSelectors) {
			s.warnf("", "spec.destinationSelectors", "selects no Service")
		}
		if ap.Spec.Action != policyv1alpha1.ActionDenyAll {
			var sources []*clientSource
			for i := range ap.Spec.From {
				sources = append(sources, source(v, istio, &ap.Spec.From[i], s, fmt.Sprintf("spec.from[%d]", i)))
			}
			a.Sources[sdk.RefOf(ap)] = sources
		}
		a.Diags = append(a.Diags, s.diags...)
	}
	return a
}

// translateAccess turns each AccessPolicy into AuthorizationPolicies for
// the target's Services it protects, and requires mTLS for them with a
// PeerAuthentication per protected Service, shared by the policies that
// protect it. Name conflicts are decided in the target.
func translateAccess(ctx context.Context, t *target, out *outputs) error {
	aps := t.fleet.AccessPolicies()
	if len(aps) == 0 {
		return nil
	}
	facts := sharedAccess.Get(t.fleet)
	out.diagnose(facts.Diags...)
	strict := map[sdk.ServiceKey][]policyv1alpha1.Policy{}
	selectors := map[sdk.ServiceKey]map[string]string{}
	for _, ap := range aps {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("translate access policies: %w", err)
		}
		s := newStaged(ap)
		var dests []destination
		for _, d := range t.cluster.Select(ap.Spec.DestinationSelectors) {
			k := sdk.ServiceKey{Cluster: t.name, Namespace: d.Service.Namespace, Name: d.Service.Name}
			dests = append(dests, destination{key: k, svc: d.Service})
			selectors[k] = d.Service.Spec.Selector
		}
		var protected []sdk.ServiceKey
		if ap.Spec.Action == policyv1alpha1.ActionDenyAll {
			protected = denyAll(t, ap, s, dests)
		} else {
			protected = allow(t, ap, s, dests, facts.Sources[sdk.RefOf(ap)])
		}
		if out.commit(s) {
			for _, k := range protected {
				strict[k] = append(strict[k], ap)
			}
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(strict), sdk.ServiceKey.Compare) {
		pa := &clientsecurity.PeerAuthentication{
			TypeMeta:   peerAuthnType,
			ObjectMeta: metav1.ObjectMeta{Name: objectName(k.Name, "strict"), Namespace: k.Namespace},
		}
		pa.Spec.Selector = &typev1beta1.WorkloadSelector{MatchLabels: maps.Clone(selectors[k])}
		pa.Spec.Mtls = &security.PeerAuthentication_MutualTLS{Mode: security.PeerAuthentication_MutualTLS_STRICT}
		out.putShared(k.Cluster, pa, strict[k])
	}
	return nil
}

// allow stages an ALLOW AuthorizationPolicy per destination, selecting its
// Service's workloads, and returns the destinations it protects. The
// policy's ports are Service ports; Istio matches the port of the
// workload, so each becomes the Service port's target ports (see
// workloadPorts). A destination for which none of them resolves gets a
// policy without rules: it admits nothing, and the workloads stay
// default-deny.
func allow(t *target, ap *policyv1alpha1.AccessPolicy, s *staged, dests []destination, sources []*clientSource) []sdk.ServiceKey {
	var protected []sdk.ServiceKey
	for _, d := range dests {
		if len(d.svc.Spec.Selector) == 0 {
			s.warnf(d.key.Cluster, "spec.destinationSelectors", "service %s has no selector, so its workloads cannot be protected", d.key)
			continue
		}
		authz := &clientsecurity.AuthorizationPolicy{
			TypeMeta:   authorizationType,
			ObjectMeta: metav1.ObjectMeta{Name: objectName(ap.Name, d.key.Name), Namespace: d.key.Namespace},
		}
		authz.Spec.Selector = &typev1beta1.WorkloadSelector{MatchLabels: maps.Clone(d.svc.Spec.Selector)}
		authz.Spec.Action = security.AuthorizationPolicy_ALLOW
		if ports, ok := workloadPorts(t, ap, s, d); ok {
			authz.Spec.Rules = accessRules(ap, ports, sources)
		}
		s.add(d.key.Cluster, authz)
		protected = append(protected, d.key)
	}
	return protected
}

// workloadPorts returns the ports of destination d's workloads that the
// policy's Service ports forward to, as Istio's operation ports: a named
// targetPort resolves per workload, each giving its container port's
// number. Each port that resolves to nothing gets a warning, and ok is
// false when the policy names ports and none of them resolves. A policy
// without ports gives no ports and ok.
func workloadPorts(t *target, ap *policyv1alpha1.AccessPolicy, s *staged, d destination) (ports []string, ok bool) {
	if len(ap.Spec.Ports) == 0 {
		return nil, true
	}
	resolved, problems := t.cluster.TargetPorts(d.svc, ap.Spec.Ports)
	for _, p := range problems {
		s.diags = append(s.diags, p.Warning(ap, "spec.ports"))
	}
	var numbers []int
	for _, tp := range resolved {
		for _, n := range tp.Numbers {
			numbers = append(numbers, int(n))
		}
	}
	slices.Sort(numbers)
	for _, n := range slices.Compact(numbers) {
		ports = append(ports, strconv.Itoa(n))
	}
	return ports, len(ports) > 0
}

// denyAll stages the AuthorizationPolicies that deny every request to the
// target's destinations: one with an empty spec for a namespace whose
// Services are all selected, else one without rules per Service.
func denyAll(t *target, ap *policyv1alpha1.AccessPolicy, s *staged, dests []destination) []sdk.ServiceKey {
	selected := map[string][]destination{}
	for _, d := range dests {
		selected[d.key.Namespace] = append(selected[d.key.Namespace], d)
	}
	var protected []sdk.ServiceKey
	for _, namespace := range slices.Sorted(maps.Keys(selected)) {
		all := 0
		for _, svc := range t.cluster.Services() {
			if svc.Namespace == namespace {
				all++
			}
		}
		ds := selected[namespace]
		if len(ds) == all {
			authz := &clientsecurity.AuthorizationPolicy{
				TypeMeta:   authorizationType,
				ObjectMeta: metav1.ObjectMeta{Name: objectName(ap.Name), Namespace: namespace},
			}
			s.add(t.name, authz)
		}
		for _, d := range ds {
			if len(d.svc.Spec.Selector) == 0 {
				continue
			}
			protected = append(protected, d.key)
			if len(ds) == all {
				continue
			}
			authz := &clientsecurity.AuthorizationPolicy{
				TypeMeta:   authorizationType,
				ObjectMeta: metav1.ObjectMeta{Name: objectName(ap.Name, d.key.Name), Namespace: d.key.Namespace},
			}
			authz.Spec.Selector = &typev1beta1.WorkloadSelector{MatchLabels: maps.Clone(d.svc.Spec.Selector)}
			s.add(t.name, authz)
		}
	}
	return protected
}

// accessRules builds the rules of an Allow policy from its translated
// client selectors and the workload ports its Service ports resolve to:
// one rule per selector that matches clients, each with the same
// operation.
func accessRules(ap *policyv1alpha1.AccessPolicy, ports []string, sources []*clientSource) []*security.Rule {
	var to []*security.Rule_To
	if op := operation(ap, ports); op != nil {
		to = []*security.Rule_To{{Operation: op}}
	}
	var rules []*security.Rule
	for _, src := range sources {
		if src == nil {
			continue
		}
		rules = append(rules, &security.Rule{From: []*security.Rule_From{{Source: src.proto()}}, To: to})
	}
	return rules
}

func operation(ap *policyv1alpha1.AccessPolicy, ports []string) *security.Operation {
	if len(ports) == 0 && len(ap.Spec.Methods) == 0 && len(ap.Spec.Paths) == 0 {
		return nil
	}
	op := &security.Operation{Paths: slices.Clone(ap.Spec.Paths), Ports: slices.Clone(ports)}
	for _, m := range ap.Spec.Methods {
		op.Methods = append(op.Methods, string(m))
	}
	return op
}

// source translates a client selector to the identities Istio checks:
// principals <trust domain>/ns/<namespace>/sa/<name>, with each client
// cluster's own trust domain. The selector's cluster fields are resolved
// over the fleet (see sdk.Fleet.ClientClusters): a clusterSelector that
// matches no cluster, with no cluster named beside it, matches no client.
// It returns nil when the selector can match no client.
func source(v *view, istio []string, f *policyv1alpha1.ClientSelector, s *staged, path string) *clientSource {
	if len(f.ServiceAccounts) == 0 && !f.RestrictsClusters() {
		return &clientSource{Namespaces: slices.Clone(f.Namespaces)}
	}
	cc := v.fleet.ClientClusters(f)
	if d, ok := cc.Warning(s.policy, path); ok {
		s.diags = append(s.diags, d)
	}
	clusters := map[string]bool{}
	for i, c := range f.Clusters {
		if !v.isIstio(c) {
			s.warnf(c, fmt.Sprintf("%s.clusters[%d]", path, i), "cluster %q does not run Istio; its clients have no Istio identity", c)
		}
	}
	for _, c := range cc.Names {
		if v.isIstio(c) {
			clusters[c] = true
		}
	}
	inScope := func(cluster string) bool { return cc.Any || clusters[cluster] }
	var principals []string
	if len(f.ServiceAccounts) > 0 {
		for i, sa := range f.ServiceAccounts {
			if len(f.Namespaces) > 0 && !slices.Contains(f.Namespaces, sa.Namespace) {
				s.warnf("", fmt.Sprintf("%s.serviceAccounts[%d].namespace", path, i), "namespace %q is not among the selector's namespaces, so this service account never matches", sa.Namespace)
				continue
			}
			if sa.Cluster != "" && !v.isIstio(sa.Cluster) {
				s.warnf(sa.Cluster, fmt.Sprintf("%s.serviceAccounts[%d].cluster", path, i), "cluster %q does not run Istio; its clients have no Istio identity", sa.Cluster)
				continue
			}
			for _, c := range istio {
				if (sa.Cluster == "" || sa.Cluster == c) && inScope(c) {
					principals = append(principals, fmt.Sprintf("%s/ns/%s/sa/%s", v.trustDomain(c), sa.Namespace, sa.Name))
				}
			}
		}
	} else {
		for _, c := range istio {
			if !clusters[c] {
				continue
			}
			if len(f.Namespaces) == 0 {
				principals = append(principals, v.trustDomain(c)+"/*")
			}
			for _, ns := range f.Namespaces {
				principals = append(principals, fmt.Sprintf("%s/ns/%s/sa/*", v.trustDomain(c), ns))
			}
		}
	}
	warnSharedTrustDomains(v, istio, f, cc, s, path)
	slices.Sort(principals)
	principals = slices.Compact(principals)
	if len(principals) == 0 {
		s.warnf("", path, "matches no client in a cluster that runs Istio")
		return nil
	}
	return &clientSource{Principals: principals}
}

// warnSharedTrustDomains warns when the selector names or selects
// clusters whose clients Istio cannot tell apart from those of other
// clusters, because they share a trust domain.
func warnSharedTrustDomains(v *view, istio []string, f *policyv1alpha1.ClientSelector, cc sdk.ClientClusters, s *staged, path string) {
	named := map[string]bool{}
	for _, c := range cc.Names {
		named[c] = true
	}
	for _, sa := range f.ServiceAccounts {
		if sa.Cluster != "" {
			named[sa.Cluster] = true
		}
	}
	if len(named) == 0 {
		return
	}
	for _, c := range istio {
		if named[c] {
			continue
		}
		for _, other := range slices.Sorted(maps.Keys(named)) {
			if v.isIstio(other) && v.trustDomain(other) == v.trustDomain(c) {
				s.warnf("", path, "clusters %q and %q share the trust domain %q, so Istio admits clients of %q too", other, c, v.trustDomain(c), c)
				return
			}
		}
	}
}
