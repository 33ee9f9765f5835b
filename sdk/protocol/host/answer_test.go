package host

import (
	"crypto/sha256"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/meshrelay/meshrelay/api/snapshot"
	snapshotv1 "github.com/meshrelay/meshrelay/proto/snapshot/v1"
	"github.com/meshrelay/meshrelay/sdk/protocol"
)

// TestAddResourcesAgainstAccepted checks that a resource equal to one of
// the plugin's last answer is taken as it is, and that anything else is still
// checked: a changed body, a body under another identity.
func TestAddResourcesAgainstAccepted(t *testing.T) {
	id := snapshot.ID{Version: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "a"}
	good, err := snapshot.NewResource(id, []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns"}}`))
	if err != nil {
		t.Fatal(err)
	}
	checked := protocol.NewKeySet([]protocol.ResourceKey{keyOf(good)})
	other := snapshot.ID{Version: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "b"}
	tests := map[string]struct {
		id      snapshot.ID
		body    string
		wantErr string
	}{
		"the accepted resource":          {id: id, body: string(good.Body)},
		"a changed, valid body":          {id: id, body: `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns"},"data":{"k":"v"}}`},
		"a changed body of another name": {id: id, body: `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","namespace":"ns"}}`, wantErr: `metadata.name "x"`},
		"a changed body that is no JSON": {id: id, body: `{"apiVersion":`, wantErr: "not valid JSON"},
		"the accepted body, another id":  {id: other, body: string(good.Body), wantErr: `metadata.name "a"`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := &Session{maxOutput: 1 << 20}
			a := newAssembly([2]string{"east", "b"}, checked)
			err := s.addResources(a, []*snapshotv1.Resource{{Id: snapshot.IDToProto(tc.id), Body: []byte(tc.body)}}, &sentResources{})
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("addResources = %v, want it accepted", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("addResources = %v, want an error containing %q", err, tc.wantErr)
			case err == nil && len(a.out.Resources) != 1:
				t.Fatalf("addResources kept %d resources, want 1", len(a.out.Resources))
			}
		})
	}
}

// answerSet returns n ConfigMaps of cluster as a plugin answers them.
func answerSet(tb testing.TB, cluster string, n int) []*snapshotv1.Resource {
	tb.Helper()
	out := make([]*snapshotv1.Resource, n)
	for i := range n {
		name := fmt.Sprintf("%s-%03d", cluster, i)
		id := snapshot.ID{Version: "v1", Kind: "ConfigMap", Namespace: "ns", Name: name}
		out[i] = &snapshotv1.Resource{Id: snapshot.IDToProto(id), Body: fmt.Appendf(nil, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":%q,"namespace":"ns"},"data":{"k":"%0200d"}}`, name, i)}
	}
	return out
}

// TestAnsweredAgainIsNotChecked checks that the digests a set's answer
// leaves spare the next answer's unchanged resources their check, even
// one the check would refuse, and only those.
func TestAnsweredAgainIsNotChecked(t *testing.T) {
	s := &Session{maxOutput: 1 << 20}
	key := [2]string{"east", "b"}
	rs := answerSet(t, "east", 20)
	first := newAssembly(key, nil)
	if err := s.addResources(first, rs, &sentResources{}); err != nil {
		t.Fatal(err)
	}
	checked := first.finish()
	if len(checked) != len(rs) {
		t.Fatalf("finish kept %d digests, want %d", len(checked), len(rs))
	}
	for i, r := range rs {
		if !checked.Has(keyOf(first.out.Resources[i])) {
			t.Errorf("the digests lack %s", r.GetId().GetName())
		}
	}
	// A body that is no object under the identity of one answered, as if
	// it had been accepted: taken unchecked when answered again.
	bad := &snapshotv1.Resource{Id: rs[3].GetId(), Body: []byte(`[1]`)}
	badKey := keyOf(snapshot.Resource{ID: first.out.Resources[3].ID, Hash: sha256.Sum256(bad.GetBody())})
	again := newAssembly(key, protocol.NewKeySet(append(slices.Clone(checked), badKey)))
	if err := s.addResources(again, append(slices.Clone(rs[:3]), bad), &sentResources{}); err != nil {
		t.Fatalf("addResources(answered resources) = %v, want them taken unchecked", err)
	}
	other := newAssembly(key, checked)
	if err := s.addResources(other, []*snapshotv1.Resource{bad}, &sentResources{}); err == nil {
		t.Fatal("addResources(a body no answer held) = nil, want it checked and refused")
	}
}

// A body that passed the checks in one set is not checked again in
// another, and only a body that passed them spares another its check: a
// body changed under the same identity, or one taken unchecked from a
// set's last answer, is checked.
func TestCheckedBodiesSpareOtherSets(t *testing.T) {
	s := &Session{maxOutput: 1 << 20, bodies: newCheckedBodies(checkedBodiesLimit)}
	rs := answerSet(t, "shared", 3)
	if err := s.addResources(newAssembly([2]string{"east", "b"}, nil), rs, &sentResources{}); err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if !s.bodies.has(keyOf(snapshot.Resource{ID: mustID(t, r), Hash: sha256.Sum256(r.GetBody())})) {
			t.Fatalf("%s passed the checks but is not held as checked", r.GetId().GetName())
		}
	}
	// A body the checks refuse, held as if it had passed them: another
	// set takes it unchecked, which shows the check is skipped.
	bad := &snapshotv1.Resource{Id: rs[0].GetId(), Body: []byte(`[1]`)}
	badKey := keyOf(snapshot.Resource{ID: mustID(t, bad), Hash: sha256.Sum256(bad.GetBody())})
	if err := s.addResources(newAssembly([2]string{"west", "b"}, nil), []*snapshotv1.Resource{bad}, &sentResources{}); err == nil {
		t.Fatal("a body no set passed was taken unchecked")
	}
	taken := newAssembly([2]string{"north", "b"}, protocol.NewKeySet([]protocol.ResourceKey{badKey}))
	if err := s.addResources(taken, []*snapshotv1.Resource{bad}, &sentResources{}); err != nil {
		t.Fatalf("the set's last answer held the body: %v", err)
	}
	if s.bodies.has(badKey) {
		t.Fatal("a body taken unchecked from a set's last answer is held as checked")
	}
	s.bodies.add(badKey)
	if err := s.addResources(newAssembly([2]string{"south", "b"}, nil), []*snapshotv1.Resource{bad}, &sentResources{}); err != nil {
		t.Fatalf("a body held as checked was checked again: %v", err)
	}
}

// checkedBodies holds at most two generations: a lookup moves what it
// finds into the current one, and a full current generation drops the
// old.
func TestCheckedBodiesBounded(t *testing.T) {
	key := func(i byte) protocol.ResourceKey { return protocol.ResourceKey{i} }
	c := newCheckedBodies(2)
	c.add(key(1))
	c.add(key(2))
	c.add(key(3)) // 1 and 2 are the old generation now
	if !c.has(key(1)) {
		t.Fatal("1, in the old generation, was dropped")
	}
	c.add(key(4)) // 1 moved into the current one, which is full: 2 goes
	if c.has(key(2)) {
		t.Error("2 was kept beyond two generations")
	}
	for _, i := range []byte{1, 3, 4} {
		if !c.has(key(i)) {
			t.Errorf("%d was dropped", i)
		}
	}
	if n := len(c.cur) + len(c.old); n > 4 {
		t.Errorf("%d digests held, want at most 4", n)
	}
}

func mustID(t *testing.T, r *snapshotv1.Resource) snapshot.ID {
	t.Helper()
	id, err := snapshot.IDFromProto(r.GetId())
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// BenchmarkAnsweredSets assembles the answer of 2,000 sets of 50
// resources as a plugin's second answer does (each resource unchanged),
// and holds the digests each set leaves: it reports the time per
// resource and the heap each set's digests hold (heap-B/set).
func BenchmarkAnsweredSets(b *testing.B) {
	const sets, perSet = 2000, 50
	s := &Session{maxOutput: 1 << 30}
	answers := make([][]*snapshotv1.Resource, sets)
	first := make([]protocol.KeySet, sets)
	for i := range sets {
		answers[i] = answerSet(b, fmt.Sprintf("c%04d", i), perSet)
		a := newAssembly([2]string{"c", "b"}, nil)
		if err := s.addResources(a, answers[i], &sentResources{}); err != nil {
			b.Fatal(err)
		}
		first[i] = a.finish()
	}
	var held []protocol.KeySet
	var before, after runtime.MemStats
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		held = make([]protocol.KeySet, sets)
		runtime.GC()
		runtime.ReadMemStats(&before)
		b.StartTimer()
		for i := range sets {
			a := newAssembly([2]string{"c", "b"}, first[i])
			if err := s.addResources(a, answers[i], &sentResources{}); err != nil {
				b.Fatal(err)
			}
			held[i] = a.finish()
		}
		b.StopTimer()
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.StartTimer()
	}
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/sets, "heap-B/set")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*sets*perSet), "ns/resource")
	runtime.KeepAlive(held)
}

// A finished set's resources are held in an array of their number, not in
// the larger one that appending its parts grew: the engine keeps them as
// the cluster's output for as long as it stands.
func TestFinishedSetHoldsNoSpareCapacity(t *testing.T) {
	s := &Session{maxOutput: 1 << 20}
	for _, n := range []int{1, 5, 20, 33, 100} {
		a := newAssembly([2]string{"east", "b"}, nil)
		rs := answerSet(t, "east", n)
		// The set comes in two parts, as a plugin splits a large one.
		if err := s.addResources(a, rs[:n/2], &sentResources{}); err != nil {
			t.Fatal(err)
		}
		if err := s.addResources(a, rs[n/2:], &sentResources{}); err != nil {
			t.Fatal(err)
		}
		keys := a.finish()
		if got := a.out.Resources; len(got) != n || cap(got)-len(got) > len(got)/16 {
			t.Errorf("%d resources: the set holds %d in an array of %d", n, len(got), cap(got))
		}
		if len(keys) != n {
			t.Errorf("%d resources: %d keys", n, len(keys))
		}
	}
}

// A set answered in one message, with room reserved for it as receive
// does, is held in the one array reserved: no growth by appends, no copy
// to fit.
func TestSetInOneMessageIsHeldWhereReserved(t *testing.T) {
	s := &Session{maxOutput: 1 << 20}
	for _, n := range []int{1, 20, 100} {
		a := newAssembly([2]string{"east", "b"}, nil)
		rs := answerSet(t, "east", n)
		a.reserve(len(rs))
		reserved := unsafe.SliceData(a.out.Resources)
		if err := s.addResources(a, rs, &sentResources{}); err != nil {
			t.Fatal(err)
		}
		a.finish()
		if got := a.out.Resources; unsafe.SliceData(got) != reserved || cap(got) != n {
			t.Errorf("%d resources: held in another array than the one reserved, or in one of %d", n, cap(got))
		}
	}
}

// BenchmarkFirstAnswer assembles a plugin's first answer for a cluster,
// 100 resources in one message, as receive does: B/op is what it
// allocates, the resources' IDs and digests included.
func BenchmarkFirstAnswer(b *testing.B) {
	s := &Session{maxOutput: 1 << 20}
	rs := answerSet(b, "east", 100)
	b.ReportAllocs()
	for b.Loop() {
		a := newAssembly([2]string{"east", "b"}, nil)
		a.reserve(len(rs))
		if err := s.addResources(a, rs, &sentResources{}); err != nil {
			b.Fatal(err)
		}
		a.finish()
	}
}

// BenchmarkKeptResources assembles a set of 150 resources of which the
// plugin sent 2 and named the others kept, in order, as an answer to a
// one-cluster change does: it reports the time per set.
func BenchmarkKeptResources(b *testing.B) {
	const n = 150
	s := &Session{maxOutput: 1 << 30}
	key := [2]string{"east", "b"}
	rs := answerSet(b, "east", n)
	first := newAssembly(key, nil)
	if err := s.addResources(first, rs, &sentResources{}); err != nil {
		b.Fatal(err)
	}
	checked := first.finish()
	delivered, err := snapshot.New(0, first.out.Resources)
	if err != nil {
		b.Fatal(err)
	}
	view := View{Delivered: func(string, string) (*snapshot.Snapshot, bool) { return delivered, true }}
	var kept []*snapshotv1.ResourceID
	for i, r := range rs {
		if i != 10 && i != 100 {
			kept = append(kept, r.GetId())
		}
	}
	sent := []*snapshotv1.Resource{rs[10], rs[100]}
	for b.Loop() {
		a := newAssembly(key, checked)
		if err := s.addResources(a, sent, &sentResources{}); err != nil {
			b.Fatal(err)
		}
		if err := s.addKept(a, kept, view); err != nil || a.lost {
			b.Fatalf("kept: %v, lost %v", err, a.lost)
		}
		if len(a.out.Resources) != n {
			b.Fatalf("%d resources, want %d", len(a.out.Resources), n)
		}
	}
}
