package host

import (
	"math"
	"sync"
	"unsafe"
	"weak"

	"github.com/meshrelay/meshrelay/api/snapshot"
)

// interned holds, by SHA-256, the bodies of the resources the sessions of
// this process accepted, as weak pointers: a body answered the same for
// many clusters (the same object of the same app in every cluster, which
// a translator encodes once: sdk.Encoded) is held once, by every output
// set that has it, instead of once per set as each answer's decoding
// allocates it. An entry costs about 40 bytes beside a body of hundreds;
// entries whose body no set holds any longer are swept as the table grows.
var interned internTable

type internTable struct {
	mu     sync.Mutex
	bodies map[internKey]internedBody
	// sweepAt is the size at which the table next drops its dead entries.
	sweepAt int
}

// internKey is the first half of a body's SHA-256, which the body's
// length completes: as unique as the digests the protocol keys
// resources by (protocol.ResourceKey).
type internKey [16]byte

// internedBody is a body held elsewhere: its first byte and its length.
type internedBody struct {
	first weak.Pointer[byte]
	n     uint32
}

// minSweep is the smallest table that is swept.
const minSweep = 1 << 12

// intern returns a body with the bytes of body, whose SHA-256 is hash:
// the one interned for hash while a set still holds it, else body itself,
// interned from now on. What it returns has no spare capacity, so that
// no append can write into bytes that other sets share; like every
// resource body, it must not be modified.
func (t *internTable) intern(body []byte, hash snapshot.Hash) []byte {
	if len(body) == 0 || len(body) > math.MaxUint32 {
		return body
	}
	key := internKey(hash[:16])
	t.mu.Lock()
	defer t.mu.Unlock()
	if held, ok := t.bodies[key]; ok && int(held.n) == len(body) {
		if first := held.first.Value(); first != nil {
			return unsafe.Slice(first, held.n)
		}
	}
	if t.bodies == nil {
		t.bodies, t.sweepAt = map[internKey]internedBody{}, minSweep
	}
	if len(t.bodies) >= t.sweepAt {
		t.sweep()
	}
	t.bodies[key] = internedBody{first: weak.Make(&body[0]), n: uint32(len(body))}
	return body[:len(body):len(body)]
}

// sweep drops the entries whose body is gone, and sets the next sweep
// for when the table has doubled. t.mu is held.
func (t *internTable) sweep() {
	for k, held := range t.bodies {
		if held.first.Value() == nil {
			delete(t.bodies, k)
		}
	}
	t.sweepAt = max(2*len(t.bodies), minSweep)
}

// len returns how many bodies are interned, live or not yet swept.
func (t *internTable) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.bodies)
}
