package istio

import (
	"cmp"
	"maps"
	"slices"
	"strings"

	discoveryapi "github.com/meshrelay/meshrelay/api/discovery/v1alpha1"
	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/sdk"
	networking "istio.io/api/networking/v1alpha3"
	clientnetworking "istio.io/client-go/pkg/apis/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	// globalHosts is the Gateway host that covers every remote host
	// (<name>.<namespace>.svc.<cluster>.global) and the VirtualDestination
	// hostnames under .global.
	globalHosts = "*." + remoteHostSuffix
	// gatewayPortName names the Gateway's server port.
	gatewayPortName = "tls"
)

// defaultGatewaySelector selects the pods of Istio's east-west gateway as
// Istio installs it (samples/multicluster/gen-eastwest-gateway.sh), for a
// gateway whose discovery reported no selector.
var defaultGatewaySelector = map[string]string{"istio": "eastwestgateway"}

// crossNetworkGateways gives each of the target's east-west gateways a
// Gateway that lets clients of other clusters in through it, when they
// reach Services of the target: an exported Service (by its remote host
// <name>.<namespace>.svc.<target>.global) or a backing Service of an
// accepted VirtualDestination (by the VirtualDestination's hostname).
//
// Istio's east-west gateway routes mTLS by SNI (AUTO_PASSTHROUGH) only for
// the hosts of a Gateway resource selecting it, and the usual one
// (samples/multicluster/expose-services.yaml) has the hosts "*.local". The
// Gateway meshrelay emits selects the gateway's pods as discovery reported
// them, listens on its cross-network port (15443 by default) as port "tls"
// with protocol TLS and mode AUTO_PASSTHROUGH, and has the hosts "*.global"
// and the exported VirtualDestination hostnames outside .global. It is
// owned by the policies that export, so it goes once none does.
func crossNetworkGateways(t *target, plan *trafficPlan, remote *remoteServices, out *outputs) {
	var parents []policyv1alpha1.Policy
	hosts := map[string]bool{}
	for _, k := range slices.SortedFunc(maps.Keys(remote.exports), sdk.ServiceKey.Compare) {
		hosts[globalHosts] = true
		for _, p := range remote.exports[k].parents {
			if !slices.Contains(parents, p) {
				parents = append(parents, p)
			}
		}
	}
	if plan.Multi {
		for _, vd := range t.fleet.VirtualDestinations() {
			facts := plan.Virtual[sdk.RefOf(vd)]
			if facts == nil || !facts.Accepted || !slices.ContainsFunc(facts.Backing, func(k sdk.ServiceKey) bool { return k.Cluster == t.name }) {
				continue
			}
			if strings.HasSuffix(vd.Spec.Hostname, "."+remoteHostSuffix) {
				hosts[globalHosts] = true
			} else {
				hosts[vd.Spec.Hostname] = true
			}
			parents = append(parents, vd)
		}
	}
	if len(parents) == 0 {
		return
	}
	for _, g := range t.eastWestGateways(t.name) {
		gw := &clientnetworking.Gateway{
			TypeMeta:   gatewayType,
			ObjectMeta: metav1.ObjectMeta{Name: objectName(g.Name, remoteHostSuffix), Namespace: cmp.Or(g.Namespace, t.rootNamespace(t.name))},
		}
		gw.Spec.Selector = maps.Clone(g.Spec.Selector)
		if len(gw.Spec.Selector) == 0 {
			gw.Spec.Selector = maps.Clone(defaultGatewaySelector)
		}
		gw.Spec.Servers = []*networking.Server{{
			Port:  &networking.Port{Number: gatewayPort(g), Name: gatewayPortName, Protocol: "TLS"},
			Hosts: slices.Sorted(maps.Keys(hosts)),
			Tls:   &networking.ServerTLSSettings{Mode: networking.ServerTLSSettings_AUTO_PASSTHROUGH},
		}}
		out.putShared(t.name, gw, parents)
	}
}

// eastWestGateways returns the cluster's Istio east-west gateways as
// discovery reported them, sorted by namespace and name.
func (v *view) eastWestGateways(cluster string) []*discoveryapi.Gateway {
	c, ok := v.fleet.Cluster(cluster)
	if !ok {
		return nil
	}
	return slices.DeleteFunc(slices.Clone(c.Gateways()), func(g *discoveryapi.Gateway) bool {
		return g.Spec.Mesh != "" && g.Spec.Mesh != discoveryapi.MeshIstio
	})
}

// gatewayPort returns an east-west gateway's cross-network port.
func gatewayPort(g *discoveryapi.Gateway) uint32 {
	if g.Spec.Port > 0 {
		return uint32(g.Spec.Port)
	}
	return DefaultGatewayPort
}
