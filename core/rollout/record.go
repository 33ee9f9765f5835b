package rollout

import (
	"encoding/json"
	"fmt"
	"time"

	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
)

// Record is the fleet's rollout state, as the store keeps it.
type Record struct {
	// Live is the revision the fleet holds outside a rollout: the last one
	// applied at once or completed, or the previous one after an undo.
	Live string `json:",omitempty"`
	// Rejected is the revision of the last rollout undone: the source may
	// still hold it, and it does not start again until the source changes.
	Rejected string `json:",omitempty"`
	// Rollout is the current or last rollout; nil before the first.
	Rollout *Rollout `json:",omitempty"`
	// Writes counts the writes of the record: of two copies, the one with
	// more writes is the newer (see Empty).
	Writes uint64 `json:",omitempty"`
}

// Empty reports whether the record holds nothing yet: no live revision
// and no rollout. A store that holds no record while a replica knows a
// non-empty one lost it (a Redis restarted empty), and the replica writes
// back the newest copy it knows.
func (r *Record) Empty() bool { return r.Live == "" && r.Rejected == "" && r.Rollout == nil }

// Decode reads a record as Encode wrote it; no data is an empty record.
func Decode(data []byte) (*Record, error) {
	r := &Record{}
	if len(data) == 0 {
		return r, nil
	}
	if err := json.Unmarshal(data, r); err != nil {
		return nil, fmt.Errorf("decode rollout record: %w", err)
	}
	return r, nil
}

// Encode returns the record as the store keeps it.
func (r *Record) Encode() []byte {
	data, err := json.Marshal(r)
	if err != nil {
		panic(fmt.Sprintf("encode rollout record: %v", err)) // plain data
	}
	return data
}

// Copy returns a deep copy of the record.
func (r *Record) Copy() *Record {
	c, err := Decode(r.Encode())
	if err != nil {
		panic(fmt.Sprintf("copy rollout record: %v", err)) // Encode's own output
	}
	return c
}

// Active returns the rollout in progress, or nil.
func (r *Record) Active() *Rollout {
	if r.Rollout != nil && r.Rollout.Active() {
		return r.Rollout
	}
	return nil
}

// Source records that the management source holds the revision desired
// and the strategy spec (nil for none), at now, over the clusters. It
// reports whether the record changed:
//   - during a rollout, nothing changes: the latest revision waits in
//     the source and starts when the rollout completes or is undone;
//   - without a strategy, or with no live revision yet, desired becomes
//     live at once;
//   - otherwise a change starts a rollout from the live revision, unless
//     desired is the revision of the rollout last undone.
func (r *Record) Source(desired string, spec *policyv1alpha1.RolloutStrategySpec, clusters []policyv1alpha1.ClusterMeta, now time.Time) bool {
	switch {
	case r.Active() != nil:
		return false
	case desired == r.Live:
		if r.Rejected != "" {
			r.Rejected = ""
			return true
		}
		return false
	case desired == r.Rejected:
		return false
	case spec == nil || r.Live == "":
		r.Live, r.Rejected = desired, ""
		return true
	}
	var id uint64 = 1
	if r.Rollout != nil {
		id = r.Rollout.ID + 1
	}
	r.Rollout = Plan(id, r.Live, desired, spec, clusters, now)
	r.Rejected = ""
	r.Rollout.Advance(now)
	r.settle()
	return true
}

// Advance moves the rollout in progress on at now (see Rollout.Advance)
// and reports whether the record changed.
func (r *Record) Advance(now time.Time) bool {
	ro := r.Active()
	if ro == nil || !ro.Advance(now) {
		return false
	}
	r.settle()
	return true
}

// Undo puts every cluster of the rollout in progress back on the
// previous revision, at now. The last rollout, once completed, can be
// undone too while its revision is still live: every cluster goes back
// at once, since a completed rollout's revision is on all of them and a
// way back is wanted fast, not in stages.
func (r *Record) Undo(now time.Time) error {
	ro := r.Rollout
	switch {
	case ro == nil:
		return ErrNotActive
	case ro.Active():
		ro.Reason = "undone by an administrator"
	case ro.Phase == Completed && r.Live == ro.To:
		ro.Reason = "undone by an administrator after it completed"
	default:
		return ErrNotActive
	}
	ro.Phase, ro.Ended = Undone, now
	r.settle()
	return nil
}

// settle makes a finished rollout's outcome live.
func (r *Record) settle() {
	switch r.Rollout.Phase {
	case Completed:
		r.Live = r.Rollout.To
	case Undone:
		r.Live, r.Rejected = r.Rollout.From, r.Rollout.To
	}
}

// Revisions returns the live revisions, the previous first, and the
// clusters that hold the previous one when there are two: one revision
// and no clusters outside a rollout.
func (r *Record) Revisions() (revisions []string, onPrevious []string) {
	if ro := r.Active(); ro != nil {
		return []string{ro.From, ro.To}, ro.OnPrevious()
	}
	if r.Live == "" {
		return nil, nil
	}
	return []string{r.Live}, nil
}
