package snapshot

import (
	"testing"

	"github.com/google/go-cmp/cmp"
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
	f.Fuzz(func(t *testing.T, data []byte) {
		var p snapshotv1.Delta
		if err := proto.Unmarshal(data, &p); err != nil {
			return
		}
		d, err := DeltaFromProto(&p)
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
		if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("unmarshalStored differs from DeltaFromProto (-want +got):\n%s", diff)
		}
	})
}
