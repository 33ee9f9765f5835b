package host

import (
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
		if err := s.addResources(a, rs, &sentResources{}); err != nil {
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
