package istio

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"

	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	security "istio.io/api/security/v1beta1"
	typev1beta1 "istio.io/api/type/v1beta1"
	clientsecurity "istio.io/client-go/pkg/apis/security/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// translateAccess turns each AccessPolicy into AuthorizationPolicies in the
// clusters of the destinations it protects, and requires mTLS there with a
// PeerAuthentication per protected Service, shared by the policies that
// protect it.
func translateAccess(ctx context.Context, v *view, out *outputs) error {
	strict := map[serviceKey][]policyv1alpha1.Policy{}
	for _, ap := range v.fleet.AccessPolicies() {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("translate access policies: %w", err)
		}
		s := newStaged(ap)
		if len(v.fleet.Select(ap.Spec.DestinationSelectors)) == 0 {
			s.warnf("", "spec.destinationSelectors", "selects no Service")
		}
		dests := selectIstio(v, ap.Spec.DestinationSelectors)
		var protected []serviceKey
		if ap.Spec.Action == policyv1alpha1.ActionDenyAll {
			protected = denyAll(v, ap, s, dests)
		} else {
			protected = allow(v, ap, s, dests)
		}
		if out.commit(s) {
			for _, k := range protected {
				strict[k] = append(strict[k], ap)
			}
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(strict), serviceKey.compare) {
		svc, _ := v.service(k)
		pa := &clientsecurity.PeerAuthentication{
			TypeMeta:   peerAuthnType,
			ObjectMeta: metav1.ObjectMeta{Name: objectName(k.Name, "strict"), Namespace: k.Namespace},
		}
		pa.Spec.Selector = &typev1beta1.WorkloadSelector{MatchLabels: maps.Clone(svc.Spec.Selector)}
		pa.Spec.Mtls = &security.PeerAuthentication_MutualTLS{Mode: security.PeerAuthentication_MutualTLS_STRICT}
		out.putShared(k.Cluster, pa, strict[k])
	}
	return nil
}

// allow stages an ALLOW AuthorizationPolicy per destination, selecting its
// Service's workloads, and returns the destinations it protects.
func allow(v *view, ap *policyv1alpha1.AccessPolicy, s *staged, dests []serviceKey) []serviceKey {
	rules := accessRules(v, ap, s)
	var protected []serviceKey
	for _, k := range dests {
		svc, _ := v.service(k)
		if len(svc.Spec.Selector) == 0 {
			s.warnf(k.Cluster, "spec.destinationSelectors", "service %s has no selector, so its workloads cannot be protected", k)
			continue
		}
		authz := &clientsecurity.AuthorizationPolicy{
			TypeMeta:   authorizationType,
			ObjectMeta: metav1.ObjectMeta{Name: objectName(ap.Name, k.Name), Namespace: k.Namespace},
		}
		authz.Spec.Selector = &typev1beta1.WorkloadSelector{MatchLabels: maps.Clone(svc.Spec.Selector)}
		authz.Spec.Action = security.AuthorizationPolicy_ALLOW
		authz.Spec.Rules = rules
		s.add(k.Cluster, authz)
		protected = append(protected, k)
	}
	return protected
}

// denyAll stages the AuthorizationPolicies that deny every request to the
// destinations: one with an empty spec for a namespace whose Services are
// all selected, else one without rules per Service.
func denyAll(v *view, ap *policyv1alpha1.AccessPolicy, s *staged, dests []serviceKey) []serviceKey {
	type clusterNamespace struct{ Cluster, Namespace string }
	selected := map[clusterNamespace][]serviceKey{}
	for _, k := range dests {
		cn := clusterNamespace{k.Cluster, k.Namespace}
		selected[cn] = append(selected[cn], k)
	}
	var protected []serviceKey
	for _, cn := range slices.SortedFunc(maps.Keys(selected), func(a, b clusterNamespace) int {
		return cmp.Or(cmp.Compare(a.Cluster, b.Cluster), cmp.Compare(a.Namespace, b.Namespace))
	}) {
		c, _ := v.fleet.Cluster(cn.Cluster)
		all := 0
		for _, svc := range c.Services() {
			if svc.Namespace == cn.Namespace {
				all++
			}
		}
		keys := selected[cn]
		if len(keys) == all {
			authz := &clientsecurity.AuthorizationPolicy{
				TypeMeta:   authorizationType,
				ObjectMeta: metav1.ObjectMeta{Name: objectName(ap.Name), Namespace: cn.Namespace},
			}
			s.add(cn.Cluster, authz)
		}
		for _, k := range keys {
			svc, _ := v.service(k)
			if len(svc.Spec.Selector) == 0 {
				continue
			}
			protected = append(protected, k)
			if len(keys) == all {
				continue
			}
			authz := &clientsecurity.AuthorizationPolicy{
				TypeMeta:   authorizationType,
				ObjectMeta: metav1.ObjectMeta{Name: objectName(ap.Name, k.Name), Namespace: k.Namespace},
			}
			authz.Spec.Selector = &typev1beta1.WorkloadSelector{MatchLabels: maps.Clone(svc.Spec.Selector)}
			s.add(k.Cluster, authz)
		}
	}
	return protected
}

// accessRules translates the clients and operations of an Allow policy:
// one rule per client selector, each with the same operation.
func accessRules(v *view, ap *policyv1alpha1.AccessPolicy, s *staged) []*security.Rule {
	var to []*security.Rule_To
	if op := operation(ap); op != nil {
		to = []*security.Rule_To{{Operation: op}}
	}
	var rules []*security.Rule
	for i := range ap.Spec.From {
		src := source(v, &ap.Spec.From[i], s, fmt.Sprintf("spec.from[%d]", i))
		if src == nil {
			continue
		}
		rules = append(rules, &security.Rule{From: []*security.Rule_From{{Source: src}}, To: to})
	}
	return rules
}

func operation(ap *policyv1alpha1.AccessPolicy) *security.Operation {
	if len(ap.Spec.Ports) == 0 && len(ap.Spec.Methods) == 0 && len(ap.Spec.Paths) == 0 {
		return nil
	}
	op := &security.Operation{Paths: slices.Clone(ap.Spec.Paths)}
	for _, p := range ap.Spec.Ports {
		op.Ports = append(op.Ports, strconv.Itoa(int(p)))
	}
	for _, m := range ap.Spec.Methods {
		op.Methods = append(op.Methods, string(m))
	}
	return op
}

// source translates a client selector to the identities Istio checks:
// principals <trust domain>/ns/<namespace>/sa/<name>, with each client
// cluster's own trust domain. It returns nil when the selector can match
// no client.
func source(v *view, f *policyv1alpha1.ClientSelector, s *staged, path string) *security.Source {
	if len(f.ServiceAccounts) == 0 && len(f.Clusters) == 0 {
		return &security.Source{Namespaces: slices.Clone(f.Namespaces)}
	}
	clusters := map[string]bool{}
	for i, c := range f.Clusters {
		if !v.isIstio(c) {
			s.warnf(c, fmt.Sprintf("%s.clusters[%d]", path, i), "cluster %q does not run Istio; its clients have no Istio identity", c)
			continue
		}
		clusters[c] = true
	}
	inScope := func(cluster string) bool { return len(f.Clusters) == 0 || clusters[cluster] }
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
			for _, c := range v.istio {
				if (sa.Cluster == "" || sa.Cluster == c.Name) && inScope(c.Name) {
					principals = append(principals, fmt.Sprintf("%s/ns/%s/sa/%s", v.trustDomain(c.Name), sa.Namespace, sa.Name))
				}
			}
		}
	} else {
		for _, c := range v.istio {
			if !clusters[c.Name] {
				continue
			}
			if len(f.Namespaces) == 0 {
				principals = append(principals, v.trustDomain(c.Name)+"/*")
			}
			for _, ns := range f.Namespaces {
				principals = append(principals, fmt.Sprintf("%s/ns/%s/sa/*", v.trustDomain(c.Name), ns))
			}
		}
	}
	warnSharedTrustDomains(v, f, s, path)
	slices.Sort(principals)
	principals = slices.Compact(principals)
	if len(principals) == 0 {
		s.warnf("", path, "matches no client in a cluster that runs Istio")
		return nil
	}
	return &security.Source{Principals: principals}
}

// warnSharedTrustDomains warns when the selector names clusters whose
// clients Istio cannot tell apart from those of other clusters, because
// they share a trust domain.
func warnSharedTrustDomains(v *view, f *policyv1alpha1.ClientSelector, s *staged, path string) {
	named := map[string]bool{}
	for _, c := range f.Clusters {
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
	for _, c := range v.istio {
		if named[c.Name] {
			continue
		}
		for _, other := range slices.Sorted(maps.Keys(named)) {
			if v.isIstio(other) && v.trustDomain(other) == v.trustDomain(c.Name) {
				s.warnf("", path, "clusters %q and %q share the trust domain %q, so Istio admits clients of %q too", other, c.Name, v.trustDomain(c.Name), c.Name)
				return
			}
		}
	}
}
