package istio

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"

	discoveryapi "github.com/meshrelay/meshrelay/api/discovery/v1alpha1"
	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/sdk"
	corev1 "k8s.io/api/core/v1"
)

// Defaults Istio applies when a mesh does not say otherwise.
const (
	// DefaultTrustDomain is Istio's trust domain when discovery found none.
	DefaultTrustDomain = "cluster.local"
	// DefaultGatewayPort is the mTLS passthrough port of Istio's east-west gateway.
	DefaultGatewayPort = 15443
	// clusterDomain is the DNS suffix of Services inside a cluster.
	clusterDomain = "cluster.local"
	// remoteHostSuffix ends the hostnames by which one cluster reaches a
	// Service of another: <name>.<namespace>.svc.<cluster>.global.
	remoteHostSuffix = "global"
	// defaultRootNamespace is Istio's root namespace when discovery found none.
	defaultRootNamespace = "istio-system"
	// tlsModeLabel on an endpoint tells Istio's auto mTLS that it speaks Istio mTLS.
	tlsModeLabel = "security.istio.io/tlsMode"
)

// destination is a Service selected in a cluster that runs Istio.
type destination struct {
	key sdk.ServiceKey
	svc *corev1.Service
}

// view reads the fleet for one computation: a target's outputs, or a value
// that targets share. It remembers the Istio Mesh of each cluster it looked
// at, and is not safe for concurrent use.
type view struct {
	fleet  *sdk.Fleet
	meshes map[string]*discoveryapi.Mesh
}

func newView(f *sdk.Fleet) *view {
	return &view{fleet: f, meshes: map[string]*discoveryapi.Mesh{}}
}

// istioClusters returns the names of the clusters that run Istio, sorted.
// It depends on every cluster's meshes, so only values that targets share
// call it.
func (v *view) istioClusters() []string {
	var names []string
	for _, c := range v.fleet.ClustersWithMesh(discoveryapi.MeshIstio) {
		names = append(names, c.Name)
	}
	return names
}

// isIstio reports whether the named cluster runs Istio.
func (v *view) isIstio(cluster string) bool {
	c, ok := v.fleet.Cluster(cluster)
	return ok && c.HasMesh(discoveryapi.MeshIstio)
}

// mesh returns the Istio Mesh discovery found in a cluster, nil when none.
func (v *view) mesh(cluster string) *discoveryapi.Mesh {
	if m, ok := v.meshes[cluster]; ok {
		return m
	}
	var found *discoveryapi.Mesh
	if c, ok := v.fleet.Cluster(cluster); ok {
		for _, m := range c.MeshInfo() {
			if m.Spec.Type == discoveryapi.MeshIstio {
				found = m
				break
			}
		}
	}
	v.meshes[cluster] = found
	return found
}

// trustDomain returns the Istio trust domain of a cluster.
func (v *view) trustDomain(cluster string) string {
	if m := v.mesh(cluster); m != nil && m.Spec.TrustDomain != "" {
		return m.Spec.TrustDomain
	}
	return DefaultTrustDomain
}

// network returns the Istio network of a cluster, empty when unset.
func (v *view) network(cluster string) string {
	if m := v.mesh(cluster); m != nil {
		return m.Spec.Network
	}
	return ""
}

// rootNamespace returns the namespace of a cluster's Istio control plane.
func (v *view) rootNamespace(cluster string) string {
	if m := v.mesh(cluster); m != nil && m.Spec.Namespace != "" {
		return m.Spec.Namespace
	}
	return defaultRootNamespace
}

// gatewayAddress is one address of an east-west gateway.
type gatewayAddress struct {
	Address string
	Port    uint32
}

// gateways returns the addresses of the cluster's Istio east-west gateways,
// sorted.
func (v *view) gateways(cluster string) []gatewayAddress {
	var out []gatewayAddress
	for _, g := range v.eastWestGateways(cluster) {
		for _, a := range g.Spec.Addresses {
			out = append(out, gatewayAddress{Address: a, Port: gatewayPort(g)})
		}
	}
	slices.SortFunc(out, func(a, b gatewayAddress) int {
		return cmp.Or(cmp.Compare(a.Address, b.Address), cmp.Compare(a.Port, b.Port))
	})
	return slices.Compact(out)
}

// service returns a Service of the fleet.
func (v *view) service(k sdk.ServiceKey) (*corev1.Service, bool) {
	c, ok := v.fleet.Cluster(k.Cluster)
	if !ok {
		return nil, false
	}
	return c.Service(k.Namespace, k.Name)
}

// selectIstio returns the Services the selectors select in clusters that
// run Istio, sorted by cluster, namespace and name.
func selectIstio(v *view, selectors []policyv1alpha1.DestinationSelector) []destination {
	var out []destination
	for _, d := range v.fleet.Select(selectors) {
		if d.Cluster.HasMesh(discoveryapi.MeshIstio) {
			k := d.Key()
			out = append(out, destination{key: k, svc: d.Service})
		}
	}
	return out
}

// sharedWorkloadLabels returns workloadLabels of the Service k as a value
// that targets share: a target depends on the label sets, not on every
// workload of k's cluster. Values that targets share must not call it.
func (v *view) sharedWorkloadLabels(k sdk.ServiceKey) []map[string]string {
	return sharedWorkloads.Get(v.fleet, k)
}

// sharedWorkloads are the workloadLabels of each Service that
// targets share.
var sharedWorkloads = sdk.NewSharedMap("istio/workloads", func(f *sdk.Fleet, k sdk.ServiceKey) []map[string]string {
	v := newView(f)
	svc, ok := v.service(k)
	if !ok {
		return nil
	}
	return v.workloadLabels(k, svc)
})

// workloadLabels returns the pod template labels of the workloads
// (Deployments, StatefulSets, DaemonSets) that a Service selects, sorted and
// without duplicates.
func (v *view) workloadLabels(k sdk.ServiceKey, svc *corev1.Service) []map[string]string {
	c, ok := v.fleet.Cluster(k.Cluster)
	if !ok || len(svc.Spec.Selector) == 0 {
		return nil
	}
	var sets []map[string]string
	add := func(namespace string, labels map[string]string) {
		if namespace == k.Namespace && containsLabels(labels, svc.Spec.Selector) {
			sets = append(sets, labels)
		}
	}
	for _, d := range c.Deployments() {
		add(d.Namespace, d.Spec.Template.Labels)
	}
	for _, s := range c.StatefulSets() {
		add(s.Namespace, s.Spec.Template.Labels)
	}
	for _, d := range c.DaemonSets() {
		add(d.Namespace, d.Spec.Template.Labels)
	}
	slices.SortFunc(sets, func(a, b map[string]string) int { return cmp.Compare(labelsKey(a), labelsKey(b)) })
	return slices.CompactFunc(sets, func(a, b map[string]string) bool { return labelsKey(a) == labelsKey(b) })
}

// containsLabels reports whether labels has every key and value of want.
func containsLabels(labels, want map[string]string) bool {
	for k, v := range want {
		got, ok := labels[k]
		if !ok || got != v {
			return false
		}
	}
	return true
}

// locality returns the Istio locality of the Service k (see localityOf) as
// a value that targets share: a target depends on the locality, not on the
// endpoints it comes from. Values that targets share must not call it.
func (v *view) locality(k sdk.ServiceKey) string {
	return sharedLocality.Get(v.fleet, k)
}

// sharedLocality is the locality of each Service that targets share.
var sharedLocality = sdk.NewSharedMap("istio/locality", localityOf)

// localityOf returns the Istio locality ("region" or "region/zone") shared
// by the ready endpoints of a Service or, when discovery knows none, by the
// nodes of its cluster; empty when they have none in common.
func localityOf(f *sdk.Fleet, k sdk.ServiceKey) string {
	c, ok := f.Cluster(k.Cluster)
	if !ok {
		return ""
	}
	var places [][2]string
	for _, ep := range c.Endpoints(k.Namespace, k.Name) {
		if ep.Ready {
			places = append(places, [2]string{ep.Region, ep.Zone})
		}
	}
	if len(places) == 0 {
		for _, n := range c.Nodes() {
			places = append(places, [2]string{n.Labels[corev1.LabelTopologyRegion], n.Labels[corev1.LabelTopologyZone]})
		}
	}
	if len(places) == 0 {
		return ""
	}
	region, zone := places[0][0], places[0][1]
	for _, p := range places[1:] {
		if p[0] != region {
			return ""
		}
		if p[1] != zone {
			zone = ""
		}
	}
	return joinLocality(region, zone)
}

func joinLocality(region, zone string) string {
	switch {
	case region == "":
		return ""
	case zone == "":
		return region
	default:
		return region + "/" + zone
	}
}

// localHost is the hostname of a Service inside its own cluster.
func localHost(namespace, name string) string {
	return fmt.Sprintf("%s.%s.svc.%s", name, namespace, clusterDomain)
}

// remoteHost is the hostname by which other clusters reach a Service of
// cluster; the Service's own cluster serves it too, for its east-west gateway.
func remoteHost(k sdk.ServiceKey) string {
	return fmt.Sprintf("%s.%s.svc.%s.%s", k.Name, k.Namespace, k.Cluster, remoteHostSuffix)
}

// hostFrom is the hostname clients in cluster client use for the Service k.
func hostFrom(client string, k sdk.ServiceKey) string {
	if client == k.Cluster {
		return localHost(k.Namespace, k.Name)
	}
	return remoteHost(k)
}

// isIP reports whether every address is an IP address.
func allIPs(addresses []string) bool {
	for _, a := range addresses {
		if _, err := netip.ParseAddr(a); err != nil {
			return false
		}
	}
	return true
}
