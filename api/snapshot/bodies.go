package snapshot

import (
	"math"
	"sync"
	"unsafe"
	"weak"
)

// InternBody returns a body with the bytes of body, whose SHA-256 is
// hash: the one this process interned for hash while anything still holds
// it, else body itself, interned from now on. A body the same for many
// clusters (the same object of the same app in every cluster, as an agent
// discovers it or a translator emits it) is then held once, by every
// snapshot that has it, instead of once per message that carried it, as
// each decoding allocates it. The table holds the bodies weakly: an entry
// costs about 40 bytes beside a body of hundreds, and entries whose body
// nothing holds any longer are swept as the table grows.
//
// What it returns has no spare capacity, so that no append can write into
// bytes that others share; like every resource body, it must not be
// modified.
func InternBody(body []byte, hash Hash) []byte { return interned.intern(body, hash) }

// interned is the process's table of [InternBody].
var interned internTable

type internTable struct {
	mu     sync.Mutex
	bodies map[internKey]internedBody
	// sweepAt is the size at which the table next drops its dead entries.
	sweepAt int
}

// internKey is the first half of a body's SHA-256, which the body's
// length completes: 128 bits of a cryptographic digest, as unique as the
// digests the plugin protocol keys resources by.
type internKey [16]byte

// internedBody is a body held elsewhere: its first byte and its length.
type internedBody struct {
	first weak.Pointer[byte]
	n     uint32
}

// minSweep is the smallest table that is swept.
const minSweep = 1 << 12

// intern is [InternBody] in t.
func (t *internTable) intern(body []byte, hash Hash) []byte {
	if len(body) == 0 || len(body) > math.MaxUint32 {
		return body
	}
	key := internKey(hash[:16])
	t.mu.Lock()
	defer t.mu.Unlock()
	if held, ok := t.held(key, len(body)); ok {
		return held
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

// lookup returns the body interned for hash and the length of body, if
// anything still holds it.
func (t *internTable) lookup(body []byte, hash Hash) ([]byte, bool) {
	if len(body) == 0 || len(body) > math.MaxUint32 {
		return nil, false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.held(internKey(hash[:16]), len(body))
}

// held returns the body of n bytes interned under key, if anything still
// holds it. t.mu is held.
func (t *internTable) held(key internKey, n int) ([]byte, bool) {
	if e, ok := t.bodies[key]; ok && int(e.n) == n {
		if first := e.first.Value(); first != nil {
			return unsafe.Slice(first, e.n), true
		}
	}
	return nil, false
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
