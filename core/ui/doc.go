// Package ui serves meshrelay's read-only web UI: the fleet as a graph of
// clusters, meshes and destinations with the cross-cluster edges that
// VirtualDestinations and AccessPolicies create, each policy's status, the
// destination and policy pages of `meshrelay describe`, and each cluster's
// outputs per backend as YAML, updated live.
//
// The HTTP backend calls the admin API's implementation in process
// (relayv1.AdminServer, from server.Server.AdminServer) with the caller's
// token as "authorization: Bearer TOKEN" in the incoming gRPC metadata, so
// it authenticates exactly as the admin API does, and answers with
// protojson. The token comes from an Authorization header or from a
// session the login page opens: the cookie holds only the session's random
// ID, and the token stays in the UI's memory until the session expires
// (Options.SessionLife) or is logged out; the sessions kept are bounded
// (Options.MaxSessions). Only reading calls are exposed. Text agents
// control is escaped with meta.Printable on the text views (the outputs
// page's comments), and the graph keys each policy with its source.
//
// GET /api/events is a server-sent event stream: it sends the fleet's
// status (event "status") whenever it changes, checking every Options.Poll
// while the stream is open; the streams share one status, so viewers do
// not multiply the admin API's work. Streams are bounded in number
// (Options.MaxStreams) and life (Options.StreamLife). The other endpoints
// (GET /api/status, /api/graph, /api/list/KIND, /api/clusters/NAME,
// /api/clusters/NAME/outputs/BACKEND as YAML, /api/destinations/NS/NAME,
// /api/policies/KIND/NS/NAME) answer one admin call each, /api/graph a few.
// GET /api/traffic and /api/traffic/policies/KIND/NS/NAME answer from the
// Traffic API (Options.Traffic): the workload → destination edges the
// front end draws over the graph and lists as a destination's callers,
// polling every few seconds while shown (web/src/traffic.ts, which finds
// the graph's nodes through graph.ts's anchors), and the error rate of a
// policy's destinations around its last change.
//
// The front end is a Vite + TypeScript project in web/; its build output
// in dist/ is committed and embedded with go:embed, so the binary needs no
// Node at run time. `make ui` rebuilds it (see CONTRIBUTING.md).
package ui
