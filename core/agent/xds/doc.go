// Package xds is the agent's xDS server: it serves the xDS resources that
// any backend's translator emitted for this cluster (the envoy translator's,
// or a user's plugin's) to local Envoy proxies and proxyless gRPC clients
// over ADS, state of the world and delta.
//
// The agent hands it outputs through [Server.Apply] like any other sink;
// it is an agent.GroupSink taking the xDS resources only ([Server.TakesGroup]),
// whatever backend emitted them. Each such resource is an xds.meshrelay.io
// wrapper (see api/xds.Decode) whose namespace is the xDS node ID it is
// for. Apply decodes and validates every resource, builds one snapshot per
// node, drops what would leave a node's snapshot inconsistent (a
// ClusterLoadAssignment no Cluster uses, a Listener whose
// RouteConfiguration is missing), and reports each dropped resource as a
// per-resource error; the rest is served. Versions are content hashes, per
// resource type, so an unchanged type is not pushed again.
//
// Each backend's resources are kept apart, and pruned per backend: a node
// is served what every backend applied for it, and one backend's output,
// even an empty one, never removes another's. When two backends emit a
// resource of the same type and name for one node, the first backend in
// name order is served, and the other's copy is reported failed.
//
// When a proxy rejects what it was sent (a NACK), Options.Report is called
// once per backend whose output carried the rejected resources, with the
// ID of each, so the agent reports them as that backend's apply errors;
// Options.OnNack gets the node, the type and the names as the proxy saw
// them.
//
//	srv := xds.New(xds.Options{Addr: ":9977", Logger: logger, Report: a.Report})
//	go srv.Run(ctx)
//	errs, err := srv.Apply(ctx, "envoy", desired, true)
package xds
