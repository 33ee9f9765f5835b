package store

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/meshrelay/meshrelay/api/snapshot"
)

// ErrNotFound is returned by Get methods when nothing is stored under the
// requested key. Callers test for it with errors.Is.
var ErrNotFound = errors.New("not found")

// ErrClosed is returned by every method of a store after Close.
var ErrClosed = errors.New("store closed")

// ErrConflict is returned by CompareAndPutCluster when the stored record's
// version is not the one the caller read: another writer changed it first.
// Callers read the record again and retry (see UpdateCluster).
var ErrConflict = errors.New("registry record changed concurrently")

// Store keeps the fleet's state: per-cluster input snapshots, per-cluster and
// per-backend output snapshots, the cluster registry and the CA, and a change
// feed across server replicas. Implementations are safe for concurrent use.
//
// Every method returns ErrClosed after Close, and an error wrapping the
// context's error when ctx ends first. Errors other than ErrNotFound and
// ErrClosed mean the store could not be reached or its data could not be
// decoded; the caller may retry.
type Store interface {
	// PutInput stores s as cluster's input snapshot. A Put whose version is
	// lower than the stored one is ignored and returns nil: server replicas
	// race to store the same agent's snapshots, and the newest must win. A
	// Put with the stored version and hash changes nothing and publishes no
	// event. Any other Put replaces the stored snapshot, including one with
	// the same version and another hash. cluster must not be empty and s
	// must not be nil.
	PutInput(ctx context.Context, cluster string, s *snapshot.Snapshot) error

	// GetInput returns cluster's input snapshot, or ErrNotFound.
	GetInput(ctx context.Context, cluster string) (*snapshot.Snapshot, error)

	// ListInputs returns every stored input snapshot by cluster name. The
	// map is the caller's; it is empty, not nil, when nothing is stored.
	ListInputs(ctx context.Context) (map[string]*snapshot.Snapshot, error)

	// DeleteInput removes cluster's input snapshot. Deleting what is not
	// stored is not an error.
	DeleteInput(ctx context.Context, cluster string) error

	// PutOutput stores s as the output for cluster and backend. Outputs are
	// last-writer-wins: the engine that computed them owns their versions.
	// A Put with the stored version and hash changes nothing. cluster and
	// backend must not be empty and s must not be nil.
	PutOutput(ctx context.Context, cluster, backend string, s *snapshot.Snapshot) error

	// GetOutput returns the output for cluster and backend, or ErrNotFound.
	GetOutput(ctx context.Context, cluster, backend string) (*snapshot.Snapshot, error)

	// ListOutputs returns cluster's outputs by backend; an empty map when
	// there are none.
	ListOutputs(ctx context.Context, cluster string) (map[string]*snapshot.Snapshot, error)

	// DeleteOutputs removes every output of cluster. Deleting what is not
	// stored is not an error.
	DeleteOutputs(ctx context.Context, cluster string) error

	// PutCluster creates or replaces the registry record c.Name as given,
	// Version included: it copies records between stores and restores
	// them. Changes to the registry go through CompareAndPutCluster, which
	// never loses a concurrent change. The name must not be empty.
	PutCluster(ctx context.Context, c Cluster) error

	// CompareAndPutCluster stores c only if the stored record of c.Name has
	// version c.Version (0: no record is stored), and returns the stored
	// record, whose Version is c.Version+1. Otherwise it stores nothing and
	// returns an error wrapping ErrConflict. The check and the write are
	// atomic across every replica of the store.
	CompareAndPutCluster(ctx context.Context, c Cluster) (Cluster, error)

	// GetCluster returns the registry record of name, or ErrNotFound.
	GetCluster(ctx context.Context, name string) (Cluster, error)

	// ListClusters returns every registry record, sorted by name; an empty
	// slice when there are none.
	ListClusters(ctx context.Context) ([]Cluster, error)

	// DeleteCluster removes the registry record of name. Deleting what is
	// not stored is not an error. It does not delete the cluster's input or
	// outputs.
	DeleteCluster(ctx context.Context, name string) error

	// PutCA stores the CA certificate and private key, both PEM, replacing
	// any stored CA.
	PutCA(ctx context.Context, certPEM, keyPEM []byte) error

	// GetCA returns the stored CA certificate and key, or ErrNotFound.
	GetCA(ctx context.Context) (certPEM, keyPEM []byte, err error)

	// PutTrust stores the state of one mesh trust policy under name
	// (namespace/name), replacing any. The caller encrypts any key in it.
	// Replicas read it back with GetTrust; it is not an event.
	PutTrust(ctx context.Context, name string, data []byte) error

	// GetTrust returns the state stored under name, or ErrNotFound.
	GetTrust(ctx context.Context, name string) ([]byte, error)

	// Watch returns a feed of changes made by other replicas: writes through
	// store instances with another replica ID. Writes that change nothing
	// produce no event. The channel is closed when ctx ends or the store is
	// closed. Events are hints to reload, not values; a watcher that fell
	// behind, or a store that lost its connection, delivers a Resync event,
	// after which the watcher reloads everything it keeps. Each call returns
	// its own channel. CA changes are not events: the CA is read at start.
	Watch(ctx context.Context) (<-chan Event, error)

	// Ping reports whether the store is reachable.
	Ping(ctx context.Context) error

	// Close releases the store's resources and closes its Watch channels.
	// Close is idempotent.
	Close() error
}

// Cluster is a workload cluster's registry record.
type Cluster struct {
	// Name is the cluster's unique name.
	Name string
	// TokenHash is the hash of the registration token; the token itself is
	// never stored.
	TokenHash []byte
	// TokenExpires is when the registration token stops being accepted.
	TokenExpires time.Time
	// Registered is when the cluster was registered.
	Registered time.Time
	// Serials are the serial numbers of the client certificates issued to
	// the cluster's agent.
	Serials []string
	// Revoked is set when the cluster's credentials were revoked.
	Revoked bool
	// RevokedAt is when they were revoked.
	RevokedAt time.Time
	// LastSeen is when the cluster's agent last talked to a server.
	LastSeen time.Time
	// Replica is the server replica the agent is connected to, if any.
	Replica string
	// TokenReusable keeps the token valid after a registration; by default
	// a registration consumes it.
	TokenReusable bool
	// SharedToken allows the install-wide shared token for this cluster.
	SharedToken bool
	// Version counts the record's changes; CompareAndPutCluster checks and
	// increments it.
	Version uint64
}

// UpdateCluster reads the record of name, lets update change it and
// stores it with CompareAndPutCluster, reading again and retrying when
// another writer changed it in between. update gets found=false and a
// record with only Name set when none is stored; it may return an error to
// abandon the change, which UpdateCluster returns as is.
func UpdateCluster(ctx context.Context, s Store, name string, update func(c *Cluster, found bool) error) (Cluster, error) {
	for attempt := 0; ; attempt++ {
		c, err := s.GetCluster(ctx, name)
		found := err == nil
		switch {
		case errors.Is(err, ErrNotFound):
			c = Cluster{Name: name}
		case err != nil:
			return Cluster{}, err
		}
		if err := update(&c, found); err != nil {
			return Cluster{}, err
		}
		c.Name = name
		stored, err := s.CompareAndPutCluster(ctx, c)
		if errors.Is(err, ErrConflict) && attempt < maxUpdateAttempts {
			continue
		}
		return stored, err
	}
}

// maxUpdateAttempts bounds UpdateCluster's retries; each retry means
// another writer succeeded, so the bound is reached only under heavy
// contention on one record.
const maxUpdateAttempts = 100

// Clone returns a copy of c that shares no slices with it.
func (c Cluster) Clone() Cluster {
	c.TokenHash = slices.Clone(c.TokenHash)
	c.Serials = slices.Clone(c.Serials)
	return c
}

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
