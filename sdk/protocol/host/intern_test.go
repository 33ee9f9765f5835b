package host

import (
	"crypto/sha256"
	"runtime"
	"testing"
	"time"
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

// An interned body's entry goes once no set holds the body, and a body
// of the same bytes answered later is interned afresh.
func TestInternedBodiesGoWithTheirSets(t *testing.T) {
	var tbl internTable
	tbl.bodies = map[snapshot.Hash]internedBody{}
	body := []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"gone"}}`)
	hash := sha256.Sum256(body)
	tbl.intern(append([]byte(nil), body...), hash)
	deadline := time.Now().Add(10 * time.Second)
	for tbl.len() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the entry of a body no set holds stayed")
		}
		runtime.GC()
		runtime.Gosched()
	}
	again := append([]byte(nil), body...)
	if got := tbl.intern(again, hash); unsafe.SliceData(got) != unsafe.SliceData(again) || tbl.len() != 1 {
		t.Error("a body answered again after its entry went was not interned afresh")
	}
	runtime.KeepAlive(again)
}
