package host

import (
	"errors"

	"github.com/meshrelay/meshrelay/api/meta"
	"github.com/meshrelay/meshrelay/api/snapshot"
)

// ErrPluginFailed is wrapped by the error [Session.Translate] returns when
// the plugin answered but could not translate (its Translate returned an
// error). The session stays usable: the next update may be a delta.
var ErrPluginFailed = errors.New("plugin could not translate")

// ErrProtocol is wrapped by the errors of answers that break the protocol:
// malformed or oversized outputs, outputs for clusters the plugin was not
// told about or backends it does not serve, parts out of order. The
// session is then unusable.
var ErrProtocol = errors.New("plugin broke the translator protocol")

// DefaultMaxOutputBytes is the default bound of the bodies of one
// (cluster, backend) output set: 256 MiB.
const DefaultMaxOutputBytes = 256 << 20

// Update is one change of the fleet view sent to a translator.
type Update struct {
	// Full replaces the translator's whole view.
	Full bool
	// Clusters are the clusters that changed (all of them when Full).
	Clusters []ClusterUpdate
	// PolicyUpserts and PolicyDeletes change the policies of the
	// management source.
	PolicyUpserts []snapshot.Resource
	PolicyDeletes []snapshot.ID
	// Scoped limits the answer to the Targets: the translator computes
	// and sends outputs for those clusters only. Unset, every cluster of
	// the view is a target.
	Scoped  bool
	Targets []string
	// Accepted, when set, returns the output the host holds for cluster
	// and backend (nil for none). A resource of the answer with the same
	// identity and hash as one in it was checked when it was accepted and
	// is not checked again, so an answer costs the host what changed.
	Accepted func(cluster, backend string) *snapshot.Snapshot
}

// ClusterUpdate is the change of one cluster's inputs.
type ClusterUpdate struct {
	Name string
	// Removed is true when the cluster left the fleet.
	Removed bool
	// Stale is true while the cluster's agent is disconnected.
	Stale bool
	// Meshes are the cluster's mesh types, as found by discovery.
	Meshes []string
	// Labels are the cluster's labels in the registry, whole (not a delta).
	Labels  map[string]string
	Upserts []snapshot.Resource
	Deletes []snapshot.ID
}

// Result is a translator's answer to one update.
type Result struct {
	// Outputs are the (cluster, backend) sets that changed, each complete,
	// sorted by cluster and backend.
	Outputs []ClusterOutput
	// Diagnostics are every current diagnostic of the translator, in the
	// order it sent them.
	Diagnostics []meta.Diagnostic
}

// ClusterOutput is the complete set of resources of one backend in one
// cluster. An empty Resources means the set was emptied.
type ClusterOutput struct {
	Cluster, Backend string
	Resources        []snapshot.Resource
}
