package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Presence lets server replicas know each other: every replica announces
// itself, the number of agents it serves and where its peers reach it, and
// reads which replicas are alive, to divide the agents evenly (see
// core/server/rebalance.go) and to answer for the whole fleet's traffic
// (core/server/peers.go). A replica that stops announcing drops out when
// its time runs out.
type Presence interface {
	// Announce records that replica is alive, as r says, for ttl from
	// now. replica must not be empty, r.Agents not negative, and ttl at
	// least a millisecond.
	Announce(ctx context.Context, replica string, r Replica, ttl time.Duration) error

	// Replicas returns the replicas whose last announcement has not run
	// out, each as it announced itself.
	Replicas(ctx context.Context) (map[string]Replica, error)
}

// Replica is what a replica announces of itself.
type Replica struct {
	// Agents is the number of agents it serves.
	Agents int
	// Address is where other replicas reach its admin API (host:port), or
	// empty when it does not say (--advertise-addr unset).
	Address string
}

// maxAddressLen bounds an announced address.
const maxAddressLen = 512

// Announce implements Presence in the backing store, which every replica
// shares. While the backing store is unreachable it fails: a replica that
// cannot reach it cannot learn what the others serve either.
func (w *WriteThrough) Announce(ctx context.Context, replica string, r Replica, ttl time.Duration) error {
	octx, cancel := w.op(ctx)
	defer cancel()
	return w.backing.Announce(octx, replica, r, ttl)
}

// Replicas implements Presence in the backing store.
func (w *WriteThrough) Replicas(ctx context.Context) (map[string]Replica, error) {
	octx, cancel := w.op(ctx)
	defer cancel()
	return w.backing.Replicas(octx)
}

// CheckAnnounce checks Announce's arguments, for implementations.
func CheckAnnounce(replica string, r Replica, ttl time.Duration) error {
	switch {
	case replica == "":
		return errors.New("empty replica")
	case r.Agents < 0:
		return fmt.Errorf("replica %q: negative agent count %d", replica, r.Agents)
	case len(r.Address) > maxAddressLen:
		return fmt.Errorf("replica %q: address of %d bytes, longer than %d", replica, len(r.Address), maxAddressLen)
	case ttl < time.Millisecond:
		return fmt.Errorf("replica %q: ttl %s is shorter than a millisecond", replica, ttl)
	}
	return nil
}
