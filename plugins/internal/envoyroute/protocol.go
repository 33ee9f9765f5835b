package envoyroute

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// TCPPort reports whether a Service port carries a protocol other than
// HTTP, selected as Istio selects it: the port's appProtocol when set
// (kubernetes.io/h2c and kubernetes.io/ws are HTTP, kubernetes.io/wss is
// not), else its name, either being "<protocol>" or "<protocol>-<suffix>",
// case-insensitively. tcp, tls, https, mongo, mysql and redis are not
// HTTP; http, http2, http_proxy, grpc and grpc-web are, and so is an
// unknown or missing protocol, which Istio sniffs and the envoy backend
// serves as HTTP.
func TCPPort(sp corev1.ServicePort) bool {
	name := sp.Name
	if sp.AppProtocol != nil {
		name = *sp.AppProtocol
		switch name {
		case "kubernetes.io/h2c", "kubernetes.io/ws":
			return false
		case "kubernetes.io/wss":
			return true
		}
	}
	prefix, _, _ := strings.Cut(strings.ToLower(name), "-")
	switch prefix {
	case "tcp", "tls", "https", "mongo", "mysql", "redis":
		return true
	}
	return false
}

// PortProtocol is what a port's protocol was selected from, for messages.
func PortProtocol(sp corev1.ServicePort) string {
	if sp.AppProtocol != nil {
		return "appProtocol " + *sp.AppProtocol
	}
	return "name " + sp.Name
}
