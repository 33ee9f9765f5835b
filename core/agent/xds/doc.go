// Package xds is the agent's xDS server: it serves the Envoy resources the
// envoy translator emitted for this cluster to local Envoy proxies and
// proxyless gRPC clients over ADS, state of the world and delta.
//
// The agent hands it outputs through [Server.Apply] like any other sink.
// Each output resource is an xds.meshrelay.io wrapper (see
// api/xds.Decode) whose namespace is the xDS node ID it is for. Apply
// decodes and validates every resource, builds one snapshot per node,
// drops what would leave a node's snapshot inconsistent (a
// ClusterLoadAssignment no Cluster uses, a Listener whose RouteConfiguration
// is missing), and reports each dropped resource as a per-resource error;
// the rest is served. Versions are content hashes, per resource type, so an
// unchanged type is not pushed again.
//
// When a proxy rejects what it was sent (a NACK), Options.OnNack is called
// with the node, the type and the rejected names, so the agent can report
// them as apply errors.
//
//	srv := xds.New(xds.Options{Addr: ":9977", Logger: logger, OnNack: report})
//	go srv.Run(ctx)
//	errs, err := srv.Apply(ctx, "envoy", desired, true)
package xds
