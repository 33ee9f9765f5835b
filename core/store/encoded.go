package store

import (
	"context"
	"fmt"
	"sync"

	"github.com/meshrelay/meshrelay/api/snapshot"
)

// Encoded is a snapshot as a backing store read it: its version and hash,
// stored beside it, known at once, and its encoded form, decoded only when
// Snapshot is first called. A cold start keeps the fleet's inputs and
// outputs so (WriteThrough's Load into a memory.Store): the server's fleet
// load needs only the inputs' versions and hashes, most outputs are only
// compared by version and hash until an agent or a reader asks for their
// objects, and a stored snapshot is a fifth of its decoded size or less.
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

// EncodedInputs is an InputReader that lists inputs as it keeps them,
// without decoding those it keeps encoded: memory.Store after a cold start,
// redis.Store, whose inputs are stored encoded, and WriteThrough.
type EncodedInputs interface {
	// ListEncodedInputs returns every input by cluster, as ListInputs
	// would, each decoded when first asked for its snapshot.
	ListEncodedInputs(ctx context.Context) (map[string]*Encoded, error)
}

// ListEncodedInputs returns every input r holds by cluster, kept encoded
// where r keeps them so ([EncodedInputs]), else decoded. A cold start reads
// only the inputs' versions and hashes so (the server's fleet load).
func ListEncodedInputs(ctx context.Context, r InputReader) (map[string]*Encoded, error) {
	if l, ok := r.(EncodedInputs); ok {
		return l.ListEncodedInputs(ctx)
	}
	all, err := r.ListInputs(ctx)
	if err != nil {
		return nil, err
	}
	return DecodedAll(all), nil
}

// DecodedAll returns the Encoded of each snapshot of all, by the same key.
func DecodedAll(all map[string]*snapshot.Snapshot) map[string]*Encoded {
	out := make(map[string]*Encoded, len(all))
	for k, s := range all {
		out[k] = Decoded(s)
	}
	return out
}

// DecodeAll decodes each Encoded of all, by the same key. The first that
// cannot be decoded is the error, with its key.
func DecodeAll(all map[string]*Encoded) (map[string]*snapshot.Snapshot, error) {
	out := make(map[string]*snapshot.Snapshot, len(all))
	for k, e := range all {
		s, err := e.Snapshot()
		if err != nil {
			return nil, fmt.Errorf("%q: %w", k, err)
		}
		out[k] = s
	}
	return out, nil
}
