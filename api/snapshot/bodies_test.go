package snapshot

import (
	"bytes"
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

// An input decoded holds none of its message's memory: the bodies no
// other input has are copied into one block, in the order of the
// upserts, and so are the names.
func TestInputHoldsNoneOfItsMessage(t *testing.T) {
	var rs []Resource
	for i := range 3 {
		id := ID{Version: "v1", Kind: "ConfigMap", Namespace: "held", Name: fmt.Sprintf("only-here-%d", i)}
		r, err := NewResource(id, fmt.Appendf(nil, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":%q,"namespace":"held"},"data":{"at":"%p"}}`, id.Name, t))
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	p := wireDelta(t, 1, rs)
	d, err := InputDeltaFromProto(p)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range d.Upserts {
		w := p.GetUpserts()[i]
		if !bytes.Equal(r.Body, w.GetBody()) || r.ID.Name != w.GetId().GetName() {
			t.Fatalf("%s: decoded as another object", w.GetId().GetName())
		}
		if unsafe.SliceData(r.Body) == unsafe.SliceData(w.GetBody()) {
			t.Errorf("%s: the body is the message's", r.ID)
		}
		if unsafe.StringData(r.ID.Name) == unsafe.StringData(w.GetId().GetName()) {
			t.Errorf("%s: the name is the message's", r.ID)
		}
		if cap(r.Body) != len(r.Body) {
			t.Errorf("%s: the body has spare capacity", r.ID)
		}
		if i == 0 {
			continue
		}
		prev := d.Upserts[i-1]
		if unsafe.Add(unsafe.Pointer(unsafe.SliceData(prev.Body)), len(prev.Body)) != unsafe.Pointer(unsafe.SliceData(r.Body)) {
			t.Errorf("%s: the body does not follow the one before in one block", r.ID)
		}
		if unsafe.Add(unsafe.Pointer(unsafe.StringData(prev.ID.Name)), len(prev.ID.Name)) != unsafe.Pointer(unsafe.StringData(r.ID.Name)) {
			t.Errorf("%s: the name does not follow the one before in one block", r.ID)
		}
	}
}
