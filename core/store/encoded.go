package store

import (
	"fmt"
	"sync"

	"github.com/meshrelay/meshrelay/api/snapshot"
)

// Encoded is a snapshot as a backing store read it: its version and hash,
// stored beside it, known at once, and its encoded form, decoded only when
// Snapshot is first called. A cold start keeps the fleet's outputs so
// (WriteThrough's Load into a memory.Store): most are only compared by
// version and hash until an agent or a reader asks for their objects, and
// a stored output is a fifth of its decoded size or less.
//
// An Encoded is safe for concurrent use: the first Snapshot decodes, once,
// and every call returns its result; the encoded form is dropped then.
type Encoded struct {
	version uint64
	hash    snapshot.Hash

	once   sync.Once
	decode func() (*snapshot.Snapshot, error)
	snap   *snapshot.Snapshot
	err    error
}

// NewEncoded returns the Encoded of a snapshot of the given version and
// hash, which decode returns. Snapshot checks what decode returns against
// them: data stored under another snapshot's version or hash is an error,
// never that snapshot.
func NewEncoded(version uint64, hash snapshot.Hash, decode func() (*snapshot.Snapshot, error)) *Encoded {
	return &Encoded{version: version, hash: hash, decode: decode}
}

// Decoded returns the Encoded of s, already decoded.
func Decoded(s *snapshot.Snapshot) *Encoded {
	e := &Encoded{version: s.Version(), hash: s.Hash(), snap: s}
	e.once.Do(func() {})
	return e
}

// Version returns the snapshot's version, without decoding it.
func (e *Encoded) Version() uint64 { return e.version }

// Hash returns the snapshot's hash, without decoding it.
func (e *Encoded) Hash() snapshot.Hash { return e.hash }

// Snapshot returns the decoded snapshot, decoding it on the first call.
// Data that cannot be decoded, or that decodes to another version or
// hash, is an error, the same on every call.
func (e *Encoded) Snapshot() (*snapshot.Snapshot, error) {
	e.once.Do(func() {
		s, err := e.decode()
		e.decode = nil // the encoded form is no longer needed
		switch {
		case err != nil:
			e.err = err
		case s.Version() != e.version || s.Hash() != e.hash:
			e.err = fmt.Errorf("decode snapshot: version %d hash %s, stored beside it %d %s",
				s.Version(), s.Hash().Short(), e.version, e.hash.Short())
		default:
			e.snap = s
		}
	})
	return e.snap, e.err
}
