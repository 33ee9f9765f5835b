package istio

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/sdk"
	networking "istio.io/api/networking/v1alpha3"
	clientnetworking "istio.io/client-go/pkg/apis/networking/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// remoteEntry aggregates the uses of one remote Service.
type remoteEntry struct {
	parents []policyv1alpha1.Policy
	// subsetKeys are the label keys of every subset routed to; the
	// imported endpoints carry them so that subsets select endpoints.
	subsetKeys map[string]bool
}

func (e *remoteEntry) add(p policyv1alpha1.Policy, subset map[string]string) {
	if !slices.Contains(e.parents, p) {
		e.parents = append(e.parents, p)
	}
	for k := range subset {
		e.subsetKeys[k] = true
	}
}

// remoteServices are the Services a target reaches across clusters, and
// those of its own that other clusters reach. Each gets, whatever number of
// policies use it, one ServiceEntry in every client cluster (its remote
// host, resolved to the east-west gateways of its cluster) and one in its
// own cluster (the same host, resolved to its workloads, for the gateway
// to route to).
type remoteServices struct {
	imports map[sdk.ServiceKey]*remoteEntry
	exports map[sdk.ServiceKey]*remoteEntry
}

func newRemoteServices() *remoteServices {
	return &remoteServices{imports: map[sdk.ServiceKey]*remoteEntry{}, exports: map[sdk.ServiceKey]*remoteEntry{}}
}

// add records the remote Services the target's clients use through p.
func (r *remoteServices) add(p policyv1alpha1.Policy, uses []remoteUse) {
	for _, u := range uses {
		entryOf(r.imports, u.Service).add(p, u.subset)
	}
}

// export records the target's Services that other clusters use through p.
func (r *remoteServices) export(p policyv1alpha1.Policy, services []sdk.ServiceKey) {
	for _, k := range services {
		entryOf(r.exports, k).add(p, nil)
	}
}

func entryOf(m map[sdk.ServiceKey]*remoteEntry, k sdk.ServiceKey) *remoteEntry {
	e, ok := m[k]
	if !ok {
		e = &remoteEntry{subsetKeys: map[string]bool{}}
		m[k] = e
	}
	return e
}

// emit adds the target's ServiceEntries to out.
func (r *remoteServices) emit(t *target, plan *trafficPlan, out *outputs) {
	for _, k := range slices.SortedFunc(maps.Keys(r.imports), sdk.ServiceKey.Compare) {
		e := r.imports[k]
		svc, ok := t.service(k)
		if !ok {
			continue
		}
		out.putShared(t.name, importEntry(t.view, k, svc, e.subsetKeys, plan.globalAddress(remoteHost(k))), e.parents)
	}
	for _, k := range slices.SortedFunc(maps.Keys(r.exports), sdk.ServiceKey.Compare) {
		svc, ok := t.service(k)
		if !ok {
			continue
		}
		out.putShared(t.name, exportEntry(k, svc, plan.globalAddress(remoteHost(k))), r.exports[k].parents)
	}
}

// importEntry is the ServiceEntry by which clients of another cluster reach
// the Service k: its remote host with its virtual IP, served by k's
// cluster's east-west gateways. Each gateway address appears once per distinct set of the
// subset labels of k's workloads, so that subsets select it. Its network
// is left empty on purpose: a client's istiod knows no gateway of another
// cluster's network and would drop such endpoints.
func importEntry(v *view, k sdk.ServiceKey, svc *corev1.Service, subsetKeys map[string]bool, address string) *clientnetworking.ServiceEntry {
	se := remoteHostEntry(k, svc, address, false)
	labelSets := []map[string]string{{}}
	if len(subsetKeys) > 0 {
		labelSets = nil
		seen := map[string]bool{}
		for _, l := range v.sharedWorkloadLabels(k) {
			projected := map[string]string{}
			for key := range subsetKeys {
				if val, ok := l[key]; ok {
					projected[key] = val
				}
			}
			if lk := labelsKey(projected); !seen[lk] {
				seen[lk] = true
				labelSets = append(labelSets, projected)
			}
		}
		slices.SortFunc(labelSets, func(a, b map[string]string) int { return cmp.Compare(labelsKey(a), labelsKey(b)) })
	}
	locality := v.locality(k)
	var addresses []string
	for _, gw := range v.gateways(k.Cluster) {
		addresses = append(addresses, gw.Address)
		for _, labels := range labelSets {
			ports := map[string]uint32{}
			for _, p := range se.Spec.Ports {
				ports[p.Name] = gw.Port
			}
			l := maps.Clone(labels)
			l[tlsModeLabel] = "istio"
			se.Spec.Endpoints = append(se.Spec.Endpoints, &networking.WorkloadEntry{
				Address: gw.Address, Ports: ports, Labels: l, Locality: locality,
			})
		}
	}
	se.Spec.Resolution = resolutionOf(addresses)
	return se
}

// exportEntry is the ServiceEntry, in the Service's own cluster, that gives
// the remote host of k, with the same virtual IP as in every cluster, the
// Service's workloads as endpoints.
func exportEntry(k sdk.ServiceKey, svc *corev1.Service, address string) *clientnetworking.ServiceEntry {
	se := remoteHostEntry(k, svc, address, true)
	se.Spec.Resolution = networking.ServiceEntry_STATIC
	se.Spec.WorkloadSelector = &networking.WorkloadSelector{Labels: maps.Clone(svc.Spec.Selector)}
	return se
}

// remoteHostEntry is what the ServiceEntries of the remote host of k share:
// the host, its virtual IP and the Service's ports (with their target
// ports when withTarget), inside the mesh.
func remoteHostEntry(k sdk.ServiceKey, svc *corev1.Service, address string, withTarget bool) *clientnetworking.ServiceEntry {
	se := &clientnetworking.ServiceEntry{
		TypeMeta:   serviceEntryType,
		ObjectMeta: metav1.ObjectMeta{Name: objectName(k.Name, k.Cluster), Namespace: k.Namespace},
	}
	se.Spec.Hosts = []string{remoteHost(k)}
	se.Spec.Addresses = []string{address}
	se.Spec.Location = networking.ServiceEntry_MESH_INTERNAL
	se.Spec.Ports = servicePorts(svc, withTarget)
	return se
}

func resolutionOf(addresses []string) networking.ServiceEntry_Resolution {
	if allIPs(addresses) {
		return networking.ServiceEntry_STATIC
	}
	return networking.ServiceEntry_DNS
}

// servicePorts translates a Service's ports, with their target ports when
// withTarget and the target port is a number.
func servicePorts(svc *corev1.Service, withTarget bool) []*networking.ServicePort {
	var out []*networking.ServicePort
	for _, p := range svc.Spec.Ports {
		if p.Protocol != "" && p.Protocol != corev1.ProtocolTCP {
			continue
		}
		sp := &networking.ServicePort{Number: uint32(p.Port), Name: cmp.Or(p.Name, fmt.Sprintf("port-%d", p.Port)), Protocol: protocolOf(p)}
		if withTarget && p.TargetPort.IntValue() > 0 {
			sp.TargetPort = uint32(p.TargetPort.IntValue())
		}
		out = append(out, sp)
	}
	return out
}

// protocolOf infers a port's application protocol as Istio does: from
// appProtocol, else from the port name's prefix; empty when unknown.
func protocolOf(p corev1.ServicePort) string {
	candidate := strings.ToLower(p.Name)
	if p.AppProtocol != nil {
		candidate = strings.ToLower(*p.AppProtocol)
		if candidate == "kubernetes.io/h2c" {
			return "HTTP2"
		}
	}
	prefix, _, _ := strings.Cut(candidate, "-")
	switch prefix {
	case "http", "http2", "https", "grpc", "tcp", "tls", "mongo", "mysql", "redis":
		return strings.ToUpper(prefix)
	}
	return ""
}
