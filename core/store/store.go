package store

import (
	"context"
	"errors"

	"github.com/meshrelay/meshrelay/api/snapshot"
)

// ErrNotFound is returned by Get methods when nothing is stored under the
// requested key. Callers test for it with errors.Is.
var ErrNotFound = errors.New("not found")

// ErrClosed is returned by every method of a store after Close.
var ErrClosed = errors.New("store closed")

// ErrConflict is returned by CompareAndPutCluster, CompareAndPutTrust and
// CompareAndPutRollout
// when the stored record's version is not the one the caller read: another
// writer changed it first. Callers read the record again and retry (see
// UpdateCluster and UpdateTrust).
var ErrConflict = errors.New("record changed concurrently")

// Store keeps the fleet's state: per-cluster input snapshots, per-cluster and
// per-backend output snapshots, the cluster registry, the CA, the meshes'
// trust state and the staged rollout's records, a change feed across server
// replicas, the leases by which replicas take turns, and the replicas'
// presence. It is composed of one small interface per job;
// a caller that needs one job takes that interface, and every Store is one.
// Implementations are safe for concurrent use.
//
// Every method of Store and of its parts returns ErrClosed after Close, and
// an error wrapping the context's error when ctx ends first. Errors other
// than ErrNotFound, ErrConflict and ErrClosed mean the store could not be
// reached or its data could not be decoded; the caller may retry.
type Store interface {
	Inputs
	Outputs
	Registry
	CA
	Trust
	Rollouts
	Watcher
	Leases
	Presence

	// Ping reports whether the store is reachable.
	Ping(ctx context.Context) error

	// Close releases the store's resources and closes its Watch channels.
	// Close is idempotent.
	Close() error
}

// InputReader reads the clusters' input snapshots.
type InputReader interface {
	// GetInput returns cluster's input snapshot, or ErrNotFound.
	GetInput(ctx context.Context, cluster string) (*snapshot.Snapshot, error)

	// ListInputs returns every stored input snapshot by cluster name. The
	// map is the caller's; it is empty, not nil, when nothing is stored.
	ListInputs(ctx context.Context) (map[string]*snapshot.Snapshot, error)
}

// Inputs keeps each cluster's last input snapshot, as its agent sent it.
type Inputs interface {
	InputReader

	// PutInput stores s as cluster's input snapshot. A Put whose version is
	// lower than the stored one is ignored and returns nil: server replicas
	// race to store the same agent's snapshots, and the newest must win. A
	// Put with the stored version and hash changes nothing and publishes no
	// event. Any other Put replaces the stored snapshot, including one with
	// the same version and another hash. cluster must not be empty and s
	// must not be nil.
	PutInput(ctx context.Context, cluster string, s *snapshot.Snapshot) error

	// DeleteInput removes cluster's input snapshot. Deleting what is not
	// stored is not an error.
	DeleteInput(ctx context.Context, cluster string) error
}

// OutputReader reads the outputs computed for the clusters.
type OutputReader interface {
	// GetOutput returns the output for cluster and backend, or ErrNotFound.
	GetOutput(ctx context.Context, cluster, backend string) (*snapshot.Snapshot, error)

	// ListOutputs returns cluster's outputs by backend; an empty map when
	// there are none.
	ListOutputs(ctx context.Context, cluster string) (map[string]*snapshot.Snapshot, error)
}

// Outputs keeps the output snapshots computed for each cluster, one per
// backend.
type Outputs interface {
	OutputReader

	// PutOutput stores s as the output for cluster and backend. Outputs are
	// last-writer-wins: the engine that computed them owns their versions.
	// A Put with the stored version and hash changes nothing. cluster and
	// backend must not be empty and s must not be nil.
	PutOutput(ctx context.Context, cluster, backend string, s *snapshot.Snapshot) error

	// DeleteOutputs removes every output of cluster. Deleting what is not
	// stored is not an error.
	DeleteOutputs(ctx context.Context, cluster string) error
}

// RegistryReader reads the cluster registry.
type RegistryReader interface {
	// GetCluster returns the registry record of name, or ErrNotFound.
	GetCluster(ctx context.Context, name string) (Cluster, error)

	// ListClusters returns every registry record, sorted by name; an empty
	// slice when there are none.
	ListClusters(ctx context.Context) ([]Cluster, error)
}

// Registry keeps the registry of workload clusters: their registration
// tokens, the certificates issued to their agents, their revocation and
// where their agents are connected (see Cluster).
type Registry interface {
	RegistryReader

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

	// CompareAndPutClusters is CompareAndPutCluster for many records in
	// one round trip to the store: each record of cs is stored only if
	// the stored record of its name has its version. It returns the
	// records it stored, each with its new Version, in the order of cs,
	// and leaves out those whose version did not match, without an error
	// (the caller reads them again). Each record's check and write are
	// atomic across every replica of the store; the batch as a whole is
	// not. Names must not be empty or repeated.
	CompareAndPutClusters(ctx context.Context, cs []Cluster) ([]Cluster, error)

	// DeleteCluster removes the registry record of name. Deleting what is
	// not stored is not an error. It does not delete the cluster's input or
	// outputs.
	DeleteCluster(ctx context.Context, name string) error
}

// CA keeps the server's certificate authority, which signs the agents'
// client certificates.
type CA interface {
	// PutCA stores the CA certificate and private key, both PEM, replacing
	// any stored CA.
	PutCA(ctx context.Context, certPEM, keyPEM []byte) error

	// GetCA returns the stored CA certificate and key, or ErrNotFound.
	GetCA(ctx context.Context) (certPEM, keyPEM []byte, err error)
}

// Trust keeps the records of mesh trust (each policy's roots and where a
// rotation is, each cluster's last report), which every replica must read
// alike. Trust records are not events.
type Trust interface {
	// GetTrust returns the record stored under name, or ErrNotFound.
	GetTrust(ctx context.Context, name string) (TrustRecord, error)

	// PutTrust creates or replaces the record r.Name as given, Version
	// included: it copies records between stores and restores them.
	// Changes go through CompareAndPutTrust, which never loses a concurrent
	// change. The name and the data must not be empty.
	PutTrust(ctx context.Context, r TrustRecord) error

	// CompareAndPutTrust stores r only if the stored record of r.Name has
	// version r.Version (0: no record is stored), and returns the stored
	// record, whose Version is r.Version+1. Otherwise it stores nothing and
	// returns an error wrapping ErrConflict. The check and the write are
	// atomic across every replica of the store. The caller encrypts any key
	// in r.Data.
	CompareAndPutTrust(ctx context.Context, r TrustRecord) (TrustRecord, error)

	// DeleteTrust removes the record of name. Deleting what is not stored
	// is not an error.
	DeleteTrust(ctx context.Context, name string) error
}

// Watcher is the change feed: how a server replica learns of the others'
// writes.
type Watcher interface {
	// Watch returns a feed of changes made by other replicas: writes through
	// store instances with another replica ID. Writes that change nothing
	// produce no event. The channel is closed when ctx ends or the store is
	// closed. Events are hints to reload, not values; a watcher that fell
	// behind, or a store that lost its connection, delivers a Resync event,
	// after which the watcher reloads everything it keeps. Each call returns
	// its own channel. CA changes are not events: the CA is read at start.
	Watch(ctx context.Context) (<-chan Event, error)
}
