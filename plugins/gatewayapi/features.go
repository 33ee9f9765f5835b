package gatewayapi

import (
	discoveryapi "github.com/meshrelay/meshrelay/api/discovery/v1alpha1"
	"github.com/meshrelay/meshrelay/sdk"
)

// Feature is a Gateway API feature name, as conformance reports list it
// in supportedFeatures.
type Feature string

// The optional features a TrafficPolicy's translation uses. Path, header
// and weighted backend matching and the request header modifier are core:
// every implementation of the mesh profile has them.
const (
	MethodMatching             Feature = "HTTPRouteMethodMatching"
	QueryParamMatching         Feature = "HTTPRouteQueryParamMatching"
	ResponseHeaderModification Feature = "HTTPRouteResponseHeaderModification"
	RequestMirror              Feature = "HTTPRouteRequestMirror"
	RequestPercentageMirror    Feature = "HTTPRouteRequestPercentageMirror"
	RequestTimeout             Feature = "HTTPRouteRequestTimeout"
	ParentRefPort              Feature = "HTTPRouteParentRefPort"
	// MeshGRPC is the MESH-GRPC conformance profile: GRPCRoutes whose
	// parent is a Service.
	MeshGRPC Feature = "MESH-GRPC"
)

// Implementation is what one mesh's implementation of the Gateway API
// mesh profile supports.
type Implementation struct {
	// Mesh is the discovered mesh type.
	Mesh string
	// Report names the conformance report Features come from.
	Report string
	// Features are the report's supported features (MESH-HTTP's extended
	// supportedFeatures, and MESH-GRPC when that profile passed).
	Features map[Feature]bool
	// ProtocolDetection is true when the mesh finds HTTP on any TCP port
	// by itself, so every TCP port of a Service can carry routes;
	// otherwise only ports named or declared (appProtocol) HTTP, HTTP2 or
	// gRPC do, by Istio's rules.
	ProtocolDetection bool
	// RetryAnnotations is true when the mesh takes retries from
	// annotations on the route (Linkerd's retry.linkerd.io/*); the
	// standard channel has no retry field (HTTPRouteRetry, GEP-1731, is
	// experimental).
	RetryAnnotations bool
}

// Has reports whether the implementation supports f.
func (i Implementation) Has(f Feature) bool { return i.Features[f] }

// features returns a set of features.
func features(fs ...Feature) map[Feature]bool {
	m := make(map[Feature]bool, len(fs))
	for _, f := range fs {
		m[f] = true
	}
	return m
}

// Implementations are the meshes whose implementation of the mesh profile
// the translator knows, from the Gateway API v1.3.0 conformance reports
// (conformance/reports/v1.3.0 in kubernetes-sigs/gateway-api): Linkerd
// 2.18 (standard channel), Istio 1.26.1 and Cilium main (experimental
// channel). Only the features the translation uses are listed; the
// reports' other features (redirects, rewrites, MeshClusterIPMatching,
// MeshConsumerRoute) are not used.
var Implementations = map[string]Implementation{
	discoveryapi.MeshLinkerd: {
		Mesh:   discoveryapi.MeshLinkerd,
		Report: "linkerd-linkerd/standard-2.18-default-report.yaml",
		Features: features(MethodMatching, QueryParamMatching, ResponseHeaderModification, RequestMirror,
			RequestPercentageMirror, RequestTimeout, ParentRefPort, MeshGRPC),
		ProtocolDetection: true,
		RetryAnnotations:  true,
	},
	discoveryapi.MeshIstio: {
		Mesh:   discoveryapi.MeshIstio,
		Report: "istio-istio/experimental-1.26.1-default-report.yaml",
		Features: features(MethodMatching, QueryParamMatching, ResponseHeaderModification, RequestMirror,
			RequestPercentageMirror, RequestTimeout, ParentRefPort),
	},
	discoveryapi.MeshCilium: {
		Mesh:   discoveryapi.MeshCilium,
		Report: "cilium-cilium/experimental-main-default-report.yaml",
		Features: features(MethodMatching, QueryParamMatching, ResponseHeaderModification, RequestMirror,
			RequestPercentageMirror, RequestTimeout, MeshGRPC),
	},
}

// RoutesLabel, with the value [RoutesValue] on the Namespace of an Istio
// or Cilium control plane, makes the translator serve that cluster. A
// cluster running Linkerd is always served: no other backend routes
// there. Istio and Cilium clusters have their own backends' routing, and
// two backends routing one Service conflict, so they opt in.
const (
	RoutesLabel = "meshrelay.io/routes"
	RoutesValue = "gatewayapi"
)

// implementationOf returns the implementation of the mesh profile that
// serves the target: Linkerd where it runs, else Istio or Cilium where the
// control plane's Namespace opts in (RoutesLabel).
func implementationOf(c *sdk.Cluster) (Implementation, bool) {
	if c.HasMesh(discoveryapi.MeshLinkerd) {
		return Implementations[discoveryapi.MeshLinkerd], true
	}
	for _, mesh := range []string{discoveryapi.MeshIstio, discoveryapi.MeshCilium} {
		if !c.HasMesh(mesh) {
			continue
		}
		for _, m := range c.MeshInfo() {
			if m.Spec.Type != mesh {
				continue
			}
			for _, ns := range c.Namespaces() {
				if ns.Name == m.Spec.Namespace && ns.Labels[RoutesLabel] == RoutesValue {
					return Implementations[mesh], true
				}
			}
		}
	}
	return Implementation{}, false
}

// meshOf returns the target's discovered Mesh of a type.
func meshOf(c *sdk.Cluster, mesh string) (discoveryapi.MeshSpec, bool) {
	for _, m := range c.MeshInfo() {
		if m.Spec.Type == mesh {
			return m.Spec, true
		}
	}
	return discoveryapi.MeshSpec{}, false
}
