package snapshot

import (
	"errors"
	"fmt"
	"slices"

	"github.com/meshrelay/meshrelay/api/meta"
)

// ErrBaseMismatch is returned by [Apply] when a delta was computed against
// another version than the snapshot it is applied to.
var ErrBaseMismatch = errors.New("delta base version does not match the snapshot")

// ErrHashMismatch is returned by [Apply] when the result of a delta does not
// hash to the value the delta promised: the peers disagree, and the sender
// must resend in full.
var ErrHashMismatch = errors.New("snapshot hash after delta does not match")

// Delta moves a snapshot from BaseVersion to Version: Upserts are added or
// replaced and Deletes removed. A Full delta replaces the whole snapshot.
// Hash, when set, is the hash of the result.
type Delta struct {
	BaseVersion uint64
	Version     uint64
	Full        bool
	Upserts     []Resource
	Deletes     []ID
	Hash        Hash
}

// Empty reports whether the delta changes nothing.
func (d Delta) Empty() bool { return !d.Full && len(d.Upserts) == 0 && len(d.Deletes) == 0 }

// Size returns the size in bytes of everything the delta carries: its
// upserts, IDs and bodies ([Resource.Size]), and the IDs it deletes.
func (d Delta) Size() int {
	n := 0
	for _, r := range d.Upserts {
		n += r.Size()
	}
	for _, id := range d.Deletes {
		n += id.Size()
	}
	return n
}

// Diff returns the delta from a to b. A nil a gives a full delta. The work is
// linear in the sizes of both snapshots; only resources whose hashes differ
// are carried.
//
// A first walk counts what the delta carries, so that its upserts and
// deletes are each one allocation of the size they need: a fleet-wide
// edit diffs every cluster's output, each with tens of changed objects,
// and growing the lists an object at a time would copy them again and
// again.
//
// When the upserts are a run of b's resources, as all of b is from an
// empty a, the delta shares b's memory instead of copying it: a plugin
// session's first update carries the whole fleet. The delta is to be
// read, never modified in place (appending to it copies: its capacity
// ends with it); [Apply] copies what it sorts.
func Diff(a, b *Snapshot) Delta {
	if a == nil {
		return FullDelta(b)
	}
	d := Delta{BaseVersion: a.version, Version: b.version, Hash: b.hash}
	if a.hash == b.hash {
		return d
	}
	nUpserts, nDeletes := diffCounts(a.resources, b.resources)
	upsert := func(r Resource) {
		if d.Upserts == nil {
			d.Upserts = make([]Resource, 0, nUpserts)
		}
		d.Upserts = append(d.Upserts, r)
	}
	del := func(id ID) {
		if d.Deletes == nil {
			d.Deletes = make([]ID, 0, nDeletes)
		}
		d.Deletes = append(d.Deletes, id)
	}
	i, j := 0, 0
	for i < len(a.resources) || j < len(b.resources) {
		switch {
		case i == len(a.resources):
			// The rest of b is new: shared when it is all the delta
			// upserts (the whole of b from an empty a), else copied
			// into the room counted for it.
			rest := b.resources[j:len(b.resources):len(b.resources)]
			if len(d.Upserts) == 0 {
				d.Upserts = rest
			} else {
				d.Upserts = append(d.Upserts, rest...)
			}
			j = len(b.resources)
		case j == len(b.resources):
			del(a.resources[i].ID)
			i++
		default:
			ra, rb := a.resources[i], b.resources[j]
			switch c := ra.ID.Compare(rb.ID); {
			case c < 0:
				del(ra.ID)
				i++
			case c > 0:
				upsert(rb)
				j++
			default:
				if ra.Hash != rb.Hash {
					upsert(rb)
				}
				i++
				j++
			}
		}
	}
	return d
}

// diffCounts returns how many upserts and deletes the delta from a to b,
// both sorted by ID, carries.
func diffCounts(a, b []Resource) (upserts, deletes int) {
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		switch c := a[i].ID.Compare(b[j].ID); {
		case c < 0:
			deletes++
			i++
		case c > 0:
			upserts++
			j++
		default:
			if a[i].Hash != b[j].Hash {
				upserts++
			}
			i++
			j++
		}
	}
	return upserts + len(b) - j, deletes + len(a) - i
}

// FullDelta returns a delta that replaces any snapshot with s. Its
// upserts share s's memory, as [Diff]'s may: read them, never modify them
// in place.
func FullDelta(s *Snapshot) Delta {
	return Delta{Version: s.version, Full: true, Upserts: s.resources[:len(s.resources):len(s.resources)], Hash: s.hash}
}

// Apply returns the snapshot a delta leads to from a. A non-full delta must
// have a's version as its base ([ErrBaseMismatch]); when the delta carries a
// hash the result must match it ([ErrHashMismatch]). Duplicate IDs in a delta
// are an error. a is not modified.
func Apply(a *Snapshot, d Delta) (*Snapshot, error) {
	if d.Full {
		s, err := New(d.Version, d.Upserts)
		if err != nil {
			return nil, err
		}
		return checkHash(s, d)
	}
	if a == nil {
		a = Empty
	}
	if d.BaseVersion != a.version {
		return nil, fmt.Errorf("%w: delta from %d, snapshot at %d", ErrBaseMismatch, d.BaseVersion, a.version)
	}
	ups := slices.Clone(d.Upserts)
	slices.SortFunc(ups, func(x, y Resource) int { return x.ID.Compare(y.ID) })
	dels := slices.Clone(d.Deletes)
	slices.SortFunc(dels, ID.Compare)
	for i := 1; i < len(ups); i++ {
		if ups[i-1].ID == ups[i].ID {
			return nil, fmt.Errorf("delta upserts %s twice", ups[i].ID)
		}
	}
	for i := 1; i < len(dels); i++ {
		if dels[i-1] == dels[i] {
			return nil, fmt.Errorf("delta deletes %s twice", dels[i])
		}
	}

	out := make([]Resource, 0, appliedLen(a.resources, ups, dels))
	i, u, x := 0, 0, 0
	for i < len(a.resources) || u < len(ups) {
		var next Resource
		switch {
		case i == len(a.resources):
			next = ups[u]
			u++
		case u == len(ups):
			next = a.resources[i]
			i++
		default:
			switch c := a.resources[i].ID.Compare(ups[u].ID); {
			case c < 0:
				next = a.resources[i]
				i++
			case c > 0:
				next = ups[u]
				u++
			default:
				next = ups[u]
				i++
				u++
			}
		}
		for x < len(dels) && dels[x].Compare(next.ID) < 0 {
			x++
		}
		if x < len(dels) && dels[x] == next.ID {
			continue
		}
		out = append(out, next)
	}
	return checkHash(build(d.Version, out), d)
}

// ApplyOwned is [Apply] for a delta the caller hands over, such as one
// just decoded and assembled: a full delta's upserts become the
// snapshot's, sorted in place, instead of a copy of them, so the caller
// must not use them afterwards. A decoded input is then held in the
// memory it was decoded into, with no copy of it allocated and dropped
// beside it to scatter the collector's spans.
func ApplyOwned(a *Snapshot, d Delta) (*Snapshot, error) {
	if !d.Full {
		return Apply(a, d)
	}
	rs := d.Upserts
	if cap(rs) != len(rs) {
		rs = slices.Clone(rs) // assembled from parts: no spare capacity kept
	}
	s, err := newOwned(d.Version, rs)
	if err != nil {
		return nil, err
	}
	return checkHash(s, d)
}

// appliedLen returns how many resources applying the sorted upserts ups
// and deletes dels to rs leaves, so that the snapshot Apply builds holds
// no spare capacity: it is kept as long as the cluster's input does, and
// a delta mostly replaces or deletes resources rs holds. The work is
// logarithmic in len(rs) per upsert and delete.
func appliedLen(rs, ups []Resource, dels []ID) int {
	in := func(rs []Resource, id ID) bool {
		_, found := slices.BinarySearchFunc(rs, id, func(r Resource, id ID) int { return r.ID.Compare(id) })
		return found
	}
	n := len(rs) + len(ups)
	for _, u := range ups {
		if in(rs, u.ID) {
			n--
		}
	}
	for _, id := range dels {
		if in(rs, id) || in(ups, id) {
			n--
		}
	}
	return n
}

func checkHash(s *Snapshot, d Delta) (*Snapshot, error) {
	if !d.Hash.IsZero() && s.hash != d.Hash {
		return nil, fmt.Errorf("%w: got %s, want %s", ErrHashMismatch, s.hash.Short(), d.Hash.Short())
	}
	return s, nil
}

// Split cuts a delta into parts whose size ([Delta.Size]) stays under
// maxBytes each (a single larger resource gets a part of its own): the
// upserts first, then the deletes. Every part carries the delta's
// versions, Full flag and hash; a receiver joins them with an [Assembler].
func Split(d Delta, maxBytes int) []Delta {
	if d.Size() <= maxBytes {
		return []Delta{d}
	}
	var parts []Delta
	part := func() Delta {
		return Delta{BaseVersion: d.BaseVersion, Version: d.Version, Full: d.Full, Hash: d.Hash}
	}
	if len(d.Upserts) > 0 {
		for _, u := range meta.Split(d.Upserts, Resource.Size, maxBytes) {
			p := part()
			p.Upserts = u
			parts = append(parts, p)
		}
	}
	if len(d.Deletes) > 0 {
		for _, x := range meta.Split(d.Deletes, ID.Size, maxBytes) {
			p := part()
			p.Deletes = x
			parts = append(parts, p)
		}
	}
	return parts
}

// Limits bound what an Assembler holds for one delta in progress. A zero
// field is no limit.
type Limits struct {
	// Parts is the most parts one delta may have.
	Parts int
	// Bytes is the most bytes one delta may carry ([Delta.Size]: upserts
	// and deletes, IDs included).
	Bytes int
	// Resources is the most upserts plus deletes one delta may carry.
	Resources int
}

// LimitError reports a delta that exceeds one of an Assembler's Limits.
type LimitError struct {
	// Limit names the limit: "parts", "bytes" or "resources".
	Limit string
	// Max is the limit's value.
	Max int
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("delta exceeds the limit of %d %s", e.Max, e.Limit)
}

// Assembler joins the parts of a split delta. The zero value is ready and
// has no limits.
type Assembler struct {
	// Limits bound the delta in progress; a part that exceeds one drops
	// the delta and returns a *LimitError.
	Limits  Limits
	pending *Delta
	parts   int
	bytes   int
}

// Add adds one part, which it takes over: the delta it returns may hold
// part's slices, so the caller must not use them afterwards (a part is
// most often a message just decoded, and the whole delta). It returns the
// whole delta and true when last is set, and an error when a part does
// not belong to the delta in progress or the delta exceeds the Limits.
func (a *Assembler) Add(part Delta, last bool) (Delta, bool, error) {
	if a.pending == nil {
		p := part
		// Clipped, so that the next part's append copies rather than
		// write past part's end into an array the caller may share.
		p.Upserts, p.Deletes = slices.Clip(part.Upserts), slices.Clip(part.Deletes)
		a.pending, a.parts, a.bytes = &p, 0, 0
	} else {
		p := a.pending
		if p.Version != part.Version || p.BaseVersion != part.BaseVersion || p.Full != part.Full {
			a.Reset()
			return Delta{}, false, fmt.Errorf("delta part for version %d arrived while assembling version %d", part.Version, p.Version)
		}
		p.Upserts = append(p.Upserts, part.Upserts...)
		p.Deletes = append(p.Deletes, part.Deletes...)
	}
	a.parts++
	a.bytes += part.Size()
	if err := a.check(); err != nil {
		a.Reset()
		return Delta{}, false, err
	}
	if !last {
		return Delta{}, false, nil
	}
	d := *a.pending
	a.Reset()
	return d, true, nil
}

// check compares the delta in progress with the limits.
func (a *Assembler) check() error {
	l := a.Limits
	switch {
	case l.Parts > 0 && a.parts > l.Parts:
		return &LimitError{Limit: "parts", Max: l.Parts}
	case l.Bytes > 0 && a.bytes > l.Bytes:
		return &LimitError{Limit: "bytes", Max: l.Bytes}
	case l.Resources > 0 && len(a.pending.Upserts)+len(a.pending.Deletes) > l.Resources:
		return &LimitError{Limit: "resources", Max: l.Resources}
	}
	return nil
}

// Held returns what the assembler holds of the delta in progress: its
// parts, bytes ([Delta.Size]) and upserts plus deletes. All are zero when
// no delta is in progress.
func (a *Assembler) Held() (parts, bytes, resources int) {
	if a.pending == nil {
		return 0, 0, 0
	}
	return a.parts, a.bytes, len(a.pending.Upserts) + len(a.pending.Deletes)
}

// Reset drops a delta in progress.
func (a *Assembler) Reset() { a.pending, a.parts, a.bytes = nil, 0, 0 }
