package cilium

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Kinds and API version of the Cilium resources the translator emits.
const (
	APIVersion            = "cilium.io/v2"
	KindNetworkPolicy     = "CiliumNetworkPolicy"
	KindClusterwidePolicy = "CiliumClusterwideNetworkPolicy"
	KindEnvoyConfig       = "CiliumEnvoyConfig"
	serviceAPIVersion     = "v1"
	serviceKind           = "Service"
	protocolTCP           = "TCP"
	operatorExists        = "Exists"
	operatorIn            = "In"
	maxPortsPerRule       = 40 // Cilium's limit on the ports of one toPorts entry.
)

// Identity labels Cilium gives every endpoint, written with the k8s source
// prefix. An explicit namespace or cluster key in a fromEndpoints selector
// stops Cilium from narrowing the selector to the policy's own namespace
// and, with policy-default-local-cluster, to the local cluster.
const (
	LabelNamespace      = "k8s:io.kubernetes.pod.namespace"
	LabelServiceAccount = "k8s:io.cilium.k8s.policy.serviceaccount"
	LabelCluster        = "k8s:io.cilium.k8s.policy.cluster"
)

// Annotations of ClusterMesh global services.
const (
	AnnotationGlobal   = "service.cilium.io/global"
	AnnotationAffinity = "service.cilium.io/affinity"
)

// PatchAnnotation marks an output that patches an object meshrelay does not
// own (a Service's annotations) rather than an object it owns. A sink must
// apply it with server-side apply without taking the object over, and when
// it is no longer desired release its fields instead of deleting the
// object.
const PatchAnnotation = "meshrelay.io/patch"

// Service affinities of a global service.
const (
	AffinityLocal  = "local"
	AffinityRemote = "remote"
	AffinityNone   = "none"
)

// networkPolicy is a CiliumNetworkPolicy or CiliumClusterwideNetworkPolicy
// as stored in Kubernetes: one rule in Spec, or several in Specs. The rule
// types below are the subset of Cilium's policy API the translator writes;
// tests check them against Cilium's own api.Rule and sanitizer.
type networkPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              *rule  `json:"spec,omitempty"`
	Specs             []rule `json:"specs,omitempty"`
}

// rules returns the policy's rules, from Spec or Specs.
func (p *networkPolicy) rules() []rule {
	if p.Spec != nil {
		return append([]rule{*p.Spec}, p.Specs...)
	}
	return p.Specs
}

// rule is one Cilium policy rule: the endpoints it selects and what may
// reach them.
type rule struct {
	Description       string        `json:"description,omitempty"`
	EndpointSelector  selector      `json:"endpointSelector"`
	Ingress           []ingressRule `json:"ingress"`
	EnableDefaultDeny *defaultDeny  `json:"enableDefaultDeny,omitempty"`
}

// defaultDeny says in which directions a rule turns on default-deny.
type defaultDeny struct {
	Ingress *bool `json:"ingress,omitempty"`
	Egress  *bool `json:"egress,omitempty"`
}

// selector is a label selector over endpoint identity labels.
type selector struct {
	MatchLabels      map[string]string `json:"matchLabels,omitempty"`
	MatchExpressions []requirement     `json:"matchExpressions,omitempty"`
}

// requirement is one match expression of a selector.
type requirement struct {
	Key      string   `json:"key"`
	Operator string   `json:"operator"`
	Values   []string `json:"values,omitempty"`
}

// ingressRule admits traffic from FromEndpoints to ToPorts. A rule with
// neither admits nothing: it only turns on default-deny.
type ingressRule struct {
	FromEndpoints []selector `json:"fromEndpoints,omitempty"`
	ToPorts       []portRule `json:"toPorts,omitempty"`
}

// portRule is a set of ports and, optionally, the L7 rules on them.
type portRule struct {
	Ports []portProtocol `json:"ports"`
	Rules *l7Rules       `json:"rules,omitempty"`
}

// portProtocol is a port number or name and its protocol.
type portProtocol struct {
	Port     string `json:"port"`
	Protocol string `json:"protocol"`
}

// l7Rules are the L7 rules of a port rule.
type l7Rules struct {
	HTTP []httpRule `json:"http,omitempty"`
}

// httpRule admits requests whose method and path match its regular
// expressions; an empty field matches anything.
type httpRule struct {
	Method string `json:"method,omitempty"`
	Path   string `json:"path,omitempty"`
}

// servicePatch is the part of a Service the translator owns: its name,
// namespace, labels and annotations. The agent applies it with server-side
// apply, so the translator's field manager owns only these fields and the
// Service's spec stays with whoever created it.
type servicePatch struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        patchMeta `json:"metadata"`
}

// patchMeta is the metadata of a servicePatch.
type patchMeta struct {
	Name        string            `json:"name"`
	Namespace   string            `json:"namespace"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}
