package istio

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/sdk"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
	clientnetworking "istio.io/client-go/pkg/apis/networking/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// translateVirtualDestinations gives the target a ServiceEntry for each
// VirtualDestination's hostname, with the backing Services' endpoints: a
// local Service's ready endpoints (or its cluster DNS name when none is
// known), another cluster's east-west gateways; and a DestinationRule with
// the outlier detection and locality failover. The plan found the backing
// Services and decided which policies are accepted.
func translateVirtualDestinations(ctx context.Context, t *target, plan *trafficPlan, out *outputs) error {
	for _, vd := range t.fleet.VirtualDestinations() {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("translate virtual destinations: %w", err)
		}
		facts := plan.Virtual[sdk.RefOf(vd)]
		if facts == nil || len(facts.Backing) == 0 {
			continue
		}
		s := newStaged(vd)
		namespace := virtualNamespace(t.view, vd, t.name)
		se := virtualServiceEntry(t.view, vd, s, t.name, facts.Backing)
		se.Namespace = namespace
		if isGlobal(vd.Spec.Hostname) {
			se.Spec.Addresses = []string{plan.globalAddress(vd.Spec.Hostname)}
		}
		s.add(t.name, se)
		if dr := virtualDestinationRule(vd); dr != nil {
			dr.Namespace = namespace
			s.add(t.name, dr)
		}
		failover(t.view, vd, s, facts.Backing)
		out.commitPlanned(s, facts.Accepted)
	}
	return nil
}

// virtualNamespace is the namespace of vd's objects in cluster client: the
// policy's, else Istio's root namespace there.
func virtualNamespace(v *view, vd *policyv1alpha1.VirtualDestination, client string) string {
	return cmp.Or(vd.Namespace, v.rootNamespace(client))
}

// backingServices returns the existing backing Services in clusters that
// run Istio, sorted, and warns about the others.
func backingServices(v *view, vd *policyv1alpha1.VirtualDestination, s *staged) []sdk.ServiceKey {
	var out []sdk.ServiceKey
	for i, b := range vd.Spec.Services {
		path := fmt.Sprintf("spec.services[%d]", i)
		k := sdk.ServiceKey{Cluster: b.Cluster, Namespace: b.Namespace, Name: b.Name}
		switch _, ok := v.fleet.Cluster(b.Cluster); {
		case !ok:
			s.warnf("", path+".cluster", "unknown cluster %q; the service gets no traffic", b.Cluster)
		case !v.isIstio(b.Cluster):
			s.warnf(b.Cluster, path+".cluster", "cluster %q does not run Istio; the service gets no traffic from this backend", b.Cluster)
		default:
			if _, ok := v.service(k); !ok {
				s.warnf(b.Cluster, path, "service %s not found; it gets no traffic until it exists", k)
				continue
			}
			out = append(out, k)
		}
	}
	for _, d := range selectIstio(v, vd.Spec.DestinationSelectors) {
		out = append(out, d.key)
	}
	slices.SortFunc(out, sdk.ServiceKey.Compare)
	return slices.Compact(out)
}

// portName names a port of a VirtualDestination.
func portName(p policyv1alpha1.VirtualPort) string {
	return fmt.Sprintf("%s-%d", strings.ToLower(string(p.Protocol)), p.Number)
}

// virtualServiceEntry builds the ServiceEntry of vd for clients in cluster client.
func virtualServiceEntry(v *view, vd *policyv1alpha1.VirtualDestination, s *staged, client string, backing []sdk.ServiceKey) *clientnetworking.ServiceEntry {
	se := &clientnetworking.ServiceEntry{
		TypeMeta:   serviceEntryType,
		ObjectMeta: metav1.ObjectMeta{Name: objectName(vd.Name)},
	}
	se.Spec.Hosts = []string{vd.Spec.Hostname}
	se.Spec.Location = networking.ServiceEntry_MESH_INTERNAL
	for _, p := range vd.Spec.Ports {
		se.Spec.Ports = append(se.Spec.Ports, &networking.ServicePort{Number: uint32(p.Number), Protocol: string(p.Protocol), Name: portName(p)})
	}
	var addresses []string
	for _, k := range backing {
		if k.Cluster == client {
			svc, _ := v.service(k)
			for _, we := range localEndpoints(v, vd, s, k, svc) {
				se.Spec.Endpoints = append(se.Spec.Endpoints, we)
				addresses = append(addresses, we.Address)
			}
			continue
		}
		gateways := v.gateways(k.Cluster)
		if len(gateways) == 0 {
			s.warnf(client, "spec.services", "clients in cluster %q cannot reach %s: its cluster has no Istio east-west gateway", client, k)
			continue
		}
		locality := v.locality(k)
		for _, gw := range gateways {
			ports := map[string]uint32{}
			for _, p := range vd.Spec.Ports {
				ports[portName(p)] = gw.Port
			}
			se.Spec.Endpoints = append(se.Spec.Endpoints, &networking.WorkloadEntry{
				Address: gw.Address, Ports: ports, Locality: locality,
				Labels: map[string]string{tlsModeLabel: "istio"},
			})
			addresses = append(addresses, gw.Address)
		}
	}
	se.Spec.Resolution = resolutionOf(addresses)
	return se
}

// localEndpoints are the endpoints of a backing Service for clients in its
// own cluster: its ready endpoints with their localities, or its cluster DNS
// name when discovery knows none.
func localEndpoints(v *view, vd *policyv1alpha1.VirtualDestination, s *staged, k sdk.ServiceKey, svc *corev1.Service) []*networking.WorkloadEntry {
	c, _ := v.fleet.Cluster(k.Cluster)
	servicePorts := make([]*corev1.ServicePort, len(vd.Spec.Ports))
	for i, p := range vd.Spec.Ports {
		target := cmp.Or(p.TargetPort, p.Number)
		for j := range svc.Spec.Ports {
			if svc.Spec.Ports[j].Port == target {
				servicePorts[i] = &svc.Spec.Ports[j]
			}
		}
		if servicePorts[i] == nil {
			s.warnf(k.Cluster, fmt.Sprintf("spec.ports[%d]", i), "service %s has no port %d", k, target)
		}
	}
	network := v.network(k.Cluster)
	var out []*networking.WorkloadEntry
	for _, ep := range c.Endpoints(k.Namespace, k.Name) {
		if !ep.Ready {
			continue
		}
		ports := map[string]uint32{}
		for i, p := range vd.Spec.Ports {
			if sp := servicePorts[i]; sp != nil {
				if n, ok := ep.Ports[sp.Name]; ok {
					ports[portName(p)] = uint32(n)
				}
			}
		}
		out = append(out, &networking.WorkloadEntry{
			Address: ep.Address, Ports: ports, Locality: joinLocality(ep.Region, ep.Zone), Network: network,
			Labels: map[string]string{tlsModeLabel: "istio"},
		})
	}
	if len(out) > 0 {
		return out
	}
	ports := map[string]uint32{}
	for i, p := range vd.Spec.Ports {
		if sp := servicePorts[i]; sp != nil {
			ports[portName(p)] = uint32(sp.Port)
		}
	}
	return []*networking.WorkloadEntry{{
		Address: localHost(k.Namespace, k.Name), Ports: ports, Locality: v.locality(k), Network: network,
		Labels: map[string]string{tlsModeLabel: "istio"},
	}}
}

// virtualDestinationRule returns the DestinationRule of vd's hostname, or
// nil when the policy asks for neither failover nor outlier detection.
func virtualDestinationRule(vd *policyv1alpha1.VirtualDestination) *clientnetworking.DestinationRule {
	if !hasVirtualDestinationRule(vd) {
		return nil
	}
	dr := &clientnetworking.DestinationRule{
		TypeMeta:   destinationRuleType,
		ObjectMeta: metav1.ObjectMeta{Name: objectName(vd.Name)},
	}
	dr.Spec.Host = vd.Spec.Hostname
	dr.Spec.TrafficPolicy = &networking.TrafficPolicy{}
	if o := vd.Spec.OutlierDetection; o != nil {
		dr.Spec.TrafficPolicy.OutlierDetection = &networking.OutlierDetection{
			Consecutive_5XxErrors: wrapperspb.UInt32(uint32(o.ConsecutiveErrors)),
			Interval:              durationpb.New(o.Interval.Duration),
			BaseEjectionTime:      durationpb.New(o.BaseEjectionTime.Duration),
			MaxEjectionPercent:    o.MaxEjectionPercent,
		}
	}
	if vd.Spec.Failover != nil {
		dr.Spec.TrafficPolicy.LoadBalancer = &networking.LoadBalancerSettings{
			LocalityLbSetting: &networking.LocalityLoadBalancerSetting{Enabled: wrapperspb.Bool(true)},
		}
	}
	return dr
}

// hasVirtualDestinationRule reports whether vd asks for failover or
// outlier detection, which its DestinationRule carries.
func hasVirtualDestinationRule(vd *policyv1alpha1.VirtualDestination) bool {
	return vd.Spec.OutlierDetection != nil || vd.Spec.Failover != nil
}

// failover fills in the locality failover of the staged DestinationRules.
// Istio orders endpoints by locality relative to each client, so Priority
// [c1, c2, ...] becomes failover from the region of c1 to that of c2, and
// so on: clients keep their own locality first, then follow the chain.
func failover(v *view, vd *policyv1alpha1.VirtualDestination, s *staged, backing []sdk.ServiceKey) {
	f := vd.Spec.Failover
	if f == nil || f.Mode != policyv1alpha1.FailoverPriority {
		return
	}
	regions := make([]string, len(f.Priority))
	for i, c := range f.Priority {
		path := fmt.Sprintf("spec.failover.priority[%d]", i)
		idx := slices.IndexFunc(backing, func(k sdk.ServiceKey) bool { return k.Cluster == c })
		if idx < 0 {
			s.warnf(c, path, "cluster %q has no backing service of this VirtualDestination", c)
			continue
		}
		regions[i], _, _ = strings.Cut(v.locality(backing[idx]), "/")
		if regions[i] == "" {
			s.warnf(c, path, "the endpoints of %s have no region (topology.kubernetes.io/region on their nodes), so Istio cannot fail over by locality", backing[idx])
		}
	}
	var chain []*networking.LocalityLoadBalancerSetting_Failover
	from := map[string]bool{}
	for i := 0; i+1 < len(regions); i++ {
		a, b := regions[i], regions[i+1]
		switch {
		case a == "" || b == "":
		case a == b:
			s.warnf("", fmt.Sprintf("spec.failover.priority[%d]", i+1),
				"clusters %q and %q share the region %q, so Istio's locality failover cannot order them", f.Priority[i], f.Priority[i+1], a)
		case from[a]:
		default:
			from[a] = true
			chain = append(chain, &networking.LocalityLoadBalancerSetting_Failover{From: a, To: b})
		}
	}
	for _, so := range s.objects {
		if dr, ok := so.obj.(*clientnetworking.DestinationRule); ok && dr.Spec.Host == vd.Spec.Hostname {
			dr.Spec.TrafficPolicy.LoadBalancer.LocalityLbSetting.Failover = chain
		}
	}
}
