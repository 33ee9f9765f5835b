package store

import (
	"context"
	"time"
)

// Lease is a named lease as the store holds it: who holds it, and until
// when. The zero Lease is one nobody holds.
type Lease struct {
	// Holder names the holder; empty when nobody holds the lease.
	Holder string
	// Expires is when the holder's lease ends unless renewed, as this
	// replica's clock reckons it: the store's clock decides, and this
	// is the time the store reported as left added to the time of the
	// call.
	Expires time.Time
}

// Leases lets server replicas take turns at a job that one replica at a
// time must do, such as writing the discovery objects: the replica that
// holds a job's lease does it, renews the lease well within its time,
// and another replica takes the lease over once the holder stopped
// renewing it (it died, or lost the store) and its time ran out.
type Leases interface {
	// AcquireLease makes holder the holder of the lease name for ttl, from
	// now, if nobody holds it, its holder's time ran out, or holder holds
	// it already (a renewal). It returns the lease as it stands after the
	// call: the caller holds it when Holder is holder. The check and the
	// write are atomic across every replica of the store. name and holder
	// must not be empty and ttl must be at least a millisecond.
	AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (Lease, error)

	// ReleaseLease ends holder's lease name, so that another replica may
	// take it at once. It does nothing when holder does not hold it.
	ReleaseLease(ctx context.Context, name, holder string) error
}

// AcquireLease implements Leases in the backing store, which every
// replica shares: a lease in memory alone would be every replica's. While
// the backing store is unreachable it fails, and nobody learns they hold
// the lease; a holder keeps its lease until its Expires at most.
func (w *WriteThrough) AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (Lease, error) {
	octx, cancel := w.op(ctx)
	defer cancel()
	return w.backing.AcquireLease(octx, name, holder, ttl)
}

// ReleaseLease implements Leases in the backing store.
func (w *WriteThrough) ReleaseLease(ctx context.Context, name, holder string) error {
	octx, cancel := w.op(ctx)
	defer cancel()
	return w.backing.ReleaseLease(octx, name, holder)
}
