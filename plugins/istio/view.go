package istio

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"

	discoveryapi "github.com/meshrelay/meshrelay/api/discovery/v1alpha1"
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

// serviceKey names a Service in one cluster.
type serviceKey struct {
	Cluster, Namespace, Name string
}

func (k serviceKey) String() string { return k.Cluster + "/" + k.Namespace + "/" + k.Name }

func (k serviceKey) compare(o serviceKey) int {
	return cmp.Or(cmp.Compare(k.Cluster, o.Cluster), cmp.Compare(k.Namespace, o.Namespace), cmp.Compare(k.Name, o.Name))
}

// view is the part of the fleet the Istio translator reads, with the
// per-cluster facts it looks up often.
type view struct {
	fleet *sdk.Fleet
	// istio are the clusters where discovery found Istio, sorted by name.
	istio  []*sdk.Cluster
	meshes map[string]*discoveryapi.Mesh
}

func newView(f *sdk.Fleet) *view {
	v := &view{fleet: f, istio: f.ClustersWithMesh(discoveryapi.MeshIstio), meshes: map[string]*discoveryapi.Mesh{}}
	for _, c := range v.istio {
		for _, m := range c.MeshInfo() {
			if m.Spec.Type == discoveryapi.MeshIstio {
				v.meshes[c.Name] = m
				break
			}
		}
	}
	return v
}

// isIstio reports whether the named cluster runs Istio.
func (v *view) isIstio(cluster string) bool {
	c, ok := v.fleet.Cluster(cluster)
	return ok && c.HasMesh(discoveryapi.MeshIstio)
}

// trustDomain returns the Istio trust domain of a cluster.
func (v *view) trustDomain(cluster string) string {
	if m := v.meshes[cluster]; m != nil && m.Spec.TrustDomain != "" {
		return m.Spec.TrustDomain
	}
	return DefaultTrustDomain
}

// network returns the Istio network of a cluster, empty when unset.
func (v *view) network(cluster string) string {
	if m := v.meshes[cluster]; m != nil {
		return m.Spec.Network
	}
	return ""
}

// rootNamespace returns the namespace of a cluster's Istio control plane.
func (v *view) rootNamespace(cluster string) string {
	if m := v.meshes[cluster]; m != nil && m.Spec.Namespace != "" {
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
	c, ok := v.fleet.Cluster(cluster)
	if !ok {
		return nil
	}
	var out []gatewayAddress
	for _, g := range c.Gateways() {
		if g.Spec.Mesh != "" && g.Spec.Mesh != discoveryapi.MeshIstio {
			continue
		}
		port := uint32(DefaultGatewayPort)
		if g.Spec.Port > 0 {
			port = uint32(g.Spec.Port)
		}
		for _, a := range g.Spec.Addresses {
			out = append(out, gatewayAddress{Address: a, Port: port})
		}
	}
	slices.SortFunc(out, func(a, b gatewayAddress) int {
		return cmp.Or(cmp.Compare(a.Address, b.Address), cmp.Compare(a.Port, b.Port))
	})
	return slices.Compact(out)
}

// service returns a Service of the fleet.
func (v *view) service(k serviceKey) (*corev1.Service, bool) {
	c, ok := v.fleet.Cluster(k.Cluster)
	if !ok {
		return nil, false
	}
	return c.Service(k.Namespace, k.Name)
}

// workloadLabels returns the pod template labels of the workloads
// (Deployments, StatefulSets, DaemonSets) that a Service selects, sorted and
// without duplicates.
func (v *view) workloadLabels(k serviceKey, svc *corev1.Service) []map[string]string {
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

// locality returns the Istio locality ("region" or "region/zone") shared by
// the ready endpoints of a Service or, when discovery knows none, by the
// nodes of its cluster; empty when they have none in common.
func (v *view) locality(k serviceKey) string {
	c, ok := v.fleet.Cluster(k.Cluster)
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
func remoteHost(k serviceKey) string {
	return fmt.Sprintf("%s.%s.svc.%s.%s", k.Name, k.Namespace, k.Cluster, remoteHostSuffix)
}

// hostFrom is the hostname clients in cluster client use for the Service k.
func hostFrom(client string, k serviceKey) string {
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
