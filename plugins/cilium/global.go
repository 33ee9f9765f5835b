package cilium

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	discoveryapi "github.com/meshrelay/meshrelay/api/discovery/v1alpha1"
	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/sdk"
	corev1 "k8s.io/api/core/v1"
)

// sharedVirtualFacts are the facts of each VirtualDestination, by its
// reference, that targets share (see virtualFactsOf).
var sharedVirtualFacts = sdk.NewSharedMap("cilium/virtual-destination", func(f *sdk.Fleet, ref sdk.PolicyRef) virtualFacts {
	vd, ok := findPolicy(f.VirtualDestinations(), ref)
	if !ok {
		return virtualFacts{}
	}
	return computeVirtualFacts(f, vd)
})

// globalService is a Service of the target that backs VirtualDestinations,
// made a ClusterMesh global service.
type globalService struct {
	key      sdk.ServiceKey
	vds      []*policyv1alpha1.VirtualDestination
	affinity string
}

// globalServices emits a patch for every Service of the target that backs
// a VirtualDestination, marking it global with the affinity that the
// failover asks for, and returns them by Service.
//
// Cilium joins the endpoints of Services with the same namespace and name
// in every cluster of the ClusterMesh whose Service is global; affinity
// says whether a cluster prefers its own endpoints (local), the other
// clusters' (remote) or neither (none).
//
// What a VirtualDestination's global services depend on beyond the target
// — the clusters of its other backends and the warnings about it as a
// whole — comes from its shared facts, read only when the target has a
// backend of it.
func (tr *translation) globalServices() map[sdk.ServiceKey]*globalService {
	out := map[sdk.ServiceKey]*globalService{}
	for _, vd := range tr.fleet.VirtualDestinations() {
		backends := tr.backends(vd)
		if len(backends) == 0 {
			continue
		}
		facts := virtualFactsOf(tr.fleet, vd)
		tr.diags = append(tr.diags, facts.warnings...)
		tr.diagnoseBackendPorts(vd, backends)
		clusters := map[string]bool{}
		for _, c := range facts.clusters {
			clusters[c] = true
		}
		for _, b := range backends {
			aff := affinity(vd.Spec.Failover, b.key.Cluster, clusters)
			g := out[b.key]
			if g == nil {
				g = &globalService{key: b.key, affinity: aff}
				out[b.key] = g
			} else if g.affinity != aff {
				first := g.vds[0]
				tr.diags.add(sdk.Warningf(vd, "spec.failover",
					"Service %s also backs VirtualDestination %s/%s, whose failover gives it affinity %q: it keeps that affinity, not %q",
					b.key.InCluster(), first.Namespace, first.Name, g.affinity, aff), b.key.Cluster, "")
			}
			g.vds = append(g.vds, vd)
		}
	}
	keys := make([]sdk.ServiceKey, 0, len(out))
	for k := range out {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, sdk.ServiceKey.Compare)
	for _, k := range keys {
		g := out[k]
		parents := make([]policyv1alpha1.Policy, 0, len(g.vds))
		for _, vd := range g.vds {
			parents = append(parents, vd)
		}
		tr.emit(servicePatchOf(g), parents...)
	}
	return out
}

// servicePatchOf returns the patch making a Service a global service.
func servicePatchOf(g *globalService) *servicePatch {
	patch := &servicePatch{Metadata: patchMeta{
		Name:      g.key.Name,
		Namespace: g.key.Namespace,
		Annotations: map[string]string{
			AnnotationGlobal:   "true",
			AnnotationAffinity: g.affinity,
			PatchAnnotation:    "true",
		},
	}}
	patch.APIVersion, patch.Kind = serviceAPIVersion, serviceKind
	return patch
}

// backend is a Service backing a VirtualDestination.
type backend struct {
	key sdk.ServiceKey
	svc *corev1.Service
}

// backendList collects backends, each once.
type backendList struct {
	seen map[sdk.ServiceKey]bool
	list []backend
}

func (l *backendList) add(k sdk.ServiceKey, svc *corev1.Service) {
	if l.seen == nil {
		l.seen = map[sdk.ServiceKey]bool{}
	}
	if !l.seen[k] {
		l.seen[k] = true
		l.list = append(l.list, backend{key: k, svc: svc})
	}
}

// sorted returns the backends sorted by cluster, namespace and name.
func (l *backendList) sorted() []backend {
	slices.SortFunc(l.list, func(a, b backend) int { return a.key.Compare(b.key) })
	return l.list
}

// backends returns the VirtualDestination's backing Services in the
// target — those it lists and those its selectors select — sorted and
// without duplicates, with a warning for each listed Service of the target
// that does not exist.
func (tr *translation) backends(vd *policyv1alpha1.VirtualDestination) []backend {
	var l backendList
	for i, s := range vd.Spec.Services {
		if s.Cluster != tr.target.Name {
			continue
		}
		k := sdk.ServiceKey{Cluster: s.Cluster, Namespace: s.Namespace, Name: s.Name}
		svc, ok := tr.target.Service(s.Namespace, s.Name)
		if !ok {
			tr.diags.add(sdk.Warningf(vd, fmt.Sprintf("spec.services[%d]", i),
				"Service %s does not exist: it is not made a global service", k.InCluster()), s.Cluster, "")
			continue
		}
		l.add(k, svc)
	}
	for _, d := range tr.target.Select(vd.Spec.DestinationSelectors) {
		l.add(tr.key(d), d.Service)
	}
	return l.sorted()
}

// diagnoseBackendPorts warns about each port of the VirtualDestination
// that a backing Service of the target lacks.
func (tr *translation) diagnoseBackendPorts(vd *policyv1alpha1.VirtualDestination, backends []backend) {
	for i, p := range vd.Spec.Ports {
		port := servicePort(p)
		for _, b := range backends {
			if !slices.ContainsFunc(b.svc.Spec.Ports, func(sp corev1.ServicePort) bool { return sp.Port == port }) {
				tr.diags.add(sdk.Warningf(vd, fmt.Sprintf("spec.ports[%d]", i),
					"Service %s has no port %d", b.key.InCluster(), port), b.key.Cluster, "")
			}
		}
	}
}

// servicePort returns the port of the backing Services that a
// VirtualDestination port reaches: its target port, or its number.
func servicePort(p policyv1alpha1.VirtualPort) int32 {
	return cmp.Or(p.TargetPort, p.Number)
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

// virtualFacts is what a VirtualDestination's global services depend on
// beyond one cluster.
type virtualFacts struct {
	// clusters are the clusters of its backends, sorted.
	clusters []string
	// warnings are its diagnostics that concern no cluster in particular.
	warnings diagnostics
}

// virtualFactsOf returns the facts of a VirtualDestination, computed over
// the fleet once per state of the fleet and shared by the targets with
// backends of it. A target depends on the facts — which change when
// backends appear or leave, or when AccessPolicies start or stop covering
// them — not on every Service the selectors were matched against.
func virtualFactsOf(f *sdk.Fleet, vd *policyv1alpha1.VirtualDestination) virtualFacts {
	return sharedVirtualFacts.Get(f, sdk.RefOf(vd))
}

// computeVirtualFacts finds the VirtualDestination's backends in every
// cluster with Cilium and says what of it their global services do not
// express.
func computeVirtualFacts(f *sdk.Fleet, vd *policyv1alpha1.VirtualDestination) virtualFacts {
	backends := fleetBackends(f, vd)
	if len(backends) == 0 {
		return virtualFacts{}
	}
	clusters := map[string]bool{}
	for _, b := range backends {
		clusters[b.key.Cluster] = true
	}
	var cilium []string
	for _, c := range f.ClustersWithMesh(discoveryapi.MeshCilium) {
		cilium = append(cilium, c.Name)
	}
	facts := virtualFacts{clusters: sortedKeys(clusters)}
	facts.warnings.virtual(vd, backends, cilium)
	facts.warnings.coverage(f, vd, backends, f.AccessPolicies())
	return facts
}

// fleetBackends returns the VirtualDestination's backing Services in
// every cluster with Cilium, sorted and without duplicates.
func fleetBackends(f *sdk.Fleet, vd *policyv1alpha1.VirtualDestination) []backend {
	var l backendList
	for _, s := range vd.Spec.Services {
		c, ok := f.Cluster(s.Cluster)
		if !ok || !c.HasMesh(discoveryapi.MeshCilium) {
			continue
		}
		if svc, ok := c.Service(s.Namespace, s.Name); ok {
			l.add(sdk.ServiceKey{Cluster: s.Cluster, Namespace: s.Namespace, Name: s.Name}, svc)
		}
	}
	for _, d := range ciliumDestinations(f, vd.Spec.DestinationSelectors) {
		l.add(d.Key(), d.Service)
	}
	return l.sorted()
}

// virtual reports what of the VirtualDestination, as a whole, Cilium's
// global services over its backends do not express. cilium lists the
// clusters with Cilium, sorted.
func (ds *diagnostics) virtual(vd *policyv1alpha1.VirtualDestination, backends []backend, cilium []string) {
	names := map[string]bool{}
	clusters := map[string]bool{}
	for _, b := range backends {
		names[b.key.Namespace+"/"+b.key.Name] = true
		clusters[b.key.Cluster] = true
	}
	services := sortedKeys(names)
	if len(services) > 1 {
		ds.add(sdk.Warningf(vd, "spec.services",
			"Cilium joins only Services of the same namespace and name across clusters: %s form separate global services",
			list(services)), "", "")
	}
	for _, s := range services {
		ns, name, _ := strings.Cut(s, "/")
		var without []string
		for _, c := range cilium {
			if !slices.ContainsFunc(backends, func(b backend) bool {
				return b.key == sdk.ServiceKey{Cluster: c, Namespace: ns, Name: name}
			}) {
				without = append(without, c)
			}
		}
		if len(without) > 0 {
			ds.add(sdk.Warningf(vd, "spec.services",
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
	ds.add(sdk.Warningf(vd, "spec.hostname",
		"Cilium has no global hostnames: clients reach %s through %s", vd.Spec.Hostname, list(hosts)), "",
		"A ClusterMesh global service keeps the name of the Service it joins; the hostname is served by the istio and envoy backends.")
	if vd.Spec.OutlierDetection != nil {
		ds.add(sdk.Warningf(vd, "spec.outlierDetection",
			"Cilium global services fail over when a cluster has no ready endpoints: outlier detection is not applied"), "", "")
	}
	if f := vd.Spec.Failover; f != nil && f.Mode == policyv1alpha1.FailoverPriority {
		if len(clusters) > 2 {
			ds.add(sdk.Warningf(vd, "spec.failover.priority",
				"Cilium orders only a cluster's own endpoints against all remote ones: the order among %s is not kept",
				list(sortedKeys(clusters))), "", "")
		}
	}
	for i, p := range vd.Spec.Ports {
		if port := servicePort(p); p.Number != port {
			ds.add(sdk.Warningf(vd, fmt.Sprintf("spec.ports[%d].number", i),
				"Cilium global services keep the Service's ports: clients connect to port %d, not %d", port, p.Number), "", "")
		}
	}
}

// coverage warns when the VirtualDestination's backends of one global
// service (one namespace and name) are selected by AccessPolicies in some
// clusters and not in others: after failover, clients would meet
// different rules.
func (ds *diagnostics) coverage(f *sdk.Fleet, vd *policyv1alpha1.VirtualDestination, backends []backend, aps []*policyv1alpha1.AccessPolicy) {
	byName := map[string][]backend{}
	for _, b := range backends {
		s := b.key.Namespace + "/" + b.key.Name
		byName[s] = append(byName[s], b)
	}
	for _, s := range sortedKeys(byName) {
		var covered, open []string
		for _, b := range byName[s] {
			if selectedByAny(f, aps, b) {
				covered = append(covered, b.key.Cluster)
			} else {
				open = append(open, b.key.Cluster)
			}
		}
		if len(covered) > 0 && len(open) > 0 {
			ns, name, _ := strings.Cut(s, "/")
			ds.add(sdk.Warningf(vd, "spec.services",
				"backends are protected unevenly: AccessPolicies select Service %s/%s in %s but not in %s, so clients failing over meet different rules",
				ns, name, list(covered), list(open)), "", "")
		}
	}
}

// selectedByAny reports whether an AccessPolicy selects the backend.
func selectedByAny(f *sdk.Fleet, aps []*policyv1alpha1.AccessPolicy, b backend) bool {
	c, ok := f.Cluster(b.key.Cluster)
	if !ok {
		return false
	}
	for _, ap := range aps {
		for _, sel := range ap.Spec.DestinationSelectors {
			if c.Matches(sel, b.svc) {
				return true
			}
		}
	}
	return false
}
