package store

import (
	"context"
	"slices"
)

// RolloutRecord is one record of the staged rollout: the fleet's rollout
// state, or a revision (a policy set) it names. The data is the caller's;
// the store keeps it whole.
type RolloutRecord struct {
	// Name keys the record.
	Name string
	// Data is the record's content.
	Data []byte
	// Version counts the record's changes; CompareAndPutRollout checks and
	// increments it.
	Version uint64
}

// Clone returns a copy of r that shares no bytes with it.
func (r RolloutRecord) Clone() RolloutRecord {
	r.Data = slices.Clone(r.Data)
	return r
}

// Rollouts keeps the records of the staged rollout, which every replica
// must read alike: a replica advances a rollout only by compare-and-set,
// so two replicas never both take a step and a replica that dies leaves
// the next one where it was. Rollout records are not events.
type Rollouts interface {
	// GetRollout returns the record stored under name, or ErrNotFound.
	GetRollout(ctx context.Context, name string) (RolloutRecord, error)

	// CompareAndPutRollout stores r only if the stored record of r.Name
	// has version r.Version (0: no record is stored), and returns the
	// stored record, whose Version is r.Version+1. Otherwise it stores
	// nothing and returns an error wrapping ErrConflict. The check and the
	// write are atomic across every replica of the store. The name and
	// the data must not be empty.
	CompareAndPutRollout(ctx context.Context, r RolloutRecord) (RolloutRecord, error)

	// DeleteRollout removes the record of name. Deleting what is not
	// stored is not an error.
	DeleteRollout(ctx context.Context, name string) error
}
