package host

import (
	"crypto/sha256"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"

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
			err := s.addResources(a, []*snapshotv1.Resource{{Id: snapshot.IDToProto(tc.id), Body: []byte(tc.body)}})
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
	if err := s.addResources(first, rs); err != nil {
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
	if err := s.addResources(again, append(slices.Clone(rs[:3]), bad)); err != nil {
		t.Fatalf("addResources(answered resources) = %v, want them taken unchecked", err)
	}
	other := newAssembly(key, checked)
	if err := s.addResources(other, []*snapshotv1.Resource{bad}); err == nil {
		t.Fatal("addResources(a body no answer held) = nil, want it checked and refused")
	}
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
		if err := s.addResources(a, answers[i]); err != nil {
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
			if err := s.addResources(a, answers[i]); err != nil {
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
