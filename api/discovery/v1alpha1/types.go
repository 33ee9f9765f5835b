package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// Group is the API group of discovery kinds.
const Group = "discovery.meshrelay.io"

// Version is the API version of discovery kinds.
const Version = "v1alpha1"

// APIVersion is Group/Version.
const APIVersion = Group + "/" + Version

// Mesh types found by discovery.
const (
	MeshIstio  = "istio"
	MeshCilium = "cilium"
	MeshEnvoy  = "envoy"
)

// EnvoyNodeLabel on a workload's pod template says which standalone Envoy (or
// gRPC xDS client) node group its proxies belong to. Its value is the xDS
// node ID the agent serves resources for.
const EnvoyNodeLabel = "meshrelay.io/envoy-node"

// EnvoyProxyLabel on a workload's pod template, next to EnvoyNodeLabel,
// says what consumes its node group's xDS resources: EnvoyProxyEnvoy for
// Envoy proxies, EnvoyProxyGRPC for proxyless gRPC clients and servers.
// A node group none of whose workloads sets it is a gRPC group, as every
// node group was before the label existed.
const EnvoyProxyLabel = "meshrelay.io/envoy-proxy"

// Values of EnvoyProxyLabel and of MeshSpec.EnvoyProxies.
const (
	// EnvoyProxyEnvoy is a node group of Envoy proxies: they take
	// Listeners over LDS only as socket listeners.
	EnvoyProxyEnvoy = "envoy"
	// EnvoyProxyGRPC is a node group of proxyless gRPC clients and
	// servers: clients look Listeners up by the name they dial
	// (api_listeners).
	EnvoyProxyGRPC = "grpc"
)

// Mesh is a mesh found in a cluster.
type Mesh struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              MeshSpec `json:"spec"`
}

// MeshSpec describes a mesh found in a cluster.
type MeshSpec struct {
	// Type is istio, cilium or envoy.
	Type string `json:"type"`
	// Namespace is where the mesh's control plane runs.
	Namespace string `json:"namespace,omitempty"`
	// Version is the control plane's version, from its image tag, when known.
	Version string `json:"version,omitempty"`
	// TrustDomain is Istio's trust domain ("cluster.local" by default).
	TrustDomain string `json:"trustDomain,omitempty"`
	// Network is Istio's network name for the cluster, when set.
	Network string `json:"network,omitempty"`
	// EnvoyNodes lists the node IDs of standalone Envoy groups (type envoy).
	EnvoyNodes []string `json:"envoyNodes,omitempty"`
	// EnvoyProxies says, by node ID, what kind of proxy a node group of
	// EnvoyNodes is (EnvoyProxyEnvoy or EnvoyProxyGRPC), for the node
	// groups whose workloads set EnvoyProxyLabel. A node group it does not
	// list is EnvoyProxyGRPC.
	EnvoyProxies map[string]string `json:"envoyProxies,omitempty"`
	// EnvoyConfig is true for a Cilium mesh whose Envoy takes
	// CiliumEnvoyConfig resources (type cilium): its cilium-config
	// ConfigMap sets enable-envoy-config to "true", as Cilium's Helm value
	// envoyConfig.enabled does.
	EnvoyConfig bool `json:"envoyConfig,omitempty"`
}

// Gateway is an east-west gateway of a cluster.
type Gateway struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              GatewaySpec `json:"spec"`
}

// GatewaySpec describes how other clusters reach a gateway.
type GatewaySpec struct {
	// Mesh is the mesh type the gateway belongs to.
	Mesh string `json:"mesh"`
	// Addresses are IPs or hostnames reachable from other clusters.
	Addresses []string `json:"addresses"`
	// Port is the gateway's cross-cluster (mTLS passthrough) port.
	Port int32 `json:"port"`
	// Network is the network the gateway serves, when set.
	Network string `json:"network,omitempty"`
	// Selector is the gateway Service's selector: the labels of the
	// gateway's pods, which a Gateway resource configuring it selects.
	Selector map[string]string `json:"selector,omitempty"`
}
