package snapshot

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// The field numbers of proto/snapshot/v1/snapshot.proto that a stored
// snapshot, a full delta written by [Marshal], carries.
const (
	deltaBaseVersion = 1
	deltaVersion     = 2
	deltaFull        = 3
	deltaUpserts     = 4
	deltaDeletes     = 5
	deltaHash        = 6
	deltaMore        = 7

	resourceID   = 1
	resourceBody = 2

	idGroup     = 1
	idVersion   = 2
	idKind      = 3
	idNamespace = 4
	idName      = 5
)

// errStoredWire is a stored snapshot that is not the wire form of a delta.
var errStoredWire = errors.New("malformed wire data")

// unmarshalStored decodes the wire form of a delta as proto.Unmarshal and
// deltaFromProto without the JSON check would, except that the bodies
// share data's memory instead of each being copied: a cold start decodes
// every stored snapshot of the fleet, and one allocation per body was most
// of it. Fields it does not know are skipped, as protobuf does.
func unmarshalStored(data []byte) (Delta, error) {
	d := Delta{Upserts: make([]Resource, 0, countUpserts(data))}
	in := interner{}
	// The hash is checked once the data is read: as in protobuf, the last
	// of several values is the field's.
	var hash []byte
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return Delta{}, errStoredWire
		}
		data = data[n:]
		var err error
		switch {
		case num == deltaBaseVersion && typ == protowire.VarintType:
			d.BaseVersion, n = protowire.ConsumeVarint(data)
		case num == deltaVersion && typ == protowire.VarintType:
			d.Version, n = protowire.ConsumeVarint(data)
		case num == deltaFull && typ == protowire.VarintType:
			var v uint64
			v, n = protowire.ConsumeVarint(data)
			d.Full = v != 0
		case num == deltaUpserts && typ == protowire.BytesType:
			var b []byte
			if b, n = protowire.ConsumeBytes(data); n >= 0 {
				var r Resource
				if r, err = storedResource(b, in); err == nil {
					d.Upserts = append(d.Upserts, r)
				}
			}
		case num == deltaDeletes && typ == protowire.BytesType:
			var b []byte
			if b, n = protowire.ConsumeBytes(data); n >= 0 {
				var id ID
				if id, err = storedID(b, in); err == nil {
					d.Deletes = append(d.Deletes, id)
				}
			}
		case num == deltaHash && typ == protowire.BytesType:
			hash, n = protowire.ConsumeBytes(data)
		default:
			n = protowire.ConsumeFieldValue(num, typ, data)
		}
		if n < 0 {
			return Delta{}, errStoredWire
		}
		if err != nil {
			return Delta{}, err
		}
		data = data[n:]
	}
	var err error
	if d.Hash, err = HashFromBytes(hash); err != nil {
		return Delta{}, err
	}
	return d, nil
}

// countUpserts returns how many upserts the wire form of a delta holds, to
// size the slice that holds them: growing it by appending was a fifth of
// decoding a fleet. Malformed data counts what it can; the decoder then
// refuses it.
func countUpserts(data []byte) int {
	n := 0
	for len(data) > 0 {
		num, typ, l := protowire.ConsumeTag(data)
		if l < 0 {
			return n
		}
		data = data[l:]
		if l = protowire.ConsumeFieldValue(num, typ, data); l < 0 {
			return n
		}
		if num == deltaUpserts && typ == protowire.BytesType {
			n++
		}
		data = data[l:]
	}
	return n
}

// interner hands out one string for each distinct value of the fields
// that repeat across a snapshot's IDs (group, version, kind, namespace):
// the process's copy ([intern]), shared with the IDs of other snapshots,
// looked up once per snapshot.
type interner map[string]string

func (in interner) get(b []byte) string {
	if s, ok := in[string(b)]; ok {
		return s
	}
	s := intern(string(b))
	in[s] = s
	return s
}

// storedResource decodes a resource's wire form; its body shares b.
func storedResource(b []byte, in interner) (Resource, error) {
	var (
		r     Resource
		rawID []byte
		hasID bool
	)
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return Resource{}, errStoredWire
		}
		b = b[n:]
		switch {
		case num == resourceID && typ == protowire.BytesType:
			var seg []byte
			if seg, n = protowire.ConsumeBytes(b); n >= 0 {
				// As in protobuf, an id given twice is the merge of both:
				// the fields of their encodings one after the other.
				if hasID {
					seg = append(slices.Clip(rawID), seg...)
				}
				rawID, hasID = seg, true
			}
		case num == resourceBody && typ == protowire.BytesType:
			r.Body, n = protowire.ConsumeBytes(b)
			r.Body = r.Body[:len(r.Body):len(r.Body)]
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return Resource{}, errStoredWire
		}
		b = b[n:]
	}
	if !hasID {
		return Resource{}, errors.New("missing resource id")
	}
	id, err := storedID(rawID, in)
	if err != nil {
		return Resource{}, err
	}
	r.ID, r.Hash = id, sha256.Sum256(r.Body)
	return r, nil
}

// storedID decodes and validates an ID's wire form.
func storedID(b []byte, in interner) (ID, error) {
	var id ID
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return ID{}, errStoredWire
		}
		b = b[n:]
		var field *string
		switch num {
		case idGroup:
			field = &id.Group
		case idVersion:
			field = &id.Version
		case idKind:
			field = &id.Kind
		case idNamespace:
			field = &id.Namespace
		case idName:
			field = &id.Name
		}
		if field != nil && typ == protowire.BytesType {
			var v []byte
			v, n = protowire.ConsumeBytes(b)
			if n >= 0 && !utf8.Valid(v) {
				return ID{}, errors.New("resource id: invalid UTF-8")
			}
			if num == idName {
				*field = string(v)
			} else {
				*field = in.get(v)
			}
		} else {
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return ID{}, errStoredWire
		}
		b = b[n:]
	}
	if err := id.Validate(); err != nil {
		return ID{}, fmt.Errorf("resource id: %w", err)
	}
	return id, nil
}
