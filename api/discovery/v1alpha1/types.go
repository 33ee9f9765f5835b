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
	// MeshLinkerd is Linkerd, found by its linkerd-destination Deployment.
	MeshLinkerd = "linkerd"
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
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:categories=meshrelay-discovery
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.cluster`
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.type`
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.spec.version`
type Mesh struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              MeshSpec `json:"spec"`
}

// MeshSpec describes a mesh found in a cluster.
type MeshSpec struct {
	// Type is istio, cilium, envoy or linkerd.
	Type string `json:"type"`
	// Namespace is where the mesh's control plane runs.
	Namespace string `json:"namespace,omitempty"`
	// Version is the control plane's version, from its image tag, when known.
	Version string `json:"version,omitempty"`
	// TrustDomain is Istio's trust domain ("cluster.local" by default), or
	// Linkerd's identity trust domain (its destination controller's
	// -identity-trust-domain, "cluster.local" by default).
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
	// TrustAnchors are, for a Linkerd mesh, the SHA-256 fingerprints (hex)
	// of its trust anchors, the certificates of the
	// linkerd-identity-trust-roots ConfigMap, sorted, when discovered.
	// Clusters joined by Linkerd multicluster share them.
	TrustAnchors []string `json:"trustAnchors,omitempty"`
	// LinkedClusters are, for a Linkerd mesh with the multicluster
	// extension, the clusters its Links (multicluster.linkerd.io) name as
	// targets, sorted: their exported Services are mirrored here as
	// "<service>-<cluster>". Empty without Links.
	LinkedClusters []string `json:"linkedClusters,omitempty"`
	// Multicluster is true for a Linkerd mesh whose multicluster extension
	// runs here (a Link, or the linkerd-gateway Deployment).
	Multicluster bool `json:"multicluster,omitempty"`
	// Cluster is the cluster the mesh runs in. Agents leave it empty (a
	// snapshot is one cluster's); the server sets it on the copies it
	// serves and writes to the management cluster.
	Cluster string `json:"cluster,omitempty"`
}

// MeshList is a list of Mesh.
//
// +kubebuilder:object:root=true
type MeshList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Mesh `json:"items"`
}

// Gateway is an east-west gateway of a cluster. It exists only in
// snapshots: it has no CRD (make generate removes the one controller-gen
// writes for it).
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

// Label keys the server sets on the discovery objects it writes to the
// management cluster, whose names are made unique across the fleet.
const (
	// ClusterLabel is the workload cluster the object describes.
	ClusterLabel = "discovery.meshrelay.io/cluster"
	// NamespaceLabel is the object's namespace in that cluster.
	NamespaceLabel = "discovery.meshrelay.io/namespace"
	// NameLabel is the object's name in that cluster (when it is a valid
	// label value; Spec always has it).
	NameLabel = "discovery.meshrelay.io/name"
)

// Workload is a controller's pods in one cluster: a Deployment, StatefulSet
// or DaemonSet. The server derives it from the cluster's inputs.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:categories=meshrelay-discovery
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.cluster`
// +kubebuilder:printcolumn:name="Namespace",type=string,JSONPath=`.spec.namespace`
// +kubebuilder:printcolumn:name="Workload",type=string,JSONPath=`.spec.name`
// +kubebuilder:printcolumn:name="Kind",type=string,JSONPath=`.spec.kind`
type Workload struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              WorkloadSpec `json:"spec"`
}

// WorkloadSpec describes a workload.
type WorkloadSpec struct {
	// Cluster, Namespace and Name locate the controller.
	Cluster   string `json:"cluster"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Kind is Deployment, StatefulSet or DaemonSet.
	Kind string `json:"kind"`
	// Labels are the pod template's labels.
	Labels map[string]string `json:"labels,omitempty"`
	// ServiceAccount is the pods' service account.
	ServiceAccount string `json:"serviceAccount"`
	// Replicas is the desired number of pods; 0 for a DaemonSet.
	Replicas int32 `json:"replicas"`
	// Localities are the "region/zone" of the nodes its endpoints run on.
	Localities []string `json:"localities,omitempty"`
	// Meshes are the mesh types whose data plane the pods join.
	Meshes []string `json:"meshes,omitempty"`
	// Destinations are the Services of its namespace that select its pods.
	Destinations []string `json:"destinations,omitempty"`
	// Endpoints and ReadyEndpoints count the Service endpoints that are
	// its pods.
	Endpoints      int32 `json:"endpoints"`
	ReadyEndpoints int32 `json:"readyEndpoints"`
}

// WorkloadList is a list of Workload.
//
// +kubebuilder:object:root=true
type WorkloadList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Workload `json:"items"`
}

// Destination is a Service in one cluster with what backs it. The server
// derives it from the cluster's inputs.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:categories=meshrelay-discovery
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.cluster`
// +kubebuilder:printcolumn:name="Namespace",type=string,JSONPath=`.spec.namespace`
// +kubebuilder:printcolumn:name="Service",type=string,JSONPath=`.spec.name`
type Destination struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              DestinationSpec `json:"spec"`
}

// DestinationSpec describes a destination.
type DestinationSpec struct {
	// Cluster, Namespace and Name locate the Service.
	Cluster   string `json:"cluster"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Labels are the Service's labels.
	Labels map[string]string `json:"labels,omitempty"`
	// Type is the Service's type.
	Type  string            `json:"type,omitempty"`
	Ports []DestinationPort `json:"ports,omitempty"`
	// Workloads are the backing workloads, as "Kind/name".
	Workloads []string `json:"workloads,omitempty"`
	// Endpoints and ReadyEndpoints count the Service's endpoints.
	Endpoints      int32 `json:"endpoints"`
	ReadyEndpoints int32 `json:"readyEndpoints"`
	// Meshes are the mesh types of its backing workloads.
	Meshes []string `json:"meshes,omitempty"`
}

// DestinationPort is one port of a Service.
type DestinationPort struct {
	Name     string `json:"name,omitempty"`
	Port     int32  `json:"port"`
	Protocol string `json:"protocol,omitempty"`
	// TargetPort is the workload port, a number or a container port name.
	TargetPort  string `json:"targetPort,omitempty"`
	AppProtocol string `json:"appProtocol,omitempty"`
}

// DestinationList is a list of Destination.
//
// +kubebuilder:object:root=true
type DestinationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Destination `json:"items"`
}
