package snapshot

import (
	"fmt"
	"runtime"
	"testing"
	"unique"
	"unsafe"

	"google.golang.org/protobuf/proto"

	snapshotv1 "github.com/meshrelay/meshrelay/proto/snapshot/v1"
)

// wireDelta returns a full delta as an agent sends it, decoded from its
// own bytes as the gRPC codec does: every string of its IDs is a separate
// allocation of that message.
func wireDelta(t testing.TB, version uint64, rs []Resource) *snapshotv1.Delta {
	t.Helper()
	data, err := proto.Marshal(DeltaToProto(Delta{Version: version, Full: true, Upserts: rs}, false))
	if err != nil {
		t.Fatal(err)
	}
	var p snapshotv1.Delta
	if err := proto.Unmarshal(data, &p); err != nil {
		t.Fatal(err)
	}
	return &p
}

// TestIDFromProtoSharesRepeatedFields decodes the same kinds of objects
// from two messages: their IDs share one copy of each group, version,
// kind and namespace, and keep their own names.
func TestIDFromProtoSharesRepeatedFields(t *testing.T) {
	fields := func(id ID) map[string]string {
		return map[string]string{"group": id.Group, "version": id.Version, "kind": id.Kind, "namespace": id.Namespace}
	}
	id := ID{Group: "apps", Version: "v1", Kind: "Deployment", Namespace: "shop", Name: "cart"}
	// The table holds a value while a handle does: these keep the test's
	// values in it whatever the garbage collector does meanwhile.
	var handles []unique.Handle[string]
	for _, v := range fields(id) {
		handles = append(handles, unique.Make(v))
	}
	r, err := NewResource(id, []byte(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"cart","namespace":"shop"}}`))
	if err != nil {
		t.Fatal(err)
	}
	first, err := DeltaFromProto(wireDelta(t, 1, []Resource{r}))
	if err != nil {
		t.Fatal(err)
	}
	second, err := IDFromProto(wireDelta(t, 2, []Resource{r}).GetUpserts()[0].GetId())
	if err != nil {
		t.Fatal(err)
	}
	a, b := fields(first.Upserts[0].ID), fields(second)
	for name, v := range b {
		if unsafe.StringData(a[name]) != unsafe.StringData(v) {
			t.Errorf("the %s %q of two messages' IDs is held twice (at %p and %p), want one copy", name, v, unsafe.StringData(a[name]), unsafe.StringData(v))
		}
	}
	if unsafe.StringData(first.Upserts[0].ID.Name) == unsafe.StringData(second.Name) {
		t.Errorf("the name %q of two messages' IDs is one copy, want each message's own", second.Name)
	}
	if second != id {
		t.Errorf("IDFromProto = %v, want %v", second, id)
	}
	runtime.KeepAlive(handles)
}

// agentResources are an agent's input as the fleet benchmark's clusters
// hold it: per service a Service, an EndpointSlice, a Deployment and a
// ServiceAccount, over five namespaces, bodies of about 300 bytes.
func agentResources(tb testing.TB, services int) []Resource {
	tb.Helper()
	kinds := []struct{ group, kind string }{{"", "Service"}, {"discovery.k8s.io", "EndpointSlice"}, {"apps", "Deployment"}, {"", "ServiceAccount"}}
	var rs []Resource
	for i := range services {
		ns := fmt.Sprintf("ns-%d", i%5)
		for _, k := range kinds {
			id := ID{Group: k.group, Version: "v1", Kind: k.kind, Namespace: ns, Name: fmt.Sprintf("svc-%03d", i)}
			body := fmt.Sprintf(`{"apiVersion":%q,"kind":%q,"metadata":{"labels":{"app":"svc-%03d"},"name":%q,"namespace":%q},"spec":{"selector":{"app":"svc-%03d","version":"v1"},"ports":[{"name":"http","port":8080,"targetPort":8080}],"template":"%0100d"}}`,
				id.APIVersion(), id.Kind, i, id.Name, ns, i, 0)
			r, err := NewResource(id, []byte(body))
			if err != nil {
				tb.Fatal(err)
			}
			rs = append(rs, r)
		}
	}
	return rs
}

// BenchmarkDeltaFromProto decodes one agent's full input of 50 services
// (200 objects) from its wire bytes, as the server receives it
// ([InputDeltaFromProto]), and holds every input decoded: it reports the
// time per input and the heap each input holds once decoded
// (heap-B/agent), bodies included. Every input has the same objects, as
// clusters that run the same apps do, so their bodies are held once
// ([InternBody]) and the heap an input holds is its IDs and slices. Run it
// with a fixed count (-benchtime 1000x) so that the heap is measured over
// many inputs.
func BenchmarkDeltaFromProto(b *testing.B) {
	data, err := proto.Marshal(DeltaToProto(Delta{Version: 1, Full: true, Upserts: agentResources(b, 50)}, false))
	if err != nil {
		b.Fatal(err)
	}
	held := make([]Delta, 0, b.N)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		var p snapshotv1.Delta
		if err := proto.Unmarshal(data, &p); err != nil {
			b.Fatal(err)
		}
		d, err := InputDeltaFromProto(&p)
		if err != nil {
			b.Fatal(err)
		}
		held = append(held, d)
	}
	b.StopTimer()
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(b.N), "heap-B/agent")
	runtime.KeepAlive(held)
}

// BenchmarkIDFromProto converts one ID of a message as decoded, its
// fields interned.
func BenchmarkIDFromProto(b *testing.B) {
	p := wireDelta(b, 1, agentResources(b, 1)).GetUpserts()[1].GetId()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := IDFromProto(p); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkApplyChange applies one changed object to each of 1,000 agents'
// inputs of 200 objects, as the server does with an agent's delta, and
// holds the results: it reports the time per delta and the heap each
// input applied holds (heap-B/agent) beside the bodies it shares.
func BenchmarkApplyChange(b *testing.B) {
	const agents = 1000
	rs := agentResources(b, 50)
	base := make([]*Snapshot, agents)
	deltas := make([]Delta, agents)
	for i := range base {
		base[i] = mustNew(b, 1, rs...)
		changed := rs[i%len(rs)]
		r, err := NewResource(changed.ID, append(changed.Body[:len(changed.Body)-1:len(changed.Body)-1], fmt.Sprintf(`,"x":%d}`, i)...))
		if err != nil {
			b.Fatal(err)
		}
		deltas[i] = Delta{BaseVersion: 1, Version: 2, Upserts: []Resource{r}}
	}
	var held []*Snapshot
	var before, after runtime.MemStats
	for b.Loop() {
		b.StopTimer()
		held = make([]*Snapshot, agents)
		runtime.GC()
		runtime.ReadMemStats(&before)
		b.StartTimer()
		for i := range agents {
			s, err := Apply(base[i], deltas[i])
			if err != nil {
				b.Fatal(err)
			}
			held[i] = s
		}
		b.StopTimer()
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.StartTimer()
	}
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/agents, "heap-B/agent")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*agents), "ns/delta")
	runtime.KeepAlive(held)
}
