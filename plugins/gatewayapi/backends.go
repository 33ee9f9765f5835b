package gatewayapi

import (
	"fmt"
	"slices"

	discoveryapi "github.com/meshrelay/meshrelay/api/discovery/v1alpha1"
	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/sdk"
	corev1 "k8s.io/api/core/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// weightScale multiplies a destination's weight (a percentage) so that
// the Services of a VirtualDestination can share it in whole numbers.
const weightScale = 1000

// backendRefs returns the rule's weighted backends for a route of svc on
// port: its route's destinations, or svc itself at port without one. A
// destination that cannot be expressed leaves the rule out.
func (tr *translation) backendRefs(r ruleRef, svc *corev1.Service, port int32) ([]gatewayv1.BackendRef, bool) {
	rule := r.rule()
	if len(rule.Route) == 0 {
		return []gatewayv1.BackendRef{serviceRef(svc.Name, port, nil)}, true
	}
	equal := true
	for _, d := range rule.Route {
		equal = equal && d.Weight == 0
	}
	var out []gatewayv1.BackendRef
	for j, d := range rule.Route {
		weight := d.Weight
		if equal {
			weight = 1
		}
		refs, ok := tr.resolve(r, fmt.Sprintf(".route[%d]", j), d.Destination, weight*weightScale, svc, port)
		if !ok {
			return nil, false
		}
		for _, ref := range refs {
			i := slices.IndexFunc(out, func(o gatewayv1.BackendRef) bool { return o.BackendObjectReference == ref.BackendObjectReference })
			if i >= 0 {
				*out[i].Weight += *ref.Weight
				continue
			}
			out = append(out, ref)
		}
	}
	if len(out) == 1 {
		out[0].Weight = nil
	}
	return out, true
}

// resolve returns the Services a destination reaches from the target, in
// the route's namespace, sharing weight; false, with a warning naming the
// field, when it cannot be expressed.
func (tr *translation) resolve(r ruleRef, field string, d policyv1alpha1.Destination, weight int32, svc *corev1.Service, port int32) ([]gatewayv1.BackendRef, bool) {
	if len(d.Subset) > 0 {
		tr.warn(r.policy, r.path(field+".subset"), "Gateway API routes reach whole Services, not subsets: the rule is left out")
		return nil, false
	}
	switch {
	case d.Service != nil:
		ref := d.Service
		if ref.Namespace != svc.Namespace {
			tr.warn(r.policy, r.path(field+".service.namespace"), "a route to a Service of another namespace needs a ReferenceGrant, which meshrelay does not write: the rule is left out")
			return nil, false
		}
		name, target, ok := tr.reach(r, field+".service", ref.Cluster, ref.Namespace, ref.Name, "the rule is left out")
		if !ok {
			return nil, false
		}
		p, ok := servicePort(target, ref.Port, port)
		if !ok {
			tr.warn(r.policy, r.path(field+".service.port"), "Service %s/%s has no port %d and several others: name the port", ref.Namespace, name, port)
			return nil, false
		}
		return []gatewayv1.BackendRef{serviceRef(name, p, ptr(weight))}, true
	case d.VirtualDestination != nil:
		return tr.virtualBackends(r, field+".virtualDestination", d.VirtualDestination, weight, svc, port)
	}
	return nil, false
}

// reach returns the name and the discovered Service by which the target
// reaches a Service of cluster: the Service itself in the target, or
// Linkerd multicluster's mirror "<name>-<cluster>" of a linked cluster.
// What is left out when it cannot is the consequence's to say.
func (tr *translation) reach(r ruleRef, field, cluster, namespace, name, consequence string) (string, *corev1.Service, bool) {
	if cluster == tr.target.Name {
		s, ok := tr.target.Service(namespace, name)
		if !ok {
			tr.warn(r.policy, r.path(field), "Service %s/%s is not in cluster %q: %s", namespace, name, cluster, consequence)
		}
		return name, s, ok
	}
	if !tr.linked(cluster) {
		tr.warn(r.policy, r.path(field), "cluster %q reaches Service %s/%s of cluster %q only through Linkerd multicluster mirrored Services, and no Link to %q was discovered there: %s",
			tr.target.Name, namespace, name, cluster, cluster, consequence)
		return "", nil, false
	}
	mirror := name + "-" + cluster
	s, ok := tr.target.Service(namespace, mirror)
	if !ok {
		tr.warn(r.policy, r.path(field), "Service %s/%s of cluster %q is not mirrored in cluster %q as %s (export it with the label mirror.linkerd.io/exported=true): %s",
			namespace, name, cluster, tr.target.Name, mirror, consequence)
	}
	return mirror, s, ok
}

// linked reports whether the target runs Linkerd multicluster with a Link
// to cluster.
func (tr *translation) linked(cluster string) bool {
	m, ok := meshOf(tr.target, discoveryapi.MeshLinkerd)
	return ok && slices.Contains(m.LinkedClusters, cluster)
}

// virtualBackends returns the backing Services of a VirtualDestination as
// the target reaches them, sharing weight equally. Failover is not
// expressible: every reachable backend takes its share.
func (tr *translation) virtualBackends(r ruleRef, field string, ref *policyv1alpha1.VirtualDestinationRef, weight int32, svc *corev1.Service, port int32) ([]gatewayv1.BackendRef, bool) {
	ns := ref.Namespace
	if ns == "" {
		ns = r.policy.Namespace
	}
	vd, ok := tr.fleet.VirtualDestination(ns, ref.Name)
	if !ok {
		tr.warn(r.policy, r.path(field), "VirtualDestination %s/%s does not exist: the rule is left out", ns, ref.Name)
		return nil, false
	}
	vp, ok := virtualPort(vd, ref.Port, port)
	if !ok {
		tr.warn(r.policy, r.path(field+".port"), "VirtualDestination %s/%s has no port %d and several others: name the port", ns, ref.Name, port)
		return nil, false
	}
	target := vp.TargetPort
	if target == 0 {
		target = vp.Number
	}
	if vd.Spec.Failover != nil {
		tr.warn(r.policy, r.path(field), "a route splits traffic by weight and cannot fail over: VirtualDestination %s/%s's backends take equal shares", ns, ref.Name)
	}
	var keys []sdk.ServiceKey
	for _, b := range vd.Spec.Services {
		keys = append(keys, sdk.ServiceKey{Cluster: b.Cluster, Namespace: b.Namespace, Name: b.Name})
	}
	if len(vd.Spec.DestinationSelectors) > 0 {
		for _, d := range tr.fleet.Select(vd.Spec.DestinationSelectors) {
			keys = append(keys, d.Key())
		}
	}
	slices.SortFunc(keys, sdk.ServiceKey.Compare)
	keys = slices.Compact(keys)
	var names []string
	for _, k := range keys {
		if k.Namespace != svc.Namespace {
			tr.warn(r.policy, r.path(field), "backend %s of VirtualDestination %s/%s is in another namespace, which a route reaches only with a ReferenceGrant: it is left out", k.InCluster(), ns, ref.Name)
			continue
		}
		name, _, ok := tr.reach(r, field, k.Cluster, k.Namespace, k.Name, "that backend of VirtualDestination "+ns+"/"+ref.Name+" is left out")
		if ok {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		tr.warn(r.policy, r.path(field), "no backend of VirtualDestination %s/%s is reachable from cluster %q: the rule is left out", ns, ref.Name, tr.target.Name)
		return nil, false
	}
	out := make([]gatewayv1.BackendRef, 0, len(names))
	for _, n := range names {
		out = append(out, serviceRef(n, target, ptr(weight/int32(len(names)))))
	}
	return out, true
}

// servicePort returns the port of s a destination port means: the port
// itself, else the arrival port when s has it, else s's only port.
func servicePort(s *corev1.Service, want, arrival int32) (int32, bool) {
	if want != 0 {
		return want, true
	}
	for _, p := range s.Spec.Ports {
		if p.Port == arrival {
			return arrival, true
		}
	}
	if len(s.Spec.Ports) == 1 {
		return s.Spec.Ports[0].Port, true
	}
	return 0, false
}

// virtualPort returns the port of a VirtualDestination a reference means.
func virtualPort(vd *policyv1alpha1.VirtualDestination, want, arrival int32) (policyv1alpha1.VirtualPort, bool) {
	for _, n := range []int32{want, arrival} {
		if n == 0 {
			continue
		}
		for _, p := range vd.Spec.Ports {
			if p.Number == n {
				return p, true
			}
		}
		if n == want {
			return policyv1alpha1.VirtualPort{}, false
		}
	}
	if len(vd.Spec.Ports) == 1 {
		return vd.Spec.Ports[0], true
	}
	return policyv1alpha1.VirtualPort{}, false
}

// serviceRef is a backendRef to a Service of the route's namespace.
func serviceRef(name string, port int32, weight *int32) gatewayv1.BackendRef {
	return gatewayv1.BackendRef{
		BackendObjectReference: gatewayv1.BackendObjectReference{
			Group: ptr(gatewayv1.Group("")), Kind: ptr(gatewayv1.Kind("Service")),
			Name: gatewayv1.ObjectName(name), Port: ptr(port),
		},
		Weight: weight,
	}
}
