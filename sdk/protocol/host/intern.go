package host

import (
	"runtime"
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
// allocates it. An entry goes when no set holds its body any longer.
var interned = internTable{bodies: map[snapshot.Hash]internedBody{}}

type internTable struct {
	mu     sync.Mutex
	bodies map[snapshot.Hash]internedBody
}

// internedBody is a body held elsewhere: its first byte and its length.
type internedBody struct {
	first weak.Pointer[byte]
	n     int
}

// intern returns a body with the bytes of body, whose SHA-256 is hash:
// the one interned for hash while a set still holds it, else body itself,
// interned from now on. What it returns has no spare capacity, so that
// no append can write into bytes that other sets share; like every
// resource body, it must not be modified.
func (t *internTable) intern(body []byte, hash snapshot.Hash) []byte {
	if len(body) == 0 {
		return body
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if held, ok := t.bodies[hash]; ok && held.n == len(body) {
		if first := held.first.Value(); first != nil {
			return unsafe.Slice(first, held.n)
		}
	}
	first := &body[0]
	t.bodies[hash] = internedBody{first: weak.Make(first), n: len(body)}
	runtime.AddCleanup(first, t.forget, hash)
	return body[:len(body):len(body)]
}

// forget drops hash's entry once its body is gone; an entry made since
// for another copy of the same bytes stays.
func (t *internTable) forget(hash snapshot.Hash) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if held, ok := t.bodies[hash]; ok && held.first.Value() == nil {
		delete(t.bodies, hash)
	}
}

// len returns how many bodies are interned.
func (t *internTable) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.bodies)
}
