// Package xds is the wire format of xDS resources between a translator and
// the agent: each Envoy Listener, RouteConfiguration, Cluster or
// ClusterLoadAssignment travels in an output snapshot as a
// Kubernetes-shaped wrapper [Object],
//
//	apiVersion: xds.meshrelay.io/v1alpha1
//	kind: Listener | RouteConfiguration | Cluster | ClusterLoadAssignment
//	metadata: {name: <xDS resource name>, namespace: <node ID>}
//	spec: {resource: <protobuf JSON of the resource, with "@type">}
//
// A translator — the envoy one (plugins/envoy), or a user's plugin under
// any backend name — builds them with [Encode] (or [JSON] and [Wrap]);
// the agent routes them by their [Group] to its xDS server
// (core/agent/xds), which reads and validates them with [Decode], which
// returns an error wrapping [ErrNotXDS] for an object of another kind.
// Both import this package, so neither imports the other.
//
// The package links in the Envoy filter configurations translators embed
// in typed_config fields, so that protojson can encode and decode them.
package xds
