package snapshot

import (
	"crypto/sha256"
	"fmt"
	"runtime"
	"testing"
	"unsafe"
)

// The entries of bodies nothing holds are swept as the table grows, and
// a body of the same bytes decoded after its entry went is interned
// afresh.
func TestInternedBodiesAreSwept(t *testing.T) {
	var tbl internTable
	gone := []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"gone"}}`)
	hash := sha256.Sum256(gone)
	tbl.intern(append([]byte(nil), gone...), hash)
	var held [][]byte
	for i := range minSweep - 1 {
		b := fmt.Appendf(nil, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"held-%d"}}`, i)
		held = append(held, tbl.intern(b, sha256.Sum256(b)))
	}
	runtime.GC()
	runtime.GC()
	last := []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"last"}}`)
	held = append(held, tbl.intern(last, sha256.Sum256(last)))
	if n := tbl.len(); n != minSweep {
		t.Errorf("after a sweep the table holds %d entries, want the %d bodies still held", n, minSweep)
	}
	again := append([]byte(nil), gone...)
	if got := tbl.intern(again, hash); unsafe.SliceData(got) != unsafe.SliceData(again) {
		t.Error("a body decoded again after its entry went was not interned afresh")
	}
	runtime.KeepAlive(held)
	runtime.KeepAlive(again)
}

// Two agents' inputs that carry the same object, each decoded from its own
// message, hold its body once, with no spare capacity; another object's
// body is held apart.
func TestInputBodiesAreHeldOnce(t *testing.T) {
	rs := agentResources(t, 2)
	decode := func(version uint64) Delta {
		d, err := InputDeltaFromProto(wireDelta(t, version, rs))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	east, west := decode(1), decode(2)
	for i := range east.Upserts {
		a, b := east.Upserts[i].Body, west.Upserts[i].Body
		if unsafe.SliceData(a) != unsafe.SliceData(b) {
			t.Errorf("%s: two inputs hold two copies of one body", east.Upserts[i].ID)
		}
		if cap(a) != len(a) {
			t.Errorf("%s: an interned body has spare capacity", east.Upserts[i].ID)
		}
	}
	if unsafe.SliceData(east.Upserts[0].Body) == unsafe.SliceData(east.Upserts[1].Body) {
		t.Error("another object's body shares the bytes of the first")
	}
	runtime.KeepAlive(east)
	runtime.KeepAlive(west)
}
