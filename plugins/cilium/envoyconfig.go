package cilium

import (
	"cmp"
	"encoding/json"
	"slices"
	"strconv"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discoveryapi "github.com/meshrelay/meshrelay/api/discovery/v1alpha1"
	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/api/xds"
	"github.com/meshrelay/meshrelay/plugins/internal/envoyroute"
	"github.com/meshrelay/meshrelay/sdk"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// envoyConfig is a CiliumEnvoyConfig: the Services whose traffic Cilium
// redirects to Envoy listeners, the Services whose endpoints it syncs to
// Envoy over EDS, and the Envoy resources.
type envoyConfig struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              envoyConfigSpec `json:"spec"`
}

type envoyConfigSpec struct {
	Services        []redirectedService `json:"services"`
	BackendServices []backendService    `json:"backendServices,omitempty"`
	// Resources are Envoy resources in protobuf JSON, each with "@type".
	Resources []json.RawMessage `json:"resources"`
}

// redirectedService sends the traffic to some ports of a Service to one
// of the config's listeners.
type redirectedService struct {
	Name      string   `json:"name"`
	Namespace string   `json:"namespace"`
	Listener  string   `json:"listener"`
	Ports     []uint16 `json:"ports"`
}

// backendService has Cilium sync a Service's endpoints at some ports to
// Envoy, as the EDS clusters "namespace/name:port".
type backendService struct {
	Name      string   `json:"name"`
	Namespace string   `json:"namespace"`
	Number    []string `json:"number"`
}

// defaultRouteName names the route envoyroute.Routes ends with.
const defaultRouteName = "default"

// connectTimeout bounds connecting to a backend, as Cilium's own Ingress
// and Gateway API clusters do.
const connectTimeout = 5 * time.Second

// envoyConfigEnabled reports whether the target's Cilium takes
// CiliumEnvoyConfig (discovery reads it from Cilium's configuration).
func envoyConfigEnabled(c *sdk.Cluster) bool {
	for _, m := range c.MeshInfo() {
		if m.Spec.Type == discoveryapi.MeshCilium && m.Spec.EnvoyConfig {
			return true
		}
	}
	return false
}

// envoyConfigs emits, for each Service of the target that TrafficPolicies
// select, a CiliumEnvoyConfig in its namespace that redirects its HTTP
// ports to an Envoy listener each, routing as the policies' rules say, in
// policy order; see routeEnvoyConfig. selected lists the policies of each
// Service, in the order of the Services.
func (tr *translation) envoyConfigs(services []*corev1.Service, selected map[*corev1.Service][]*policyv1alpha1.TrafficPolicy) {
	for _, svc := range services {
		if cfg, ok := tr.routeEnvoyConfig(svc, withoutFaults(selected[svc])); ok {
			parents := make([]policyv1alpha1.Policy, len(selected[svc]))
			for i, tp := range selected[svc] {
				parents[i] = tp
			}
			tr.emit(cfg, parents...)
		}
	}
}

// routeEnvoyConfig builds the CiliumEnvoyConfig of one Service: for each of
// its TCP ports that carries HTTP (envoyroute.TCPPort), a listener
// "http-<port>" whose HTTP connection manager routes with the rules and
// then to the Service at that port; an EDS cluster per backend Service
// port, named "namespace:name:port" as Cilium names its own (Cilium
// qualifies these names with the config's namespace and name, in the
// clusters and in the routes alike). ok is false when no port carries HTTP.
func (tr *translation) routeEnvoyConfig(svc *corev1.Service, tps []*policyv1alpha1.TrafficPolicy) (envoyConfig, bool) {
	b := envoyConfigBuilder{tr: tr, backends: map[backendKey]bool{}}
	var services []redirectedService
	var listeners []proto.Message
	applied := false
	for _, sp := range sortedPorts(svc) {
		if sp.Protocol != "" && sp.Protocol != corev1.ProtocolTCP || envoyroute.TCPPort(sp) {
			continue
		}
		name := "http-" + strconv.Itoa(int(sp.Port))
		def := b.cluster(svc.Namespace, svc.Name, sp.Port)
		routes, _ := envoyroute.Routes(tps, func(tp *policyv1alpha1.TrafficPolicy, path string, d policyv1alpha1.Destination) (string, bool) {
			return b.resolve(tp, path, d, sp.Port)
		}, def)
		applied = applied || len(routes) > 1 || routes[0].GetName() != defaultRouteName
		hcm := &hcmv3.HttpConnectionManager{
			StatPrefix: name,
			RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: &routev3.RouteConfiguration{
				Name:         name,
				VirtualHosts: []*routev3.VirtualHost{{Name: name, Domains: []string{"*"}, Routes: routes}},
			}},
			HttpFilters: envoyroute.HTTPFilters(false),
		}
		listeners = append(listeners, &listenerv3.Listener{
			Name: name,
			FilterChains: []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{{
				Name:       envoyroute.HCMFilter,
				ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: envoyroute.Any(hcm)},
			}}}},
		})
		services = append(services, redirectedService{Name: svc.Name, Namespace: svc.Namespace, Listener: name, Ports: []uint16{uint16(sp.Port)}})
	}
	if !applied {
		// No port carries HTTP, or no rule could be served: redirecting
		// the traffic through Envoy would change nothing.
		return envoyConfig{}, false
	}
	resources, err := encodeAll(append(listeners, b.clusters()...))
	if err != nil {
		tr.diags.add(sdk.Errorf(tps[0], "spec.http", "encode the CiliumEnvoyConfig of Service %s/%s: %v", svc.Namespace, svc.Name, err), tr.target.Name, "")
		return envoyConfig{}, false
	}
	return envoyConfig{
		TypeMeta:   metav1.TypeMeta{APIVersion: APIVersion, Kind: KindEnvoyConfig},
		ObjectMeta: metav1.ObjectMeta{Name: serviceObjectName("traffic", svc), Namespace: svc.Namespace},
		Spec:       envoyConfigSpec{Services: services, BackendServices: b.backendServices(), Resources: resources},
	}, true
}

// encodeAll encodes Envoy resources, which fails only for a resource
// embedding a message of an unlinked type.
func encodeAll(ms []proto.Message) ([]json.RawMessage, error) {
	out := make([]json.RawMessage, 0, len(ms))
	for _, m := range ms {
		raw, err := xds.JSON(m)
		if err != nil {
			return nil, err
		}
		out = append(out, raw)
	}
	return out, nil
}

// backendKey is a Service port whose endpoints Cilium syncs to Envoy.
type backendKey struct {
	namespace, name string
	port            int32
}

// envoyConfigBuilder collects the backends of one CiliumEnvoyConfig.
type envoyConfigBuilder struct {
	tr       *translation
	backends map[backendKey]bool
}

// cluster names the EDS cluster of a Service port, adding it.
func (b *envoyConfigBuilder) cluster(namespace, name string, port int32) string {
	k := backendKey{namespace, name, port}
	b.backends[k] = true
	return clusterName(k)
}

func clusterName(k backendKey) string {
	return k.namespace + ":" + k.name + ":" + strconv.Itoa(int(k.port))
}

// resolve names the cluster of a rule's destination, listening at
// listenerPort. Cilium's Envoy reaches only the Services of its own
// cluster, whole: a destination in another cluster, a subset or a
// VirtualDestination leaves the rule out, with a warning.
func (b *envoyConfigBuilder) resolve(tp *policyv1alpha1.TrafficPolicy, path string, d policyv1alpha1.Destination, listenerPort int32) (string, bool) {
	target := b.tr.target
	warn := func(field, format string, args ...any) (string, bool) {
		b.tr.diags.add(sdk.Warningf(tp, path+field, format+"; the rule is not applied in cluster %q", append(args, target.Name)...), target.Name, "")
		return "", false
	}
	switch {
	case d.VirtualDestination != nil:
		return warn(".virtualDestination", "Cilium's Envoy cannot route to a virtual destination")
	case d.Service == nil:
		return warn("", "destination names neither a service nor a virtual destination")
	case len(d.Subset) > 0:
		return warn(".subset", "Cilium's Envoy gets a Service's endpoints from Cilium, which knows no subsets")
	case d.Service.Cluster != target.Name:
		return warn(".service.cluster", "Cilium's Envoy in cluster %q reaches only Services of its own cluster, not of %q", target.Name, d.Service.Cluster)
	}
	ref := d.Service
	svc, ok := target.Service(ref.Namespace, ref.Name)
	if !ok {
		return warn(".service", "service %s/%s not found in cluster %q", ref.Namespace, ref.Name, ref.Cluster)
	}
	port := ref.Port
	if port == 0 {
		port = listenerPort
		if len(svc.Spec.Ports) == 1 {
			port = svc.Spec.Ports[0].Port
		}
	}
	if !slices.ContainsFunc(svc.Spec.Ports, func(sp corev1.ServicePort) bool { return sp.Port == port }) {
		return warn(".service.port", "service %s/%s in cluster %q has no port %d", ref.Namespace, ref.Name, ref.Cluster, port)
	}
	return b.cluster(ref.Namespace, ref.Name, port), true
}

// clusters returns the EDS clusters of the backends, sorted by name.
func (b *envoyConfigBuilder) clusters() []proto.Message {
	var out []proto.Message
	for _, k := range b.sortedBackends() {
		out = append(out, &clusterv3.Cluster{
			Name:                 clusterName(k),
			ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
			ConnectTimeout:       durationpb.New(connectTimeout),
			// Cilium fills in its own config source.
			EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{ServiceName: k.namespace + "/" + k.name + ":" + strconv.Itoa(int(k.port))},
		})
	}
	return out
}

// backendServices lists the backends' Services with their ports.
func (b *envoyConfigBuilder) backendServices() []backendService {
	var out []backendService
	for _, k := range b.sortedBackends() {
		n := strconv.Itoa(int(k.port))
		if last := len(out) - 1; last >= 0 && out[last].Namespace == k.namespace && out[last].Name == k.name {
			out[last].Number = append(out[last].Number, n)
			continue
		}
		out = append(out, backendService{Name: k.name, Namespace: k.namespace, Number: []string{n}})
	}
	return out
}

func (b *envoyConfigBuilder) sortedBackends() []backendKey {
	keys := make([]backendKey, 0, len(b.backends))
	for k := range b.backends {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(x, y backendKey) int {
		return cmp.Or(cmp.Compare(x.namespace, y.namespace), cmp.Compare(x.name, y.name), cmp.Compare(x.port, y.port))
	})
	return keys
}

// sortedPorts returns a Service's ports by number.
func sortedPorts(svc *corev1.Service) []corev1.ServicePort {
	ports := slices.Clone(svc.Spec.Ports)
	slices.SortFunc(ports, func(a, b corev1.ServicePort) int { return cmp.Compare(a.Port, b.Port) })
	return ports
}

// withoutFaults returns the policies with their rules' fault injection
// removed: Cilium's Envoy is built without the HTTP fault filter, and
// trafficWarnings says so.
func withoutFaults(tps []*policyv1alpha1.TrafficPolicy) []*policyv1alpha1.TrafficPolicy {
	out := make([]*policyv1alpha1.TrafficPolicy, len(tps))
	for i, tp := range tps {
		out[i] = tp
		if !slices.ContainsFunc(tp.Spec.HTTP, func(r policyv1alpha1.HTTPRule) bool { return r.Fault != nil }) {
			continue
		}
		out[i] = tp.DeepCopy()
		for j := range out[i].Spec.HTTP {
			out[i].Spec.HTTP[j].Fault = nil
		}
	}
	return out
}
