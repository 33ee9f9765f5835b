package sdk

import (
	"slices"
	"strings"

	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
)

// ClientClusters are the clusters whose clients a
// [policyv1alpha1.ClientSelector] admits, as its cluster fields (clusters
// and clusterSelector) decide over the fleet. Get them with
// [Fleet.ClientClusters]. A translator asks [ClientClusters.Admits] or
// reads Names, and never reads an empty Names as "any cluster": only Any
// says that.
type ClientClusters struct {
	// Any is true when the selector sets neither clusters nor
	// clusterSelector: the clients of every cluster match, and Names is
	// empty.
	Any bool
	// Names are the admitted clusters when Any is false, sorted: the
	// selector's Clusters, with the fleet's clusters whose labels match
	// its ClusterSelector. Empty means that no client matches.
	Names []string
	// Unmatched is true when the selector has a ClusterSelector that
	// matches no cluster of the fleet.
	Unmatched bool
}

// Admits reports whether the clients of the named cluster match.
func (cc ClientClusters) Admits(cluster string) bool {
	return cc.Any || slices.Contains(cc.Names, cluster)
}

// None reports whether no client matches, whatever the selector's other
// fields: the cluster fields are set and admit no cluster.
func (cc ClientClusters) None() bool { return !cc.Any && len(cc.Names) == 0 }

// Warning returns, when Unmatched, the warning on policy p at path (the
// client selector's, such as spec.from[0]) that its clusterSelector
// matches no cluster, saying whether the selector still admits clients of
// the clusters it names; ok is false otherwise. It concerns no cluster,
// so report it with [Response.DiagnoseFleet].
func (cc ClientClusters) Warning(p policyv1alpha1.Policy, path string) (d Diagnostic, ok bool) {
	if !cc.Unmatched {
		return Diagnostic{}, false
	}
	if cc.None() {
		return Warningf(p, path+".clusterSelector", "matches no cluster of the fleet, so this client selector admits no client"), true
	}
	return Warningf(p, path+".clusterSelector", "matches no cluster of the fleet; this client selector admits clients of the clusters it names only (%s)", strings.Join(cc.Names, ", ")), true
}

// ClientClusters returns the clusters whose clients sel admits by its
// cluster fields: any cluster when it sets neither, else the clusters it
// names (registered or not: an identity names its cluster either way)
// with the fleet's clusters whose registry labels match its
// ClusterSelector.
//
// A target computation that calls it with a clusterSelector depends on
// which clusters of the fleet the selector matches: relabelling a cluster
// concerns it only when the cluster enters or leaves the selector, and a
// cluster joining or leaving the fleet only when its labels match.
func (f *Fleet) ClientClusters(sel *policyv1alpha1.ClientSelector) ClientClusters {
	if !sel.RestrictsClusters() {
		return ClientClusters{Any: true}
	}
	names := slices.Clone(sel.Clusters)
	cc := ClientClusters{}
	if sel.ClusterSelector != nil {
		labelsOnly := policyv1alpha1.DestinationSelector{ClusterSelector: sel.ClusterSelector}
		f.rec.addClients(labelsOnly)
		cc.Unmatched = true
		for _, cd := range f.d.clusters {
			if labelsOnly.AdmitsCluster(cd.meta()) {
				names = append(names, cd.name)
				cc.Unmatched = false
			}
		}
	}
	slices.Sort(names)
	cc.Names = slices.Compact(names)
	return cc
}
