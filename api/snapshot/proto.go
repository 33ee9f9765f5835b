package snapshot

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"unique"

	snapshotv1 "github.com/meshrelay/meshrelay/proto/snapshot/v1"
	"google.golang.org/protobuf/proto"
)

// IDToProto converts an ID to its wire form.
func IDToProto(id ID) *snapshotv1.ResourceID {
	return &snapshotv1.ResourceID{Group: id.Group, Version: id.Version, Kind: id.Kind, Namespace: id.Namespace, Name: id.Name}
}

// IDFromProto converts an ID from its wire form and validates it. The
// group, version, kind and namespace are interned ([intern]): the same few
// values repeat across every resource of every cluster, and each decoded
// message would otherwise hold its own copy of each. The name is not.
func IDFromProto(p *snapshotv1.ResourceID) (ID, error) {
	if p == nil {
		return ID{}, fmt.Errorf("missing resource id")
	}
	id := ID{Group: p.GetGroup(), Version: p.GetVersion(), Kind: p.GetKind(), Namespace: p.GetNamespace(), Name: p.GetName()}
	if err := id.Validate(); err != nil {
		return id, err
	}
	id.Group, id.Version, id.Kind, id.Namespace = intern(id.Group), intern(id.Version), intern(id.Kind), intern(id.Namespace)
	return id, nil
}

// intern returns the process's one copy of s's value (unique.Make), so
// that IDs decoded from separate messages share the storage of the fields
// that repeat. The table holds its values weakly: a value no handle holds
// any more leaves it at the next garbage collection, so names an agent or
// a plugin chooses cannot grow it without bound. A value decoded again
// after that gets a new copy, shared from then on; the strings handed out
// before stay valid.
func intern(s string) string {
	if s == "" {
		return ""
	}
	return unique.Make(s).Value()
}

// ResourceToProto converts a resource to its wire form. The body is shared.
func ResourceToProto(r Resource) *snapshotv1.Resource {
	return &snapshotv1.Resource{Id: IDToProto(r.ID), Body: r.Body}
}

// ResourceFromProto converts a resource from its wire form. The body must be
// valid JSON; senders produce canonical JSON, and the hash is taken over the
// bytes as received.
func ResourceFromProto(p *snapshotv1.Resource) (Resource, error) {
	id, err := IDFromProto(p.GetId())
	if err != nil {
		return Resource{}, err
	}
	if !ValidJSON(p.GetBody()) {
		return Resource{}, fmt.Errorf("%s: body is not valid JSON", id)
	}
	return Resource{ID: id, Body: p.GetBody(), Hash: sha256.Sum256(p.GetBody())}, nil
}

// ResourcesFromProto converts a list of wire resources, stopping at the first bad one.
func ResourcesFromProto(ps []*snapshotv1.Resource) ([]Resource, error) {
	return fromProto(ps, ResourceFromProto)
}

// fromProto converts each of ps with decode, stopping at the first error.
func fromProto[P, T any](ps []P, decode func(P) (T, error)) ([]T, error) {
	out := make([]T, 0, len(ps))
	for _, p := range ps {
		v, err := decode(p)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// DeltaToProto converts a delta to its wire form, with more set as given.
// Its messages are cut from one array of resources and one of IDs, not
// allocated one by one: the server converts a delta for every cluster a
// fleet-wide edit reaches.
func DeltaToProto(d Delta, more bool) *snapshotv1.Delta {
	p := &snapshotv1.Delta{
		BaseVersion: d.BaseVersion,
		Version:     d.Version,
		Full:        d.Full,
		More:        more,
		Upserts:     make([]*snapshotv1.Resource, len(d.Upserts)),
		Deletes:     make([]*snapshotv1.ResourceID, len(d.Deletes)),
	}
	if !d.Hash.IsZero() {
		p.Hash = d.Hash[:]
	}
	resources := make([]snapshotv1.Resource, len(d.Upserts))
	ids := make([]snapshotv1.ResourceID, len(d.Upserts)+len(d.Deletes))
	setID := func(i int, id ID) *snapshotv1.ResourceID {
		w := &ids[i]
		w.Group, w.Version, w.Kind, w.Namespace, w.Name = id.Group, id.Version, id.Kind, id.Namespace, id.Name
		return w
	}
	for i, r := range d.Upserts {
		w := &resources[i]
		w.Id, w.Body = setID(i, r.ID), r.Body
		p.Upserts[i] = w
	}
	for i, id := range d.Deletes {
		p.Deletes[i] = setID(len(d.Upserts)+i, id)
	}
	return p
}

// DeltaFromProto converts and validates a delta from its wire form: what
// arrives from the network (agents, the server, the admin API) is checked
// here, IDs and JSON bodies both.
func DeltaFromProto(p *snapshotv1.Delta) (Delta, error) {
	return deltaFromProto(p, "delta", ResourceFromProto, IDFromProto)
}

// InputDeltaFromProto converts an agent's input delta, which carries only
// Kubernetes objects: as [DeltaFromProto], and every upsert must pass
// [Resource.ValidateObject] and every delete [ID.ValidateObject]. The
// object check's decode of a body validates it, so each body is scanned
// once, not once for the JSON and again for the object.
//
// Its upserts hold none of p's memory: the bodies no other input has
// and the names are copied into one block each (holdInput).
func InputDeltaFromProto(p *snapshotv1.Delta) (Delta, error) {
	d, err := deltaFromProto(p, "input", inputResourceFromProto, func(p *snapshotv1.ResourceID) (ID, error) {
		id, err := IDFromProto(p)
		if err == nil {
			err = id.ValidateObject()
		}
		return id, err
	})
	if err != nil {
		return Delta{}, err
	}
	holdInput(d.Upserts)
	return d, nil
}

// inputResourceFromProto converts a resource of an agent's input, which
// must be a Kubernetes object.
func inputResourceFromProto(p *snapshotv1.Resource) (Resource, error) {
	id, err := IDFromProto(p.GetId())
	if err != nil {
		return Resource{}, err
	}
	r := Resource{ID: id, Body: p.GetBody()}
	if err := r.ValidateObject(); err != nil {
		return Resource{}, err
	}
	r.Hash = sha256.Sum256(r.Body)
	return r, nil
}

// holdInput gives the resources of an input, as decoded, the memory they
// are kept in, for as long as their cluster's input has them. A body the
// process interned already ([InternBody]) is that copy: most of a fleet's
// objects are the same in every cluster that runs the app. The other
// bodies, and the names, are copied into one block each. As decoded, each
// was an allocation of its own among the message's others (the bodies
// interned elsewhere, the IDs' other fields, the messages), which all die
// once the input is taken in: the survivors, a third of an input's
// bodies, held the collector's spans they were scattered over (the
// server's heap in use was a third more than its live objects at 10,000
// agents, docs/performance.md). A block lives while any of its bodies or
// names is held, so an input that later changes one object keeps the
// rest of its block, at most one such block an input.
func holdInput(rs []Resource) {
	var own []int
	size, names := 0, 0
	for i := range rs {
		names += len(rs[i].ID.Name)
		if b, ok := interned.lookup(rs[i].Body, rs[i].Hash); ok {
			rs[i].Body = b
			continue
		}
		own = append(own, i)
		size += len(rs[i].Body)
	}
	if size > 0 {
		block := make([]byte, 0, size)
		for _, i := range own {
			start := len(block)
			block = append(block, rs[i].Body...)
			rs[i].Body = InternBody(block[start:], rs[i].Hash)
		}
	}
	if names > 0 {
		var b strings.Builder
		b.Grow(names)
		for i := range rs {
			b.WriteString(rs[i].ID.Name)
		}
		all, at := b.String(), 0
		for i := range rs {
			n := len(rs[i].ID.Name)
			rs[i].ID.Name, at = all[at:at+n], at+n
		}
	}
}

// deltaFromProto converts a delta with decodeResource and decodeID,
// naming errors after what the delta is.
func deltaFromProto(p *snapshotv1.Delta, what string, decodeResource func(*snapshotv1.Resource) (Resource, error), decodeID func(*snapshotv1.ResourceID) (ID, error)) (Delta, error) {
	if p == nil {
		return Delta{}, errors.New("missing delta")
	}
	h, err := HashFromBytes(p.GetHash())
	if err != nil {
		return Delta{}, fmt.Errorf("%s delta: %w", what, err)
	}
	d := Delta{BaseVersion: p.GetBaseVersion(), Version: p.GetVersion(), Full: p.GetFull(), Hash: h}
	if d.Upserts, err = fromProto(p.GetUpserts(), decodeResource); err != nil {
		return Delta{}, fmt.Errorf("%s upsert: %w", what, err)
	}
	if d.Deletes, err = fromProto(p.GetDeletes(), decodeID); err != nil {
		return Delta{}, fmt.Errorf("%s delete: %w", what, err)
	}
	return d, nil
}

// Marshal encodes a snapshot in its wire form (a full delta), for storage.
func Marshal(s *Snapshot) ([]byte, error) {
	return proto.Marshal(DeltaToProto(FullDelta(s), false))
}

// Unmarshal decodes a snapshot written by [Marshal], for a store reading
// back what it wrote. It validates the IDs but does not check again that
// the bodies are JSON: they were checked where they entered (from the
// network by [DeltaFromProto] and [ResourceFromProto], from a plugin by
// its host, or built by [FromJSON] and [FromObject]), and scanning every
// body of a fleet again is most of a cold start's decoding. The caller
// checks the data's integrity against the hash it stored beside it
// ([Snapshot.Hash] covers every body), as core/store/redis does.
//
// The snapshot's bodies share data's memory, which the caller must not
// modify afterwards: a cold start decodes every stored snapshot, and a
// copy of each body was most of the decoding.
func Unmarshal(data []byte) (*Snapshot, error) {
	d, err := unmarshalStored(data)
	if err != nil {
		return nil, fmt.Errorf("decode snapshot: %w", err)
	}
	if !d.Full {
		return Apply(nil, d)
	}
	// As Apply, without copying the resources just decoded.
	s, err := newOwned(d.Version, d.Upserts)
	if err != nil {
		return nil, err
	}
	return checkHash(s, d)
}
