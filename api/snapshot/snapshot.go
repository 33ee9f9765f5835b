package snapshot

import (
	"crypto/sha256"
	"fmt"
	"iter"
	"slices"
	"strings"
)

// Snapshot is an immutable, versioned set of resources, sorted by ID, with a
// hash over their identities and contents. The hash does not depend on the
// version or on the order resources were given in.
type Snapshot struct {
	version   uint64
	hash      Hash
	resources []Resource
}

// Empty is the snapshot with no resources at version 0.
var Empty = &Snapshot{hash: hashResources(nil)}

// New builds a snapshot from resources, in any order. Two resources with the
// same ID are an error. The slice is copied.
func New(version uint64, resources []Resource) (*Snapshot, error) {
	return newOwned(version, slices.Clone(resources))
}

// NewOwned is New over a slice the caller hands over: resources is sorted
// in place and kept, not copied, so the caller must not use it afterwards.
// For callers that built the slice for the snapshot, such as the engine
// taking a plugin's answer.
func NewOwned(version uint64, resources []Resource) (*Snapshot, error) {
	return newOwned(version, resources)
}

// newOwned is New over a slice the snapshot may keep: rs is sorted in
// place and not copied.
func newOwned(version uint64, rs []Resource) (*Snapshot, error) {
	slices.SortFunc(rs, func(a, b Resource) int { return a.ID.Compare(b.ID) })
	for i := 1; i < len(rs); i++ {
		if rs[i-1].ID == rs[i].ID {
			return nil, fmt.Errorf("duplicate resource %s", rs[i].ID)
		}
	}
	return build(version, rs), nil
}

// build wraps already sorted, duplicate-free resources.
func build(version uint64, sorted []Resource) *Snapshot {
	return &Snapshot{version: version, hash: hashResources(sorted), resources: sorted}
}

// hashResources hashes each resource's ID as [ID.String] writes it, a
// zero byte and the resource's hash, in one buffer reused across
// resources.
func hashResources(sorted []Resource) Hash {
	h := sha256.New()
	var buf []byte
	for _, r := range sorted {
		buf = append(r.ID.appendString(buf[:0]), 0)
		buf = append(buf, r.Hash[:]...)
		h.Write(buf)
	}
	var out Hash
	h.Sum(out[:0])
	return out
}

// Version returns the snapshot's version.
func (s *Snapshot) Version() uint64 { return s.version }

// Hash returns the hash over the snapshot's resources.
func (s *Snapshot) Hash() Hash { return s.hash }

// Len returns the number of resources.
func (s *Snapshot) Len() int { return len(s.resources) }

// Size returns the total size of the resources in bytes, their IDs and
// their bodies ([Resource.Size]).
func (s *Snapshot) Size() int {
	n := 0
	for _, r := range s.resources {
		n += r.Size()
	}
	return n
}

// All iterates over the resources in ID order.
func (s *Snapshot) All() iter.Seq[Resource] {
	return func(yield func(Resource) bool) {
		for _, r := range s.resources {
			if !yield(r) {
				return
			}
		}
	}
}

// Group iterates over the resources of one API group in ID order, found
// without reading the others: IDs sort by group first.
func (s *Snapshot) Group(group string) iter.Seq[Resource] {
	return func(yield func(Resource) bool) {
		i, _ := slices.BinarySearchFunc(s.resources, group, func(r Resource, g string) int { return strings.Compare(r.ID.Group, g) })
		for _, r := range s.resources[i:] {
			if r.ID.Group != group || !yield(r) {
				return
			}
		}
	}
}

// Resources returns a copy of the resources in ID order.
func (s *Snapshot) Resources() []Resource { return slices.Clone(s.resources) }

// Get returns the resource with the given ID.
func (s *Snapshot) Get(id ID) (Resource, bool) {
	i, found := slices.BinarySearchFunc(s.resources, id, func(r Resource, id ID) int { return r.ID.Compare(id) })
	if !found {
		return Resource{}, false
	}
	return s.resources[i], true
}

// Seek is Get for a caller that looks up IDs in ascending order, as a
// plugin names the resources of a set it kept: it looks at position from
// first, where the last lookup left off, and returns the position to
// look from next. Out of order, it costs what Get does.
func (s *Snapshot) Seek(id ID, from int) (Resource, int, bool) {
	rs := s.resources
	if from < len(rs) && rs[from].ID == id {
		return rs[from], from + 1, true
	}
	i, found := slices.BinarySearchFunc(rs, id, func(r Resource, id ID) int { return r.ID.Compare(id) })
	if !found {
		return Resource{}, from, false
	}
	return rs[i], i + 1, true
}

// WithVersion returns the same resources under another version.
func (s *Snapshot) WithVersion(version uint64) *Snapshot {
	return &Snapshot{version: version, hash: s.hash, resources: s.resources}
}

// Equal reports whether two snapshots hold the same resources, whatever
// their versions.
func (s *Snapshot) Equal(o *Snapshot) bool { return s.hash == o.hash }
