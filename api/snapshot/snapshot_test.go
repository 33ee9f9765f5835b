package snapshot

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/protobuf/proto"

	snapshotv1 "github.com/meshrelay/meshrelay/proto/snapshot/v1"
)

func res(t testing.TB, kind, ns, name, body string) Resource {
	t.Helper()
	r, err := NewResource(ID{Version: "v1", Kind: kind, Namespace: ns, Name: name}, []byte(body))
	if err != nil {
		t.Fatalf("NewResource(%s/%s): %v", ns, name, err)
	}
	return r
}

func mustNew(t testing.TB, version uint64, rs ...Resource) *Snapshot {
	t.Helper()
	s, err := New(version, rs)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

// randomSnapshot builds a snapshot of up to n resources drawn from a small
// name space so that two random snapshots overlap.
func randomSnapshot(t testing.TB, rng *rand.Rand, version uint64, n int) *Snapshot {
	seen := map[string]bool{}
	var rs []Resource
	for range rng.IntN(n + 1) {
		name := fmt.Sprintf("svc-%d", rng.IntN(2*n+1))
		ns := fmt.Sprintf("ns-%d", rng.IntN(3))
		if seen[ns+name] {
			continue
		}
		seen[ns+name] = true
		rs = append(rs, res(t, "Service", ns, name, fmt.Sprintf(`{"port":%d}`, rng.IntN(3))))
	}
	return mustNew(t, version, rs...)
}

func TestApplyDiffProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 500 {
		a := randomSnapshot(t, rng, uint64(i), 20)
		b := randomSnapshot(t, rng, uint64(i+1), 20)
		d := Diff(a, b)
		got, err := Apply(a, d)
		if err != nil {
			t.Fatalf("Apply(a, Diff(a, b)): %v", err)
		}
		if got.Hash() != b.Hash() || got.Version() != b.Version() {
			t.Fatalf("Apply(a, Diff(a, b)) = %s@%d, want %s@%d", got.Hash().Short(), got.Version(), b.Hash().Short(), b.Version())
		}
		if diff := cmp.Diff(b.Resources(), got.Resources(), cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("Apply(a, Diff(a, b)) resources (-want +got):\n%s", diff)
		}
		if a.Equal(b) != d.Empty() {
			t.Fatalf("Diff of equal snapshots must be empty: equal=%v empty=%v", a.Equal(b), d.Empty())
		}
	}
}

func TestHashIndependentOfOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 100 {
		s := randomSnapshot(t, rng, 1, 30)
		rs := s.Resources()
		rng.Shuffle(len(rs), func(i, j int) { rs[i], rs[j] = rs[j], rs[i] })
		shuffled := mustNew(t, 7, rs...)
		if shuffled.Hash() != s.Hash() {
			t.Fatalf("hash depends on order: %s != %s", shuffled.Hash().Short(), s.Hash().Short())
		}
	}
}

// TestHashIsStable recomputes snapshot hashes the way they were always
// computed, over each ID's String, a zero byte and the resource's hash:
// stored snapshots (Redis) carry their hash, which a new build must still
// compute the same.
func TestHashIsStable(t *testing.T) {
	want := func(s *Snapshot) Hash {
		h := sha256.New()
		for r := range s.All() {
			h.Write([]byte(r.ID.String()))
			h.Write([]byte{0})
			h.Write(r.Hash[:])
		}
		var out Hash
		h.Sum(out[:0])
		return out
	}
	rng := rand.New(rand.NewPCG(5, 6))
	snaps := []*Snapshot{Empty, mustNew(t, 1,
		res(t, "Service", "", "cluster-scoped", `{}`),
		Resource{ID: ID{Group: "networking.istio.io", Version: "v1", Kind: "VirtualService", Namespace: "ns", Name: "a/b"}, Body: []byte(`{}`), Hash: sha256.Sum256([]byte(`{}`))})}
	for range 50 {
		snaps = append(snaps, randomSnapshot(t, rng, 0, 30))
	}
	for _, s := range snaps {
		if got, want := s.Hash(), want(s); got != want {
			t.Fatalf("hash of %d resources = %s, want %s", s.Len(), got.Short(), want.Short())
		}
	}
}

func TestDiffCarriesOnlyChanges(t *testing.T) {
	a := mustNew(t, 1,
		res(t, "Service", "ns", "a", `{"x":1}`),
		res(t, "Service", "ns", "b", `{"x":1}`),
		res(t, "Service", "ns", "c", `{"x":1}`))
	b := mustNew(t, 2,
		res(t, "Service", "ns", "a", `{"x":1}`),
		res(t, "Service", "ns", "b", `{"x":2}`),
		res(t, "Service", "ns", "d", `{"x":1}`))
	d := Diff(a, b)
	var ups []string
	for _, r := range d.Upserts {
		ups = append(ups, r.ID.Name)
	}
	var dels []string
	for _, id := range d.Deletes {
		dels = append(dels, id.Name)
	}
	if diff := cmp.Diff([]string{"b", "d"}, ups); diff != "" {
		t.Errorf("Diff upserts (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"c"}, dels); diff != "" {
		t.Errorf("Diff deletes (-want +got):\n%s", diff)
	}
	if d.BaseVersion != 1 || d.Version != 2 || d.Hash != b.Hash() {
		t.Errorf("Diff versions = %d→%d hash %s, want 1→2 hash %s", d.BaseVersion, d.Version, d.Hash.Short(), b.Hash().Short())
	}
}

// TestDiffListsFillTheirArrays diffs snapshots that differ in every way
// (replaced, added before and after the end of a, deleted) and checks that
// the delta's upserts and deletes are exactly as long as the arrays that
// hold them: a delta is kept until the agent acknowledges it, and spare
// room would be held with it.
func TestDiffListsFillTheirArrays(t *testing.T) {
	var ra, rb []Resource
	for i := range 40 {
		name := fmt.Sprintf("svc-%02d", i)
		switch {
		case i%5 == 0: // deleted
			ra = append(ra, res(t, "Service", "ns", name, `{"x":1}`))
		case i%5 == 1: // added
			rb = append(rb, res(t, "Service", "ns", name, `{"x":1}`))
		case i%5 == 2: // replaced
			ra = append(ra, res(t, "Service", "ns", name, `{"x":1}`))
			rb = append(rb, res(t, "Service", "ns", name, `{"x":2}`))
		default: // kept
			ra = append(ra, res(t, "Service", "ns", name, `{"x":1}`))
			rb = append(rb, res(t, "Service", "ns", name, `{"x":1}`))
		}
	}
	// b goes on past a's end: the tail is copied after the other upserts.
	rb = append(rb, res(t, "Service", "ns", "zz-1", `{}`), res(t, "Service", "ns", "zz-2", `{}`))
	a, b := mustNew(t, 1, ra...), mustNew(t, 2, rb...)
	d := Diff(a, b)
	if len(d.Upserts) != 8+8+2 || len(d.Deletes) != 8 {
		t.Fatalf("Diff = %d upserts and %d deletes, want 18 and 8", len(d.Upserts), len(d.Deletes))
	}
	if cap(d.Upserts) != len(d.Upserts) || cap(d.Deletes) != len(d.Deletes) {
		t.Errorf("Diff lists have capacity %d and %d for %d upserts and %d deletes, want no spare room", cap(d.Upserts), cap(d.Deletes), len(d.Upserts), len(d.Deletes))
	}
	got, err := Apply(a, d)
	if err != nil || got.Hash() != b.Hash() {
		t.Errorf("Apply(a, Diff(a, b)) = %v, %v; want b", got, err)
	}
}

func TestApplyErrors(t *testing.T) {
	a := mustNew(t, 1, res(t, "Service", "ns", "a", `{}`))
	b := mustNew(t, 2, res(t, "Service", "ns", "b", `{}`))
	tests := map[string]struct {
		delta Delta
		want  error
	}{
		"wrong base": {delta: Delta{BaseVersion: 5, Version: 6}, want: ErrBaseMismatch},
		"wrong hash": {delta: func() Delta { d := Diff(a, b); d.Hash[0] ^= 1; return d }(), want: ErrHashMismatch},
		"duplicate upsert": {delta: Delta{BaseVersion: 1, Version: 2, Upserts: []Resource{
			res(t, "Service", "ns", "x", `{}`), res(t, "Service", "ns", "x", `{"a":1}`)}}},
		"duplicate in full": {delta: Delta{Full: true, Version: 2, Upserts: []Resource{
			res(t, "Service", "ns", "x", `{}`), res(t, "Service", "ns", "x", `{}`)}}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := Apply(a, tc.delta)
			if err == nil {
				t.Fatalf("Apply succeeded, want error")
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("Apply error = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestSnapshotIsImmutable(t *testing.T) {
	rs := []Resource{res(t, "Service", "ns", "a", `{}`)}
	s := mustNew(t, 1, rs...)
	rs[0] = res(t, "Service", "ns", "z", `{}`)
	got := s.Resources()
	got[0] = res(t, "Service", "ns", "y", `{}`)
	if _, ok := s.Get(ID{Version: "v1", Kind: "Service", Namespace: "ns", Name: "a"}); !ok {
		t.Fatal("snapshot changed when the caller's slices did")
	}
}

func TestFromYAMLStripsNoise(t *testing.T) {
	plain := `
apiVersion: apps/v1
kind: Deployment
metadata:
  name: reviews-v1
  namespace: bookinfo
  labels: {app: reviews}
spec:
  replicas: 1
`
	noisy := `
apiVersion: apps/v1
kind: Deployment
metadata:
  labels: {app: reviews}
  namespace: bookinfo
  name: reviews-v1
  uid: 5b1c
  resourceVersion: "4711"
  generation: 3
  creationTimestamp: "2026-01-01T00:00:00Z"
  managedFields: [{manager: kubectl}]
  annotations:
    deployment.kubernetes.io/revision: "3"
spec:
  replicas: 1
status:
  readyReplicas: 1
  observedGeneration: 3
`
	a, err := FromYAML([]byte(plain))
	if err != nil {
		t.Fatal(err)
	}
	b, err := FromYAML([]byte(noisy))
	if err != nil {
		t.Fatal(err)
	}
	if a.Hash != b.Hash {
		t.Errorf("noise changed the hash:\n%s\n%s", a.Body, b.Body)
	}
	want := ID{Group: "apps", Version: "v1", Kind: "Deployment", Namespace: "bookinfo", Name: "reviews-v1"}
	if a.ID != want {
		t.Errorf("FromYAML ID = %v, want %v", a.ID, want)
	}
}

func TestServiceStatusIsMeaningful(t *testing.T) {
	svc := func(ip string) Resource {
		r, err := FromYAML([]byte(`
apiVersion: v1
kind: Service
metadata: {name: eastwest, namespace: istio-system}
status: {loadBalancer: {ingress: [{ip: "` + ip + `"}]}}
`))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if svc("10.0.0.1").Hash == svc("10.0.0.2").Hash {
		t.Error("a Service's load-balancer address must change its hash")
	}
}

func TestFromObjectErrors(t *testing.T) {
	tests := map[string]string{
		"no apiVersion": `{"kind":"Service","metadata":{"name":"a"}}`,
		"no kind":       `{"apiVersion":"v1","metadata":{"name":"a"}}`,
		"no name":       `{"apiVersion":"v1","kind":"Service","metadata":{}}`,
		"not an object": `[1,2]`,
	}
	for name, in := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := FromJSON([]byte(in)); err == nil {
				t.Errorf("FromJSON(%s) succeeded, want error", in)
			}
		})
	}
}

func TestSplitAndAssemble(t *testing.T) {
	var rs []Resource
	for i := range 50 {
		rs = append(rs, res(t, "ConfigMap", "ns", fmt.Sprintf("cm-%02d", i), fmt.Sprintf(`{"data":"%0100d"}`, i)))
	}
	b := mustNew(t, 2, rs...)
	d := Diff(Empty, b)
	parts := Split(d, 1000)
	if len(parts) < 5 {
		t.Fatalf("Split into %d parts, want at least 5", len(parts))
	}
	var asm Assembler
	var whole Delta
	for i, p := range parts {
		got, done, err := asm.Add(p, i == len(parts)-1)
		if err != nil {
			t.Fatal(err)
		}
		if done != (i == len(parts)-1) {
			t.Fatalf("part %d: done = %v", i, done)
		}
		whole = got
	}
	out, err := Apply(Empty, whole)
	if err != nil {
		t.Fatal(err)
	}
	if out.Hash() != b.Hash() {
		t.Fatal("assembled delta does not rebuild the snapshot")
	}
}

func TestMarshalRoundTrip(t *testing.T) {
	s := mustNew(t, 9, res(t, "Service", "ns", "a", `{"b":[1,2]}`), res(t, "Pod", "", "p", `{}`))
	data, err := Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Unmarshal(data)
	if err != nil {
		t.Fatal(err)
	}
	if got.Hash() != s.Hash() || got.Version() != 9 {
		t.Fatalf("Unmarshal(Marshal(s)) = %s@%d, want %s@9", got.Hash().Short(), got.Version(), s.Hash().Short())
	}
}

// TestDeltaProtoRoundTrip sends a delta that upserts and deletes across
// the wire form, marshalled: each upsert keeps its own ID and body, and
// each delete its own ID, although their messages share arrays.
func TestDeltaProtoRoundTrip(t *testing.T) {
	d := Delta{BaseVersion: 3, Version: 4,
		Upserts: []Resource{
			res(t, "Service", "ns", "a", `{"a":1}`),
			{ID: ID{Group: "apps", Version: "v1", Kind: "Deployment", Namespace: "ns", Name: "b"}, Body: []byte(`{"b":2}`)},
		},
		Deletes: []ID{{Version: "v1", Kind: "Pod", Namespace: "ns", Name: "c"}, {Version: "v1", Kind: "Namespace", Name: "d"}},
	}
	d.Upserts[1].Hash = sha256.Sum256(d.Upserts[1].Body)
	data, err := proto.Marshal(DeltaToProto(d, true))
	if err != nil {
		t.Fatal(err)
	}
	var p snapshotv1.Delta
	if err := proto.Unmarshal(data, &p); err != nil {
		t.Fatal(err)
	}
	got, err := DeltaFromProto(&p)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(d, got); diff != "" {
		t.Errorf("DeltaFromProto(DeltaToProto(d)) (-want +got):\n%s", diff)
	}
	if !p.GetMore() {
		t.Error("more = false, want true as given")
	}
}

// Unmarshal's resources share the stored data instead of copying each
// body: what a store decoded at a cold start was mostly those copies.
func TestUnmarshalSharesBodies(t *testing.T) {
	s := mustNew(t, 2, res(t, "Service", "ns", "a", `{"spec":{"ports":[{"port":80}]}}`), res(t, "Pod", "ns", "p", `{"b":1}`))
	data, err := Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Unmarshal(data)
	if err != nil {
		t.Fatal(err)
	}
	if got.Hash() != s.Hash() || got.Len() != 2 {
		t.Fatalf("Unmarshal(Marshal(s)) = %d resources, hash %s; want s", got.Len(), got.Hash().Short())
	}
	for r := range got.All() {
		if !bytes.Contains(data, r.Body) || !within(data, r.Body) {
			t.Errorf("%s: body at %p, not within the stored data", r.ID, r.Body)
		}
		if cap(r.Body) != len(r.Body) {
			t.Errorf("%s: body has cap %d beyond its length %d: an append would write into the stored data", r.ID, cap(r.Body), len(r.Body))
		}
	}
	if _, err := Unmarshal(data[:len(data)-3]); err == nil {
		t.Error("Unmarshal(truncated data) = nil error, want it refused")
	}
}

// within reports whether b lies in data's memory.
func within(data, b []byte) bool {
	if len(b) == 0 {
		return true
	}
	start := uintptr(unsafe.Pointer(&data[0]))
	p := uintptr(unsafe.Pointer(&b[0]))
	return p >= start && p+uintptr(len(b)) <= start+uintptr(len(data))
}

// Unmarshal reads back what a store wrote without scanning the bodies for
// JSON again, while the same bytes from the network are refused: the check
// is at the boundary, where they enter.
func TestUnmarshalTrustsStoredBodies(t *testing.T) {
	id := ID{Version: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "a"}
	body := []byte(`{"apiVersion":`)
	// Built directly: every constructor refuses a body that is no JSON.
	s := mustNew(t, 3, Resource{ID: id, Body: body, Hash: sha256.Sum256(body)})
	data, err := Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Unmarshal(data)
	if err != nil {
		t.Fatalf("Unmarshal(stored data) = %v, want the snapshot as stored", err)
	}
	if got.Hash() != s.Hash() {
		t.Fatalf("Unmarshal(stored data) hash %s, want %s", got.Hash().Short(), s.Hash().Short())
	}
	var p snapshotv1.Delta
	if err := proto.Unmarshal(data, &p); err != nil {
		t.Fatal(err)
	}
	if _, err := DeltaFromProto(&p); err == nil || !strings.Contains(err.Error(), "not valid JSON") {
		t.Fatalf("DeltaFromProto(a body that is no JSON) = %v, want it refused as not valid JSON", err)
	}
	if _, err := ResourceFromProto(p.GetUpserts()[0]); err == nil || !strings.Contains(err.Error(), "not valid JSON") {
		t.Fatalf("ResourceFromProto(a body that is no JSON) = %v, want it refused as not valid JSON", err)
	}
}

func BenchmarkDiffOneChange(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			var rs []Resource
			for i := range n {
				rs = append(rs, res(b, "Service", "ns", fmt.Sprintf("svc-%05d", i), `{"spec":{"ports":[{"port":80}]}}`))
			}
			a := mustNew(b, 1, rs...)
			rs[n/2] = res(b, "Service", "ns", rs[n/2].ID.Name, `{"spec":{"ports":[{"port":81}]}}`)
			c := mustNew(b, 2, rs...)
			b.ResetTimer()
			for b.Loop() {
				d := Diff(a, c)
				if _, err := Apply(a, d); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDiffManyChanges diffs a cluster's output of 300 objects of
// which a fleet-wide edit replaced 50, as delivery does for every cluster
// of the fleet after one.
func BenchmarkDiffManyChanges(b *testing.B) {
	var ra, rb []Resource
	for i := range 300 {
		name := fmt.Sprintf("svc-%05d", i)
		ra = append(ra, res(b, "Service", "ns", name, `{"spec":{"ports":[{"port":80}]}}`))
		body := `{"spec":{"ports":[{"port":80}]}}`
		if i%6 == 0 {
			body = `{"spec":{"ports":[{"port":81}]}}`
		}
		rb = append(rb, res(b, "Service", "ns", name, body))
	}
	x, y := mustNew(b, 1, ra...), mustNew(b, 2, rb...)
	for b.Loop() {
		if d := Diff(x, y); len(d.Upserts) != 50 {
			b.Fatalf("%d upserts, want 50", len(d.Upserts))
		}
	}
}

// BenchmarkDiffFromEmpty diffs a snapshot of 50 objects from nothing, as
// a plugin session's first update does for every cluster of the fleet.
func BenchmarkDiffFromEmpty(b *testing.B) {
	var rs []Resource
	for i := range 50 {
		rs = append(rs, res(b, "Service", "ns", fmt.Sprintf("svc-%05d", i), `{"spec":{"ports":[{"port":80}]}}`))
	}
	s := mustNew(b, 1, rs...)
	for b.Loop() {
		if d := Diff(Empty, s); len(d.Upserts) != 50 {
			b.Fatalf("%d upserts, want 50", len(d.Upserts))
		}
	}
}

func BenchmarkHashSnapshot(b *testing.B) {
	var rs []Resource
	for i := range 1000 {
		rs = append(rs, res(b, "Service", "ns", fmt.Sprintf("svc-%05d", i), `{"spec":{"ports":[{"port":80}]}}`))
	}
	for b.Loop() {
		if _, err := New(1, rs); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkUnmarshal decodes a stored snapshot of 200 objects of about
// 500 bytes, the size of a cold start's input per cluster.
func BenchmarkUnmarshal(b *testing.B) {
	var rs []Resource
	for i := range 200 {
		body := fmt.Sprintf(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"labels":{"app":"svc-%03d"},"name":"svc-%03d-v1","namespace":"bench"},"spec":{"replicas":2,"selector":{"matchLabels":{"app":"svc-%03d","version":"v1"}},"template":{"metadata":{"labels":{"app":"svc-%03d","rev":"r0","version":"v1"}},"spec":{"containers":[{"image":"registry.example.com/bench/svc-%03d:1.0.0","name":"app","ports":[{"containerPort":8080}]}],"serviceAccountName":"svc-%03d"}}}}`, i, i, i, i, i, i)
		rs = append(rs, res(b, "Deployment", "bench", fmt.Sprintf("svc-%03d-v1", i), body))
	}
	data, err := Marshal(mustNew(b, 1, rs...))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Unmarshal(data); err != nil {
			b.Fatal(err)
		}
	}
}

// Group yields the resources of its group, in ID order, and no other.
func TestGroup(t *testing.T) {
	var rs []Resource
	for _, g := range []string{"", "apps", "policy.meshrelay.io", "z.io"} {
		for _, name := range []string{"b", "a"} {
			r, err := NewResource(ID{Group: g, Version: "v1", Kind: "Thing", Namespace: "ns", Name: name}, []byte(`{}`))
			if err != nil {
				t.Fatal(err)
			}
			rs = append(rs, r)
		}
	}
	s := mustNew(t, 1, rs...)
	for group, want := range map[string][]string{"": {"a", "b"}, "apps": {"a", "b"}, "policy.meshrelay.io": {"a", "b"}, "z.io": {"a", "b"}, "b.io": nil, "zz": nil} {
		var got []string
		for r := range s.Group(group) {
			if r.ID.Group != group {
				t.Errorf("Group(%q) yields %s", group, r.ID)
			}
			got = append(got, r.ID.Name)
		}
		if !slices.Equal(got, want) {
			t.Errorf("Group(%q) = %q, want %q", group, got, want)
		}
	}
}

// TestDiffFromEmptySharesTheTarget checks that a delta carrying the whole
// of a snapshot (from an empty one, or FullDelta) shares its resources
// instead of copying them, that appending to it cannot write into the
// snapshot's memory, and that it applies as a copied one would.
func TestDiffFromEmptySharesTheTarget(t *testing.T) {
	s := mustNew(t, 2, res(t, "Service", "ns", "a", `{"a":1}`), res(t, "Service", "ns", "b", `{"b":1}`))
	for name, d := range map[string]Delta{"Diff(Empty, s)": Diff(Empty, s), "Diff(nil, s)": Diff(nil, s), "FullDelta(s)": FullDelta(s)} {
		if len(d.Upserts) != s.Len() || &d.Upserts[0] != &s.resources[0] {
			t.Errorf("%s: upserts are a copy of the snapshot's resources, want them shared", name)
		}
		if cap(d.Upserts) != len(d.Upserts) {
			t.Errorf("%s: upserts have capacity %d beyond their length %d: an append would write into the snapshot's memory", name, cap(d.Upserts), len(d.Upserts))
		}
		hash := s.Hash()
		got, err := Apply(Empty, d)
		if err != nil || got.Hash() != hash {
			t.Errorf("Apply(Empty, %s) = %v, %v; want the snapshot", name, got, err)
		}
	}
	// A delta whose upserts are not one run of the target is a copy.
	a := mustNew(t, 1, res(t, "Service", "ns", "b", `{"b":0}`))
	if d := Diff(a, s); len(d.Upserts) != 2 || &d.Upserts[0] == &s.resources[0] {
		t.Errorf("Diff(a, s) = %d upserts sharing s's memory, want a copy of both", len(d.Upserts))
	}
}

// TestApplyHoldsNoSpareCapacity applies deltas that add, replace and
// delete (also an upsert deleted in the same delta) and checks that the
// snapshot's resources fill the array that holds them: an input is held
// as long as its cluster sends no other.
func TestApplyHoldsNoSpareCapacity(t *testing.T) {
	base := mustNew(t, 1, res(t, "Service", "ns", "a", `{"a":1}`), res(t, "Service", "ns", "b", `{"b":1}`), res(t, "Service", "ns", "c", `{"c":1}`))
	id := func(name string) ID { return ID{Version: "v1", Kind: "Service", Namespace: "ns", Name: name} }
	tests := map[string]Delta{
		"add":                 {Upserts: []Resource{res(t, "Service", "ns", "d", `{}`)}},
		"replace":             {Upserts: []Resource{res(t, "Service", "ns", "b", `{"b":2}`)}},
		"delete":              {Deletes: []ID{id("a"), id("c")}},
		"delete what is none": {Deletes: []ID{id("x")}},
		"replace and delete":  {Upserts: []Resource{res(t, "Service", "ns", "a", `{"a":2}`), res(t, "Service", "ns", "e", `{}`)}, Deletes: []ID{id("b")}},
		"upsert and delete":   {Upserts: []Resource{res(t, "Service", "ns", "e", `{}`), res(t, "Service", "ns", "c", `{"c":2}`)}, Deletes: []ID{id("e"), id("c")}},
	}
	for name, d := range tests {
		d.BaseVersion, d.Version = 1, 2
		got, err := Apply(base, d)
		if err != nil {
			t.Fatalf("%s: Apply = %v", name, err)
		}
		if cap(got.resources) != got.Len() {
			t.Errorf("%s: Apply holds %d resources in an array of %d", name, got.Len(), cap(got.resources))
		}
	}
}

// BenchmarkDeltaToProto converts a delta of 50 replaced objects to its
// wire form, as the server does for every cluster a fleet-wide edit
// reaches.
func BenchmarkDeltaToProto(b *testing.B) {
	var rs []Resource
	for i := range 50 {
		rs = append(rs, res(b, "Service", "ns", fmt.Sprintf("svc-%05d", i), `{"spec":{"ports":[{"port":80}]}}`))
	}
	d := Delta{BaseVersion: 1, Version: 2, Upserts: rs, Deletes: []ID{{Version: "v1", Kind: "Service", Namespace: "ns", Name: "gone"}}}
	for b.Loop() {
		if p := DeltaToProto(d, false); len(p.GetUpserts()) != 50 {
			b.Fatalf("%d upserts, want 50", len(p.GetUpserts()))
		}
	}
}

// ApplyOwned keeps a full delta's upserts as the snapshot's resources,
// sorted in place, with the hash New gives them; upserts with spare
// capacity are copied so none is held, and a delta that is not full
// applies as Apply does.
func TestApplyOwnedKeepsAFullDeltasUpserts(t *testing.T) {
	rs := func() []Resource {
		return []Resource{res(t, "Service", "ns", "c", `{"c":1}`), res(t, "Service", "ns", "a", `{"a":1}`), res(t, "Service", "ns", "b", `{"b":1}`)}
	}
	want := mustNew(t, 1, rs()...)
	d := Delta{Version: 1, Full: true, Upserts: rs()}
	got, err := ApplyOwned(nil, d)
	if err != nil {
		t.Fatal(err)
	}
	if got.Hash() != want.Hash() || !slices.IsSortedFunc(got.resources, func(a, b Resource) int { return a.ID.Compare(b.ID) }) {
		t.Error("ApplyOwned built another snapshot than New")
	}
	if unsafe.SliceData(got.resources) != unsafe.SliceData(d.Upserts) {
		t.Error("ApplyOwned copied a full delta's upserts instead of keeping them")
	}
	spare := append(make([]Resource, 0, 8), rs()...)
	got, err = ApplyOwned(nil, Delta{Version: 1, Full: true, Upserts: spare})
	if err != nil {
		t.Fatal(err)
	}
	if cap(got.resources) != got.Len() || got.Hash() != want.Hash() {
		t.Errorf("upserts with spare capacity: %d resources held in an array of %d", got.Len(), cap(got.resources))
	}
	change := Delta{BaseVersion: 1, Version: 2, Upserts: []Resource{res(t, "Service", "ns", "b", `{"b":2}`)}}
	viaApply, err := Apply(want, change)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := ApplyOwned(want, change); err != nil || got.Hash() != viaApply.Hash() {
		t.Errorf("ApplyOwned of a delta that is not full = %v, want Apply's snapshot", err)
	}
}

// The assembler keeps a lone part's upserts rather than a copy, and the
// parts after the first never write into the array the first came in.
func TestAssemblerTakesThePartsOver(t *testing.T) {
	one := []Resource{res(t, "Service", "ns", "a", `{}`)}
	var asm Assembler
	d, done, err := asm.Add(Delta{Version: 1, Full: true, Upserts: one}, true)
	if err != nil || !done {
		t.Fatalf("Add = %v, %v", done, err)
	}
	if unsafe.SliceData(d.Upserts) != unsafe.SliceData(one) {
		t.Error("the assembler copied a lone part's upserts")
	}
	array := append(make([]Resource, 0, 4), res(t, "Service", "ns", "b", `{}`))
	spare := array[:cap(array)]
	if _, _, err := asm.Add(Delta{Version: 2, Full: true, Upserts: array}, false); err != nil {
		t.Fatal(err)
	}
	d, _, err = asm.Add(Delta{Version: 2, Full: true, Upserts: []Resource{res(t, "Service", "ns", "c", `{}`)}}, true)
	if err != nil || len(d.Upserts) != 2 {
		t.Fatalf("two parts assembled into %d upserts, %v", len(d.Upserts), err)
	}
	if spare[1].ID.Name != "" {
		t.Errorf("the second part was written into the first part's array, past its end: %s", spare[1].ID)
	}
}

// Seek finds what Get finds, whatever the position it starts from, and
// says where to look next: in order, the resource right after.
func TestSeekFindsWhatGetFinds(t *testing.T) {
	var rs []Resource
	for _, name := range []string{"a", "b", "c", "d", "e"} {
		rs = append(rs, res(t, "Service", "ns", name, `{}`))
	}
	s := mustNew(t, 1, rs...)
	id := func(name string) ID { return ID{Version: "v1", Kind: "Service", Namespace: "ns", Name: name} }
	for _, name := range []string{"a", "c", "e", "x", ""} {
		want, wantOK := s.Get(id(name))
		for from := range s.Len() + 2 {
			got, next, ok := s.Seek(id(name), from)
			if ok != wantOK || got.ID != want.ID || string(got.Body) != string(want.Body) {
				t.Errorf("Seek(%q, %d) = %v, %v; Get = %v, %v", name, from, got.ID, ok, want.ID, wantOK)
			}
			if ok && s.Resources()[next-1].ID != got.ID {
				t.Errorf("Seek(%q, %d) says to look next at %d, not right after it", name, from, next)
			}
			if !ok && next != from {
				t.Errorf("Seek(%q, %d), not found, moved to %d", name, from, next)
			}
		}
	}
	// In order, each lookup starts where the last one left off.
	next := 0
	for _, name := range []string{"a", "b", "d", "e"} {
		var ok bool
		if _, next, ok = s.Seek(id(name), next); !ok {
			t.Fatalf("Seek(%q) in order: not found", name)
		}
	}
	if next != s.Len() {
		t.Errorf("after the last resource, next is %d, want %d", next, s.Len())
	}
}
