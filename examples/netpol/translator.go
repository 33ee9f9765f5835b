package main

import (
	"context"
	"fmt"
	"maps"
	"slices"

	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/sdk"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Backend is the backend this translator serves.
const Backend = "netpol"

// Translator maps AccessPolicies to one NetworkPolicy per protected Service.
// It computes one target cluster at a time, so that after a change the SDK
// computes again only the clusters the change concerns.
type Translator struct{}

var (
	_ sdk.Translator      = (*Translator)(nil)
	_ sdk.PolicyValidator = (*Translator)(nil)
)

// Describe says what the translator is.
func (t *Translator) Describe() sdk.Description {
	return sdk.Description{
		Name:        "netpol", // the plugin is meshrelay-plugin-netpol
		Version:     "0.1.0",
		Backends:    []string{Backend}, // what Emit writes to
		OutputKinds: []string{"networking.k8s.io/NetworkPolicy"},
	}
}

// ValidatePolicy refuses what a NetworkPolicy cannot enforce: HTTP methods
// and paths.
func (t *Translator) ValidatePolicy(p policyv1alpha1.Policy) []sdk.Diagnostic {
	ap, ok := p.(*policyv1alpha1.AccessPolicy)
	if !ok {
		return nil
	}
	var ds []sdk.Diagnostic
	if len(ap.Spec.Methods) > 0 {
		ds = append(ds, sdk.Errorf(ap, "spec.methods", "a NetworkPolicy cannot restrict HTTP methods"))
	}
	if len(ap.Spec.Paths) > 0 {
		ds = append(ds, sdk.Errorf(ap, "spec.paths", "a NetworkPolicy cannot restrict HTTP paths"))
	}
	for i, from := range ap.Spec.From {
		if len(from.ServiceAccounts) > 0 {
			ds = append(ds, sdk.Warningf(ap, fmt.Sprintf("spec.from[%d].serviceAccounts", i),
				"a NetworkPolicy cannot match service accounts; every pod in their namespaces is admitted"))
		}
	}
	return ds
}

// TranslateTarget emits, for every Service of the target cluster that some
// AccessPolicy selects, a NetworkPolicy that admits only what the Allow
// policies selecting it admit. It reads the policies and the target's own
// Services, nothing of other clusters: a change elsewhere does not compute
// this target again.
func (t *Translator) TranslateTarget(ctx context.Context, req *sdk.Request, resp *sdk.Response) error {
	for _, p := range protectedServices(req) {
		if len(p.svc.Spec.Selector) == 0 {
			for _, ap := range p.policies {
				resp.Diagnose(sdk.Warningf(ap, "spec.destinationSelectors", "Service %s/%s has no pod selector; no NetworkPolicy protects it", p.svc.Namespace, p.svc.Name))
			}
			continue
		}
		np, parents := networkPolicy(req.Target, p)
		resp.Emit(np, parents...)
	}
	return nil
}

// protected is a Service of the target and the AccessPolicies selecting it.
type protected struct {
	svc      *corev1.Service
	policies []*policyv1alpha1.AccessPolicy
}

// protectedServices returns the target's Services that AccessPolicies
// select, each with the policies selecting it.
func protectedServices(req *sdk.Request) []*protected {
	var out []*protected
	index := map[[2]string]*protected{}
	for _, ap := range req.Fleet.AccessPolicies() {
		for _, dst := range req.Target.Select(ap.Spec.DestinationSelectors) {
			k := [2]string{dst.Service.Namespace, dst.Service.Name}
			p, ok := index[k]
			if !ok {
				p = &protected{svc: dst.Service}
				index[k] = p
				out = append(out, p)
			}
			p.policies = append(p.policies, ap)
		}
	}
	return out
}

// networkPolicy returns a new NetworkPolicy protecting the Service of
// cluster, and the policies it derives from.
func networkPolicy(cluster *sdk.Cluster, p *protected) (*networkingv1.NetworkPolicy, []policyv1alpha1.Policy) {
	np := &networkingv1.NetworkPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: "meshrelay-" + p.svc.Name, Namespace: p.svc.Namespace},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: maps.Clone(p.svc.Spec.Selector)},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress:     []networkingv1.NetworkPolicyIngressRule{},
		},
	}
	parents := make([]policyv1alpha1.Policy, 0, len(p.policies))
	for _, ap := range p.policies {
		parents = append(parents, ap)
		if ap.Spec.Action == policyv1alpha1.ActionDenyAll {
			continue
		}
		if rule, ok := ingressRule(ap, cluster, p.svc); ok {
			np.Spec.Ingress = append(np.Spec.Ingress, rule)
		}
	}
	return np, parents
}

// ingressRule admits the clients of one Allow policy that run in cluster:
// those of the client selectors whose clusters and clusterSelector admit
// it. Clients in other clusters arrive through the mesh's gateways, which
// a NetworkPolicy cannot tell apart; they are not admitted here.
func ingressRule(ap *policyv1alpha1.AccessPolicy, cluster *sdk.Cluster, svc *corev1.Service) (networkingv1.NetworkPolicyIngressRule, bool) {
	var rule networkingv1.NetworkPolicyIngressRule
	var namespaces []string
	for i := range ap.Spec.From {
		from := &ap.Spec.From[i]
		if !cluster.AdmitsClients(from) {
			continue
		}
		ns := slices.Clone(from.Namespaces)
		for _, sa := range from.ServiceAccounts {
			if sa.Cluster == "" || sa.Cluster == cluster.Name {
				ns = append(ns, sa.Namespace)
			}
		}
		namespaces = append(namespaces, ns...)
	}
	slices.Sort(namespaces)
	namespaces = slices.Compact(namespaces)
	if len(namespaces) == 0 {
		return rule, false
	}
	rule.From = []networkingv1.NetworkPolicyPeer{{
		NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
			Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpIn, Values: namespaces,
		}}},
	}}
	for _, port := range ap.Spec.Ports {
		rule.Ports = append(rule.Ports, networkingv1.NetworkPolicyPort{Port: targetPort(svc, port)})
	}
	return rule, true
}

// targetPort maps a Service port to the pods' port, which is what a
// NetworkPolicy matches.
func targetPort(svc *corev1.Service, port int32) *intstr.IntOrString {
	for _, p := range svc.Spec.Ports {
		if p.Port == port && (p.TargetPort.IntVal != 0 || p.TargetPort.StrVal != "") {
			tp := p.TargetPort
			return &tp
		}
	}
	v := intstr.FromInt32(port)
	return &v
}
