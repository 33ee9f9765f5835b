package snapshot

import (
	"cmp"
	"crypto/sha256"
	"strings"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	snapshotv1 "github.com/meshrelay/meshrelay/proto/snapshot/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// FuzzDeltaDecode feeds arbitrary bytes to the delta decoder and applies what
// decodes: nothing may panic, and a delta that applies must reproduce its
// promised hash.
func FuzzDeltaDecode(f *testing.F) {
	base, _ := New(1, []Resource{
		{ID: ID{Version: "v1", Kind: "Service", Namespace: "ns", Name: "a"}, Body: []byte(`{}`)},
	})
	seed := func(d Delta) {
		b, err := proto.Marshal(DeltaToProto(d, false))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	next, _ := New(2, []Resource{
		{ID: ID{Version: "v1", Kind: "Service", Namespace: "ns", Name: "b"}, Body: []byte(`{"x":1}`)},
	})
	seed(Diff(base, next))
	seed(FullDelta(next))
	seed(Delta{BaseVersion: 1, Version: 3, Deletes: []ID{{Version: "v1", Kind: "Service", Namespace: "ns", Name: "a"}}})
	seed(Delta{Version: 1, Full: true, Upserts: []Resource{
		{ID: ID{Version: "v1", Kind: "Service", Namespace: "ns", Name: "a"}, Body: []byte(`{"apiVersion":"v1","kind":"Service","metadata":{"name":"a","namespace":"ns"}}`)},
	}})
	f.Fuzz(func(t *testing.T, data []byte) {
		var p snapshotv1.Delta
		if err := proto.Unmarshal(data, &p); err != nil {
			return
		}
		d, err := DeltaFromProto(&p)
		checkInputDelta(t, &p, d, err)
		if err != nil {
			return
		}
		s, err := Apply(base, d)
		if err != nil {
			return
		}
		if !d.Hash.IsZero() && s.Hash() != d.Hash {
			t.Fatalf("applied delta hash %s, promised %s", s.Hash().Short(), d.Hash.Short())
		}
		if _, err := Apply(s, Diff(s, base)); err != nil {
			t.Fatalf("diff back to base does not apply: %v", err)
		}
	})
}

// FuzzIDValidateObject feeds arbitrary fields to the ID validators: nothing
// may panic, an ID that passes ValidateObject passes Validate and has
// Kubernetes-sized fields, and a valid ID survives its wire form.
func FuzzIDValidateObject(f *testing.F) {
	f.Add("", "v1", "Service", "default", "reviews")
	f.Add("networking.istio.io", "v1beta1", "VirtualService", "bookinfo", "reviews-v2")
	f.Add("xds.meshrelay.io", "v1", "Cluster", "", "outbound|9080||reviews.default.svc.cluster.local")
	f.Add("", "v1", "Service", "a.b", "\x1b[31m")
	f.Fuzz(func(t *testing.T, group, version, kind, namespace, name string) {
		id := ID{Group: group, Version: version, Kind: kind, Namespace: namespace, Name: name}
		lenient := id.Validate()
		if id.ValidateObject() == nil {
			if lenient != nil {
				t.Fatalf("%q passes ValidateObject but not Validate: %v", id, lenient)
			}
			if len(group) > 253 || len(version) > 63 || len(kind) > 63 || len(namespace) > 63 || len(name) > 253 {
				t.Fatalf("%q passes ValidateObject with a field over its Kubernetes bound", id)
			}
		}
		if lenient != nil {
			return
		}
		back, err := IDFromProto(IDToProto(id))
		if err != nil || back != id {
			t.Fatalf("IDFromProto(IDToProto(%q)) = %q, %v", id, back, err)
		}
	})
}

// FuzzUnmarshalStored feeds arbitrary bytes to the stored-snapshot decoder
// behind Unmarshal: nothing may panic, and what protobuf and DeltaFromProto
// accept it decodes to the same delta.
func FuzzUnmarshalStored(f *testing.F) {
	s, _ := New(4, []Resource{
		{ID: ID{Group: "apps", Version: "v1", Kind: "Deployment", Namespace: "ns", Name: "a"}, Body: []byte(`{"x":1}`)},
		{ID: ID{Version: "v1", Kind: "Service", Namespace: "ns", Name: "b"}, Body: []byte(`{}`)},
	})
	for _, d := range []Delta{FullDelta(s), {BaseVersion: 1, Version: 3, Deletes: []ID{{Version: "v1", Kind: "Service", Namespace: "ns", Name: "a"}}}} {
		b, err := proto.Marshal(DeltaToProto(d, true))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	// Fields given twice: protobuf keeps the last hash, and merges the two
	// ids of a resource.
	id := func(fields ...string) []byte {
		var b []byte
		for i := 0; i < len(fields); i += 2 {
			num := map[string]protowire.Number{"group": idGroup, "version": idVersion, "kind": idKind, "namespace": idNamespace, "name": idName}[fields[i]]
			b = protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), []byte(fields[i+1]))
		}
		return b
	}
	var twice []byte
	res := protowire.AppendBytes(protowire.AppendTag(nil, resourceID, protowire.BytesType), id("group", "apps", "version", "v1", "kind", "Deployment", "namespace", "ns", "name", "a"))
	res = protowire.AppendBytes(protowire.AppendTag(res, resourceID, protowire.BytesType), id("name", "b"))
	res = protowire.AppendBytes(protowire.AppendTag(res, resourceBody, protowire.BytesType), []byte(`{}`))
	twice = protowire.AppendBytes(protowire.AppendTag(twice, deltaUpserts, protowire.BytesType), res)
	twice = protowire.AppendBytes(protowire.AppendTag(twice, deltaHash, protowire.BytesType), []byte("0000"))
	twice = protowire.AppendBytes(protowire.AppendTag(twice, deltaHash, protowire.BytesType), make([]byte, 32))
	f.Add(twice)
	f.Fuzz(func(t *testing.T, data []byte) {
		got, gotErr := unmarshalStored(data)
		var p snapshotv1.Delta
		if err := proto.Unmarshal(data, &p); err != nil {
			return
		}
		want, err := DeltaFromProto(&p)
		if err != nil {
			return
		}
		if gotErr != nil {
			t.Fatalf("unmarshalStored = %v; DeltaFromProto accepts the same data", gotErr)
		}
		if diff := gocmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("unmarshalStored differs from DeltaFromProto (-want +got):\n%s", diff)
		}
	})
}

// checkInputDelta holds InputDeltaFromProto to DeltaFromProto (which gave
// d, err for p) followed by the object checks it stands for: the same
// delta, refused exactly when one of them refuses.
func checkInputDelta(t *testing.T, p *snapshotv1.Delta, d Delta, err error) {
	t.Helper()
	if err == nil {
		for _, r := range d.Upserts {
			err = cmp.Or(err, r.ValidateObject())
		}
		for _, id := range d.Deletes {
			err = cmp.Or(err, id.ValidateObject())
		}
	}
	got, gotErr := InputDeltaFromProto(p)
	if (gotErr == nil) != (err == nil) {
		t.Fatalf("InputDeltaFromProto: %v; DeltaFromProto and the object checks: %v", gotErr, err)
	}
	if gotErr == nil && !equalDeltas(got, d) {
		t.Fatalf("InputDeltaFromProto = %+v, DeltaFromProto = %+v", got, d)
	}
}

func equalDeltas(a, b Delta) bool {
	return gocmp.Equal(a, b, cmpopts.EquateEmpty())
}

func TestInputDeltaFromProtoRefusesWhatIsNoObject(t *testing.T) {
	svc := ID{Version: "v1", Kind: "Service", Namespace: "ns", Name: "a"}
	good := Resource{ID: svc, Body: []byte(`{"apiVersion":"v1","kind":"Service","metadata":{"name":"a","namespace":"ns"}}`)}
	for name, c := range map[string]struct {
		d       Delta
		wantErr string
	}{
		"a body that is no JSON":          {Delta{Upserts: []Resource{{ID: svc, Body: []byte(`{"apiVersion":"v1"`)}}}, "input upsert: core/v1/Service/ns/a: body is not valid JSON"},
		"a body naming another object":    {Delta{Upserts: []Resource{{ID: svc, Body: []byte(`{"apiVersion":"v1","kind":"Service","metadata":{"name":"b","namespace":"ns"}}`)}}}, `body has metadata.name "b"`},
		"an upsert of no Kubernetes name": {Delta{Upserts: []Resource{{ID: ID{Version: "v1", Kind: "Service", Namespace: "ns", Name: "A"}, Body: good.Body}}}, `input upsert:`},
		"a delete of no Kubernetes name":  {Delta{Deletes: []ID{{Version: "v1", Kind: "Service", Namespace: "ns", Name: "a|b"}}}, `input delete:`},
	} {
		t.Run(name, func(t *testing.T) {
			c.d.Upserts = append([]Resource{good}, c.d.Upserts...)
			_, err := InputDeltaFromProto(DeltaToProto(c.d, false))
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("InputDeltaFromProto = %v, want an error with %q", err, c.wantErr)
			}
		})
	}
	d, err := InputDeltaFromProto(DeltaToProto(Delta{Version: 1, Full: true, Upserts: []Resource{good}}, false))
	if err != nil || len(d.Upserts) != 1 || d.Upserts[0].Hash != sha256.Sum256(good.Body) {
		t.Fatalf("InputDeltaFromProto(a Service) = %+v, %v", d, err)
	}
}
