package store

import (
	"context"
	"errors"
	"slices"
)

// TrustRecord is one record of mesh trust: the data is the caller's, the
// store keeps it whole.
type TrustRecord struct {
	// Name keys the record: a MeshTrust's namespace/name, or a cluster's
	// report.
	Name string
	// Data is the record's content.
	Data []byte
	// Version counts the record's changes; CompareAndPutTrust checks and
	// increments it.
	Version uint64
}

// Clone returns a copy of r that shares no bytes with it.
func (r TrustRecord) Clone() TrustRecord {
	r.Data = slices.Clone(r.Data)
	return r
}

// UpdateTrust reads the record of name, lets update compute its new data
// and stores it with CompareAndPutTrust, reading again and retrying when
// another writer changed it in between. update gets found=false and nil
// data when none is stored; it may return an error to abandon the change,
// which UpdateTrust returns as is.
func UpdateTrust(ctx context.Context, s Trust, name string, update func(data []byte, found bool) ([]byte, error)) (TrustRecord, error) {
	for attempt := 0; ; attempt++ {
		r, err := s.GetTrust(ctx, name)
		found := err == nil
		switch {
		case errors.Is(err, ErrNotFound):
			r = TrustRecord{Name: name}
		case err != nil:
			return TrustRecord{}, err
		}
		data, err := update(r.Data, found)
		if err != nil {
			return TrustRecord{}, err
		}
		r.Name, r.Data = name, data
		stored, err := s.CompareAndPutTrust(ctx, r)
		if errors.Is(err, ErrConflict) && attempt < maxUpdateAttempts {
			continue
		}
		return stored, err
	}
}
