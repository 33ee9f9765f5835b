package store

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
}
