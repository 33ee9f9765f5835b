package store

import "github.com/meshrelay/meshrelay/api/snapshot"

// EventKind says what an Event is about.
type EventKind int

// The kinds of Event.
const (
	// EventInput: a cluster's input snapshot was stored or deleted.
	EventInput EventKind = iota + 1
	// EventOutput: a cluster's output for a backend was stored, or all its
	// outputs were deleted (Backend is empty).
	EventOutput
	// EventCluster: a registry record was stored or deleted.
	EventCluster
	// EventResync: events may have been missed; reload everything.
	EventResync
)

// String returns the kind's name.
func (k EventKind) String() string {
	switch k {
	case EventInput:
		return "input"
	case EventOutput:
		return "output"
	case EventCluster:
		return "cluster"
	case EventResync:
		return "resync"
	}
	return "unknown"
}

// Event tells a watcher that another replica changed something.
type Event struct {
	// Kind says what changed.
	Kind EventKind
	// Cluster is the cluster whose input, output or record changed.
	Cluster string
	// Backend is the output's backend for EventOutput; empty when all of
	// the cluster's outputs were deleted.
	Backend string
	// Version is the stored snapshot's version for EventInput and
	// EventOutput; zero for deletions and other kinds.
	Version uint64
	// Deleted is set when the input, outputs or record were deleted.
	Deleted bool
	// Replica is the ID of the replica that made the change.
	Replica string
	// Delta, for EventInput, is how the stored input differs from the
	// one stored before it, when the store knows (core/store/redis
	// publishes it when the writer named the input it replaced and that
	// was the one stored) and it is small: a follower that holds that
	// input applies the delta instead of reading the whole input. Nil
	// otherwise.
	Delta *InputDelta
}

// InputDelta moves a cluster's input from the snapshot of BaseHash (and
// the delta's base version) to the stored one, whose version and hash
// the delta carries.
type InputDelta struct {
	BaseHash snapshot.Hash
	snapshot.Delta
}
