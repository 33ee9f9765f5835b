package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Presence lets server replicas know each other: every replica announces
// itself and the number of agents it serves, and reads which replicas are
// alive, to divide the agents evenly (see core/server/rebalance.go). A
// replica that stops announcing drops out when its time runs out.
type Presence interface {
	// Announce records that replica is alive and serves agents agents, for
	// ttl from now. replica must not be empty, agents not negative, and
	// ttl at least a millisecond.
	Announce(ctx context.Context, replica string, agents int, ttl time.Duration) error

	// Replicas returns the replicas whose last announcement has not run
	// out, each with the number of agents it announced.
	Replicas(ctx context.Context) (map[string]int, error)
}

// Announce implements Presence in the backing store, which every replica
// shares. While the backing store is unreachable it fails: a replica that
// cannot reach it cannot learn what the others serve either.
func (w *WriteThrough) Announce(ctx context.Context, replica string, agents int, ttl time.Duration) error {
	octx, cancel := w.op(ctx)
	defer cancel()
	return w.backing.Announce(octx, replica, agents, ttl)
}

// Replicas implements Presence in the backing store.
func (w *WriteThrough) Replicas(ctx context.Context) (map[string]int, error) {
	octx, cancel := w.op(ctx)
	defer cancel()
	return w.backing.Replicas(octx)
}

// CheckAnnounce checks Announce's arguments, for implementations.
func CheckAnnounce(replica string, agents int, ttl time.Duration) error {
	switch {
	case replica == "":
		return errors.New("empty replica")
	case agents < 0:
		return fmt.Errorf("replica %q: negative agent count %d", replica, agents)
	case ttl < time.Millisecond:
		return fmt.Errorf("replica %q: ttl %s is shorter than a millisecond", replica, ttl)
	}
	return nil
}
