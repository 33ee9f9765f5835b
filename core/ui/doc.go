// Package ui serves meshrelay's read-only web UI: the fleet as a graph of
// clusters, meshes and destinations with the cross-cluster edges that
// VirtualDestinations and AccessPolicies create (grouped by a cluster
// label or by mesh, collapsible, filtered by cluster, namespace and
// destination, in the browser: web/src/graph.ts), each policy's status, the
// destination and policy pages of `meshrelay describe`, each cluster's
// outputs per backend as YAML, and the staged rollout's progress, updated
// live.
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
// status (event "status") whenever its version (relayv1.Status.Version,
// a hash the server computes) changes, checking every Options.Poll while
// the stream is open; the streams share one status and one JSON of each
// version, so viewers do not multiply the admin API's work, and an
// unchanged status is neither serialised nor sent. GET /api/status and a
// stream's first event serve that shared status too (no older than half
// Options.Poll), so opening a page computes no status of its own. Streams
// are bounded in number (Options.MaxStreams) and life
// (Options.StreamLife). The other endpoints (GET /api/graph,
// /api/list/KIND, /api/clusters/NAME,
// /api/clusters/NAME/outputs/BACKEND as YAML, /api/destinations/NS/NAME,
// /api/policies/KIND/NS/NAME) answer one admin call each, /api/graph a few.
// GET /api/rollout answers GetRollout (rollout.go) grouped by stage for
// the rollout page (web/src/rollout.ts): each stage's state, its
// clusters' counts by state and a bounded list of them (rolloutClusters,
// the failing first; ?show=STAGE:N for more, ?match= to filter by name),
// the gates still to pass, and "rollout": null when there was none. The
// page polls it every 2 s while shown, as well as on each status event,
// and shows for the policies the rollout carries (those whose status names
// it) the error rate around their change with traffic.ts's table.
// GET /api/traffic and /api/traffic/policies/KIND/NS/NAME answer from the
// Traffic API (Options.Traffic): the workload → destination edges the
// front end draws over the graph and lists as a destination's callers,
// polling every few seconds while shown (web/src/traffic.ts, which finds
// the graph's nodes through graph.ts's nodeAnchor and redraws on its
// onLayout), and the error rate of a
// policy's destinations around its last change.
// /api/graph and /api/policies come from a cache shared by the viewers
// (sharedCache): each is computed at most once at a time and served for
// 5 s, then served marked "stale" while it is computed again; every
// request still checks its token (with the admin API's Authorize when it
// has one, server.Server.AdminServer's, which computes nothing); the cache
// is bounded in entries and in bytes (sharedMaxBytes), and a policy page
// filtered by cluster, one reader's, takes at most sharedMaxFiltered of
// them and is dropped first. /api/policies sends a page of the policy's
// outputs (?outputs=N, 200 by default, of the clusters whose names contain
// ?match=) with outputsTotal and outputsMatching: it reads the policy's
// outline (DescribePolicy with outline) and asks only for the page's
// outputs (output_clusters, output_limit), never the fleet's.
//
// The front end is a Vite + TypeScript project in web/; its build output
// in dist/ is committed and embedded with go:embed, so the binary needs no
// Node at run time. `make ui` rebuilds it (see CONTRIBUTING.md).
package ui
