package xds

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	// The filter configurations translators embed in typed_config fields;
	// registering them lets protojson encode and decode those Anys.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
)

// Group, Version and APIVersion of the wrapper objects that carry xDS
// resources from the translator to the agent.
const (
	Group      = "xds.meshrelay.io"
	Version    = "v1alpha1"
	APIVersion = Group + "/" + Version
)

// Kinds of wrapper objects, one per xDS resource type.
const (
	KindListener              = "Listener"
	KindRouteConfiguration    = "RouteConfiguration"
	KindCluster               = "Cluster"
	KindClusterLoadAssignment = "ClusterLoadAssignment"
)

// xDS type URLs of the resources the wrappers carry.
const (
	ListenerType = "type.googleapis.com/envoy.config.listener.v3.Listener"
	RouteType    = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
	ClusterType  = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	EndpointType = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
)

var kindTypeURL = map[string]string{
	KindListener:              ListenerType,
	KindRouteConfiguration:    RouteType,
	KindCluster:               ClusterType,
	KindClusterLoadAssignment: EndpointType,
}

// TypeURLOf returns the xDS type URL of a wrapper kind, or "" for a kind
// that is not one.
func TypeURLOf(kind string) string { return kindTypeURL[kind] }

// Object is the Kubernetes-shaped wrapper of one xDS resource: kind is the
// resource type, metadata.name the xDS resource name, metadata.namespace the
// xDS node ID (node group) it is served to, and spec.resource the resource in
// protobuf JSON, with its "@type".
type Object struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Metadata   Metadata `json:"metadata"`
	Spec       Spec     `json:"spec"`
}

// Metadata is the part of Kubernetes object metadata a wrapper uses.
type Metadata struct {
	Name        string            `json:"name"`
	Namespace   string            `json:"namespace"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// Spec holds the wrapped resource.
type Spec struct {
	// Resource is the xDS resource as protobuf JSON, an Any with "@type".
	Resource json.RawMessage `json:"resource"`
}

// Resource is a decoded wrapper: the node it is for and the xDS resource.
type Resource struct {
	// NodeID is the xDS node ID (metadata.namespace).
	NodeID string
	// Name is the xDS resource name.
	Name string
	// TypeURL is the resource's xDS type URL.
	TypeURL string
	// Message is the resource: a *listenerv3.Listener,
	// *routev3.RouteConfiguration, *clusterv3.Cluster or
	// *endpointv3.ClusterLoadAssignment.
	Message proto.Message
}

// ResourceName returns the xDS name of one of the four resource types, or
// "" for another message.
func ResourceName(m proto.Message) string {
	switch m := m.(type) {
	case *listenerv3.Listener:
		return m.GetName()
	case *routev3.RouteConfiguration:
		return m.GetName()
	case *clusterv3.Cluster:
		return m.GetName()
	case *endpointv3.ClusterLoadAssignment:
		return m.GetClusterName()
	}
	return ""
}

// KindOf returns the wrapper kind of one of the four resource types, or ""
// for another message.
func KindOf(m proto.Message) string {
	switch m.(type) {
	case *listenerv3.Listener:
		return KindListener
	case *routev3.RouteConfiguration:
		return KindRouteConfiguration
	case *clusterv3.Cluster:
		return KindCluster
	case *endpointv3.ClusterLoadAssignment:
		return KindClusterLoadAssignment
	}
	return ""
}

// Encode wraps an xDS resource for the node group nodeID. The resource must
// be a Listener, RouteConfiguration, Cluster or ClusterLoadAssignment with
// a name.
func Encode(nodeID string, m proto.Message) (Object, error) {
	kind, name := KindOf(m), ResourceName(m)
	switch {
	case kind == "":
		return Object{}, fmt.Errorf("encode %T: not an xds resource type", m)
	case name == "":
		return Object{}, fmt.Errorf("encode %s: resource has no name", kind)
	case nodeID == "":
		return Object{}, fmt.Errorf("encode %s %q: no node id", kind, name)
	}
	spec, err := JSON(m)
	if err != nil {
		return Object{}, fmt.Errorf("encode %s %q: %w", kind, name, err)
	}
	return Wrap(nodeID, m, spec), nil
}

// Wrap builds the wrapper of a resource already encoded by [JSON].
func Wrap(nodeID string, m proto.Message, spec json.RawMessage) Object {
	return Object{
		APIVersion: APIVersion,
		Kind:       KindOf(m),
		Metadata:   Metadata{Name: ResourceName(m), Namespace: nodeID},
		Spec:       Spec{Resource: spec},
	}
}

// JSON returns the protobuf JSON of m as an Any, with "@type" and proto
// field names, compacted: protojson's output is not byte-stable, and equal
// resources must give equal bytes. Messages in typed_config fields must
// have their types linked in.
func JSON(m proto.Message) (json.RawMessage, error) {
	a, err := anypb.New(m)
	if err != nil {
		return nil, err
	}
	raw, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(a)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// ErrNotXDS is returned by Decode for an object that is not an xDS wrapper.
var ErrNotXDS = errors.New("not an xds.meshrelay.io object")

// Decode reads a wrapper object from its JSON (for example the body of an
// output snapshot resource), checks that kind, name and "@type" agree, and
// validates the resource with its ValidateAll rules. An object of another
// group or kind gives an error wrapping ErrNotXDS.
func Decode(body []byte) (Resource, error) {
	var obj Object
	if err := json.Unmarshal(body, &obj); err != nil {
		return Resource{}, fmt.Errorf("decode xds object: %w", err)
	}
	typeURL := kindTypeURL[obj.Kind]
	if obj.APIVersion != APIVersion || typeURL == "" {
		return Resource{}, fmt.Errorf("decode %s %s %q: %w", obj.APIVersion, obj.Kind, obj.Metadata.Name, ErrNotXDS)
	}
	what := fmt.Sprintf("%s %q", obj.Kind, obj.Metadata.Name)
	if obj.Metadata.Namespace == "" {
		return Resource{}, fmt.Errorf("decode %s: metadata.namespace (the node id) is empty", what)
	}
	if len(obj.Spec.Resource) == 0 {
		return Resource{}, fmt.Errorf("decode %s: spec.resource is empty", what)
	}
	var a anypb.Any
	if err := protojson.Unmarshal(obj.Spec.Resource, &a); err != nil {
		return Resource{}, fmt.Errorf("decode %s: %w", what, err)
	}
	if a.GetTypeUrl() != typeURL {
		return Resource{}, fmt.Errorf("decode %s: resource has @type %q, want %q", what, a.GetTypeUrl(), typeURL)
	}
	m, err := a.UnmarshalNew()
	if err != nil {
		return Resource{}, fmt.Errorf("decode %s: %w", what, err)
	}
	if name := ResourceName(m); name != obj.Metadata.Name {
		return Resource{}, fmt.Errorf("decode %s: resource is named %q", what, name)
	}
	if v, ok := m.(interface{ ValidateAll() error }); ok {
		if err := v.ValidateAll(); err != nil {
			return Resource{}, fmt.Errorf("validate %s: %w", what, err)
		}
	}
	return Resource{NodeID: obj.Metadata.Namespace, Name: obj.Metadata.Name, TypeURL: typeURL, Message: m}, nil
}
