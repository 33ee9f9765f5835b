package cilium

import (
	"fmt"
	"slices"
	"strings"

	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/sdk"
	corev1 "k8s.io/api/core/v1"
)

// globalService is a Service in a Cilium cluster that backs
// VirtualDestinations, made a ClusterMesh global service.
type globalService struct {
	key      serviceKey
	vds      []*policyv1alpha1.VirtualDestination
	affinity string
}

// globalServices emits a patch for every Service backing a
// VirtualDestination in a cluster with Cilium, marking it global with the
// affinity that the failover asks for, and returns them by Service.
//
// Cilium joins the endpoints of Services with the same namespace and name
// in every cluster of the ClusterMesh whose Service is global; affinity
// says whether a cluster prefers its own endpoints (local), the other
// clusters' (remote) or neither (none).
func (tr *translation) globalServices() map[serviceKey]*globalService {
	out := map[serviceKey]*globalService{}
	for _, vd := range tr.fleet.VirtualDestinations() {
		backends := tr.backends(vd)
		if len(backends) == 0 {
			continue
		}
		tr.diagnoseGlobal(vd, backends)
		clusters := map[string]bool{}
		for _, b := range backends {
			clusters[b.key.Cluster] = true
		}
		for _, b := range backends {
			aff := affinity(vd.Spec.Failover, b.key.Cluster, clusters)
			g := out[b.key]
			if g == nil {
				g = &globalService{key: b.key, affinity: aff}
				out[b.key] = g
			} else if g.affinity != aff {
				first := g.vds[0]
				tr.diagnose(sdk.Warningf(vd, "spec.failover",
					"Service %s also backs VirtualDestination %s/%s, whose failover gives it affinity %q: it keeps that affinity, not %q",
					b.key, first.Namespace, first.Name, g.affinity, aff), b.key.Cluster, "")
			}
			g.vds = append(g.vds, vd)
		}
	}
	keys := make([]serviceKey, 0, len(out))
	for k := range out {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, serviceKey.compare)
	for _, k := range keys {
		g := out[k]
		patch := &servicePatch{Metadata: patchMeta{
			Name:      k.Name,
			Namespace: k.Namespace,
			Annotations: map[string]string{
				AnnotationGlobal:   "true",
				AnnotationAffinity: g.affinity,
				PatchAnnotation:    "true",
			},
		}}
		patch.APIVersion, patch.Kind = serviceAPIVersion, serviceKind
		parents := make([]policyv1alpha1.Policy, 0, len(g.vds))
		for _, vd := range g.vds {
			parents = append(parents, vd)
		}
		tr.emit(k.Cluster, patch, parents...)
	}
	return out
}

// backend is a Service backing a VirtualDestination.
type backend struct {
	key serviceKey
	svc *corev1.Service
}

// backends returns the VirtualDestination's backing Services in clusters
// with Cilium, sorted and without duplicates.
func (tr *translation) backends(vd *policyv1alpha1.VirtualDestination) []backend {
	seen := map[serviceKey]bool{}
	var out []backend
	add := func(k serviceKey, svc *corev1.Service) {
		if !seen[k] {
			seen[k] = true
			out = append(out, backend{key: k, svc: svc})
		}
	}
	for i, s := range vd.Spec.Services {
		c := tr.cilium[s.Cluster]
		if c == nil {
			continue
		}
		k := serviceKey{Cluster: s.Cluster, Namespace: s.Namespace, Name: s.Name}
		svc, ok := c.Service(s.Namespace, s.Name)
		if !ok {
			tr.diagnose(sdk.Warningf(vd, fmt.Sprintf("spec.services[%d]", i),
				"Service %s does not exist: it is not made a global service", k), s.Cluster, "")
			continue
		}
		add(k, svc)
	}
	for _, d := range tr.ciliumDestinations(vd.Spec.DestinationSelectors) {
		add(serviceKey{Cluster: d.Cluster.Name, Namespace: d.Service.Namespace, Name: d.Service.Name}, d.Service)
	}
	slices.SortFunc(out, func(a, b backend) int { return a.key.compare(b.key) })
	return out
}

// affinity returns the global service affinity of the backend in cluster:
// local for Locality failover; for Priority failover, local in the most
// preferred of the backends' clusters and remote in the others (none
// when the priority names none of them); none without failover.
func affinity(f *policyv1alpha1.Failover, cluster string, clusters map[string]bool) string {
	if f == nil {
		return AffinityNone
	}
	switch f.Mode {
	case policyv1alpha1.FailoverLocality:
		return AffinityLocal
	case policyv1alpha1.FailoverPriority:
		for _, c := range f.Priority {
			if !clusters[c] {
				continue
			}
			if c == cluster {
				return AffinityLocal
			}
			return AffinityRemote
		}
	}
	return AffinityNone
}

// diagnoseGlobal reports what of the VirtualDestination Cilium's global
// services do not express.
func (tr *translation) diagnoseGlobal(vd *policyv1alpha1.VirtualDestination, backends []backend) {
	names := map[string]bool{}
	clusters := map[string]bool{}
	for _, b := range backends {
		names[b.key.Namespace+"/"+b.key.Name] = true
		clusters[b.key.Cluster] = true
	}
	services := sortedKeys(names)
	if len(services) > 1 {
		tr.diagnose(sdk.Warningf(vd, "spec.services",
			"Cilium joins only Services of the same namespace and name across clusters: %s form separate global services",
			list(services)), "", "")
	}
	for _, s := range services {
		ns, name, _ := strings.Cut(s, "/")
		var without []string
		for _, c := range sortedKeys(tr.cilium) {
			if !slices.ContainsFunc(backends, func(b backend) bool {
				return b.key == serviceKey{Cluster: c, Namespace: ns, Name: name}
			}) {
				without = append(without, c)
			}
		}
		if len(without) > 0 {
			tr.diagnose(sdk.Warningf(vd, "spec.services",
				"Service %s is global only where it backs the VirtualDestination: clients in %s do not reach its other clusters' endpoints", s, list(without)), "",
				"Cilium serves a global service to a cluster's clients through a Service of the same namespace and name in that cluster, "+
					"annotated service.cilium.io/global; meshrelay patches only the backing Services.")
		}
	}
	hosts := make([]string, 0, len(services))
	for _, s := range services {
		ns, name, _ := strings.Cut(s, "/")
		hosts = append(hosts, name+"."+ns+".svc")
	}
	tr.diagnose(sdk.Warningf(vd, "spec.hostname",
		"Cilium has no global hostnames: clients reach %s through %s", vd.Spec.Hostname, list(hosts)), "",
		"A ClusterMesh global service keeps the name of the Service it joins; the hostname is served by the istio and envoy backends.")
	if vd.Spec.OutlierDetection != nil {
		tr.diagnose(sdk.Warningf(vd, "spec.outlierDetection",
			"Cilium global services fail over when a cluster has no ready endpoints: outlier detection is not applied"), "", "")
	}
	if f := vd.Spec.Failover; f != nil && f.Mode == policyv1alpha1.FailoverPriority {
		if len(clusters) > 2 {
			tr.diagnose(sdk.Warningf(vd, "spec.failover.priority",
				"Cilium orders only a cluster's own endpoints against all remote ones: the order among %s is not kept",
				list(sortedKeys(clusters))), "", "")
		}
	}
	for i, p := range vd.Spec.Ports {
		port := p.TargetPort
		if port == 0 {
			port = p.Number
		}
		if p.Number != port {
			tr.diagnose(sdk.Warningf(vd, fmt.Sprintf("spec.ports[%d].number", i),
				"Cilium global services keep the Service's ports: clients connect to port %d, not %d", port, p.Number), "", "")
		}
		for _, b := range backends {
			if !slices.ContainsFunc(b.svc.Spec.Ports, func(sp corev1.ServicePort) bool { return sp.Port == port }) {
				tr.diagnose(sdk.Warningf(vd, fmt.Sprintf("spec.ports[%d]", i),
					"Service %s has no port %d", b.key, port), b.key.Cluster, "")
			}
		}
	}
}

// checkGlobalCoverage warns about VirtualDestinations whose backends of
// one global service (one namespace and name) are selected by
// AccessPolicies in some clusters and not in others: after failover,
// clients would meet different rules.
func (tr *translation) checkGlobalCoverage(globals map[serviceKey]*globalService) {
	type group struct {
		vd        *policyv1alpha1.VirtualDestination
		namespace string
		name      string
	}
	byGroup := map[string][]serviceKey{}
	groups := map[string]group{}
	for k, g := range globals {
		for _, vd := range g.vds {
			id := sdk.RefOf(vd).String() + "|" + k.Namespace + "/" + k.Name
			byGroup[id] = append(byGroup[id], k)
			groups[id] = group{vd: vd, namespace: k.Namespace, name: k.Name}
		}
	}
	for _, id := range sortedKeys(byGroup) {
		var covered, open []string
		for _, k := range byGroup[id] {
			if len(tr.covered[k]) > 0 {
				covered = append(covered, k.Cluster)
			} else {
				open = append(open, k.Cluster)
			}
		}
		if len(covered) > 0 && len(open) > 0 {
			slices.Sort(covered)
			slices.Sort(open)
			g := groups[id]
			tr.diagnose(sdk.Warningf(g.vd, "spec.services",
				"backends are protected unevenly: AccessPolicies select Service %s/%s in %s but not in %s, so clients failing over meet different rules",
				g.namespace, g.name, list(covered), list(open)), "", "")
		}
	}
}
