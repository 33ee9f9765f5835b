package sdk

import (
	"maps"

	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
)

// readIndex files the read sets of named computations, the targets of a
// session or its Shared values, so that a change finds the names whose
// reads it concerns at a cost that grows with what it changed and the
// computations it concerns, not with the fleet:
//
//   - byCluster holds, per cluster, the names with a read bound to it; a
//     change looks only at the clusters it changed;
//   - keyed holds the fleet-wide reads that a change names outright (the
//     policies of a kind, a Shared key, a list of clusters), looked up by
//     that name;
//   - matched holds the other fleet-wide reads, selectors mostly, which
//     each change is matched against once, however many names share one.
type readIndex struct {
	sets      map[string]*readSet
	byCluster map[string]map[string]bool
	keyed     map[readKey]map[string]bool
	matched   map[read]map[string]bool
	// selectors holds the selectors of the select and clients reads in
	// matched, by their JSON (the read's name).
	selectors *readSet
}

// readKey is how a change names a fleet-wide read it concerns.
type readKey struct {
	op   readOp
	name string
}

// keyOf returns the key of a fleet-wide read a change names outright.
func keyOf(r read) (readKey, bool) {
	switch r.op {
	case readPolicies:
		return readKey{readPolicies, r.kind}, true
	case readShared, readList:
		return readKey{r.op, r.name}, true
	}
	return readKey{}, false
}

func newReadIndex() readIndex {
	return readIndex{
		sets: map[string]*readSet{}, byCluster: map[string]map[string]bool{},
		keyed: map[readKey]map[string]bool{}, matched: map[read]map[string]bool{},
		selectors: &readSet{selectors: map[string][]policyv1alpha1.DestinationSelector{}},
	}
}

// set files name's reads, replacing what it read before.
func (ix *readIndex) set(name string, rs *readSet) {
	ix.drop(name)
	ix.sets[name] = rs
	clusters, _ := rs.clusters()
	for _, c := range clusters {
		addTo(ix.byCluster, c, name)
	}
	for _, r := range rs.reads {
		if !r.global() {
			continue
		}
		if k, ok := keyOf(r); ok {
			addTo(ix.keyed, k, name)
			continue
		}
		addTo(ix.matched, r, name)
		if r.op == readSelect || r.op == readClients {
			ix.selectors.selectors[r.name] = rs.selectors[r.name]
		}
	}
}

// drop forgets name's reads.
func (ix *readIndex) drop(name string) {
	rs, ok := ix.sets[name]
	if !ok {
		return
	}
	clusters, _ := rs.clusters()
	for _, c := range clusters {
		removeFrom(ix.byCluster, c, name)
	}
	for _, r := range rs.reads {
		if !r.global() {
			continue
		}
		if k, ok := keyOf(r); ok {
			removeFrom(ix.keyed, k, name)
			continue
		}
		if removeFrom(ix.matched, r, name) && (r.op == readSelect || r.op == readClients) {
			delete(ix.selectors.selectors, r.name)
		}
	}
	delete(ix.sets, name)
}

// touched returns the names with a read that c concerns: the same names
// as asking c.touches of every set, without visiting the others.
func (ix *readIndex) touched(c *change) map[string]bool {
	hit := map[string]bool{}
	if c.global() {
		for kind := range c.policyKinds {
			maps.Copy(hit, ix.keyed[readKey{readPolicies, kind}])
		}
		for key := range c.shared {
			maps.Copy(hit, ix.keyed[readKey{readShared, key}])
		}
		if len(c.meta) > 0 {
			maps.Copy(hit, ix.keyed[readKey{readList, ""}])
			for _, meshes := range c.meta {
				for _, mesh := range meshes {
					if mesh != "" {
						maps.Copy(hit, ix.keyed[readKey{readList, mesh}])
					}
				}
			}
		}
		for r, names := range ix.matched {
			if c.touchesRead(r, ix.selectors) {
				maps.Copy(hit, names)
			}
		}
	}
	for _, cluster := range c.clusters() {
		for name := range ix.byCluster[cluster] {
			if !hit[name] && c.touchesBoundIn(ix.sets[name], cluster) {
				hit[name] = true
			}
		}
	}
	return hit
}

// addTo adds name to index[k].
func addTo[K comparable](index map[K]map[string]bool, k K, name string) {
	if index[k] == nil {
		index[k] = map[string]bool{}
	}
	index[k][name] = true
}

// removeFrom removes name from index[k] and reports whether k is gone.
func removeFrom[K comparable](index map[K]map[string]bool, k K, name string) bool {
	delete(index[k], name)
	if len(index[k]) == 0 {
		delete(index, k)
		return true
	}
	return false
}
