package host

import (
	"crypto/sha256"
	"fmt"
	"runtime"
	"testing"
	"unsafe"

	"github.com/meshrelay/meshrelay/api/snapshot"
	snapshotv1 "github.com/meshrelay/meshrelay/proto/snapshot/v1"
)

// Equal bodies answered in different sets are held once, with no spare
// capacity; other bodies are held apart.
func TestEqualBodiesAreHeldOnce(t *testing.T) {
	s := &Session{maxOutput: 1 << 20}
	answer := func(cluster string, rs []*snapshotv1.Resource) []snapshot.Resource {
		a := newAssembly([2]string{cluster, "b"}, nil)
		if err := s.addResources(a, rs); err != nil {
			t.Fatal(err)
		}
		return a.out.Resources
	}
	// The same objects, decoded from two answers: equal bytes, apart.
	east, west := answer("east", answerSet(t, "shared", 3)), answer("west", answerSet(t, "shared", 3))
	other := answer("north", answerSet(t, "other", 1))
	for i := range east {
		if unsafe.SliceData(east[i].Body) != unsafe.SliceData(west[i].Body) {
			t.Errorf("%s: two sets hold two copies of one body", east[i].ID.Name)
		}
		if cap(east[i].Body) != len(east[i].Body) {
			t.Errorf("%s: an interned body has spare capacity", east[i].ID.Name)
		}
	}
	if unsafe.SliceData(other[0].Body) == unsafe.SliceData(east[0].Body) {
		t.Error("another body shares the bytes of the first")
	}
	runtime.KeepAlive(east)
	runtime.KeepAlive(west)
	runtime.KeepAlive(other)
}

// The entries of bodies no set holds are swept as the table grows, and
// a body of the same bytes answered after its entry went is interned
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
		t.Error("a body answered again after its entry went was not interned afresh")
	}
	runtime.KeepAlive(held)
	runtime.KeepAlive(again)
}
