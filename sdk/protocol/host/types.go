package host

import (
	"errors"
	"maps"
	"slices"

	"github.com/meshrelay/meshrelay/api/meta"
	"github.com/meshrelay/meshrelay/api/snapshot"
)

// ErrPluginFailed is wrapped by the error [Session.Translate] returns when
// the plugin answered but could not translate (its Translate returned an
// error). The session stays usable, and its next update is full: the
// plugin may hold part of the one it failed on.
var ErrPluginFailed = errors.New("plugin could not translate")

// ErrProtocol is wrapped by the errors of answers that break the protocol:
// malformed or oversized outputs, outputs for clusters the plugin was not
// told about or backends it does not serve, parts out of order. The
// session is then unusable.
var ErrProtocol = errors.New("plugin broke the translator protocol")

// DefaultMaxOutputBytes is the default bound of the bodies of one
// (cluster, backend) output set: 256 MiB.
const DefaultMaxOutputBytes = 256 << 20

// View is the fleet a host wants a translator to hold: each cluster's
// input, the management source's policies and the targets to compute.
// The session works out what to send: the whole view the first time and
// after any failure, otherwise only what changed since the view the
// plugin last answered for.
type View struct {
	// Clusters are the fleet's clusters, by name.
	Clusters map[string]Cluster
	// Policies are the management source's policies; nil is none.
	Policies *snapshot.Snapshot
	// Scoped limits the answer to the Targets: the translator computes
	// and sends outputs for those clusters only. Unset, every cluster of
	// the view is a target.
	Scoped bool
	// Targets are sorted.
	Targets []string
	// Seq numbers the view (0: no number), and Changed names every
	// cluster that may differ between the view numbered Base and this one
	// (changed, joined or left). A session that holds the view numbered
	// Base compares only those clusters with what the plugin holds; with
	// Base 0, or holding another view, it compares every cluster (or,
	// for a view changed InPlace, sends the whole view).
	Seq, Base uint64
	Changed   []string
	// InPlace says the host changes one Clusters map in place from view
	// to view, so the map of a view the plugin holds no longer shows that
	// view once the next is made. Was then holds what each cluster
	// Changed names was in the view numbered Base (a cluster Was lacks
	// was not in it), and the session compares the changed clusters with
	// Was. A plugin holding any view but Base gets the whole view.
	InPlace bool
	Was     map[string]Cluster
	// Delivered, when set, returns the output set the host holds for a
	// cluster and backend, where it put the plugin's last answer for it.
	// The plugin may then answer a set by what changed and name the
	// resources it kept (ClusterOutput.kept), which the session takes
	// from this set after checking them against that last answer. A kept
	// resource the set no longer holds as answered costs a second round:
	// the session asks for the cluster's sets whole. Nil: the plugin
	// sends every set whole.
	Delivered func(cluster, backend string) (*snapshot.Snapshot, bool)
}

// Cluster is one cluster of a [View].
type Cluster struct {
	Input *snapshot.Snapshot
	// Stale is true while the cluster's agent is disconnected.
	Stale bool
	// Meshes are the cluster's mesh types, as found by discovery, sorted.
	Meshes []string
	// Labels are the cluster's labels in the registry.
	Labels map[string]string
}

// Same reports whether c and o are the same state of a cluster: a plugin
// holding one needs nothing to hold the other.
func (c Cluster) Same(o Cluster) bool {
	return c.Input.Hash() == o.Input.Hash() && c.Stale == o.Stale && slices.Equal(c.Meshes, o.Meshes) && maps.Equal(c.Labels, o.Labels)
}

// update is one change of the plugin's view, as sent on the stream.
type update struct {
	// full replaces the plugin's whole view.
	full bool
	// clusters are the clusters that changed (all of them when full).
	clusters []clusterUpdate
	// policyUpserts and policyDeletes change the policies.
	policyUpserts []snapshot.Resource
	policyDeletes []snapshot.ID
	scoped        bool
	targets       []string
	// keptAllowed lets the plugin name what it kept of a set.
	keptAllowed bool
	// sameAllowed lets the plugin name a body it sent earlier in the
	// answer instead of sending it again.
	sameAllowed bool
	// resend are the clusters whose sets the plugin sends whole.
	resend []string
}

// clusterUpdate is the change of one cluster's inputs.
type clusterUpdate struct {
	name    string
	removed bool
	stale   bool
	meshes  []string
	labels  map[string]string
	upserts []snapshot.Resource
	deletes []snapshot.ID
}

// Result is a translator's answer to one update.
type Result struct {
	// Sent is false when the view was the one the plugin already held:
	// nothing was sent, and the plugin's outputs and diagnostics are
	// those of its last answer.
	Sent bool
	// Full is true when the update replaced the plugin's whole view.
	Full bool
	// Clusters is how many clusters' inputs the update carried.
	Clusters int
	// Resent names the clusters whose sets the session asked for whole
	// in a second round: the plugin kept objects of them that
	// View.Delivered no longer held as answered.
	Resent []string
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
