package store

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// mirror is the pair of stores a WriteThrough keeps in step, with what
// every path between them shares — this replica's writes (writeQueue), the
// reloads (reconcile.go) and the change feed (follow.go): the options for
// calling the backing store and the rules for copying between the two.
type mirror struct {
	primary, backing Store
	opts             WriteThroughOptions
	logger           *slog.Logger

	// clusterMu orders the copies of registry records into memory, so
	// that an older record never replaces a newer one (see copyCluster).
	clusterMu sync.Mutex
	// trustMu orders the copies of trust records into memory likewise
	// (see WriteThrough.copyTrust).
	trustMu sync.Mutex
}

// op bounds one call to the backing store by OpTimeout.
func (m *mirror) op(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, m.opts.OpTimeout)
}

// copyCluster stores a record read from the backing store in memory
// unless memory already holds a newer version of it: copies made by the
// change feed, a reload and this replica's own writes may finish in any
// order, and a stale copy must not undo a revocation.
func (m *mirror) copyCluster(ctx context.Context, c Cluster) error {
	m.clusterMu.Lock()
	defer m.clusterMu.Unlock()
	if cur, err := m.primary.GetCluster(ctx, c.Name); err == nil && cur.Version > c.Version {
		return nil
	}
	return m.primary.PutCluster(ctx, c)
}

// backingRevoked reports whether cluster's record in the backing store is
// revoked.
func (m *mirror) backingRevoked(ctx context.Context, cluster string) (bool, error) {
	c, err := m.backing.GetCluster(ctx, cluster)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	return err == nil && c.Revoked, err
}

// dropRevokedLocally removes a revoked cluster's input and outputs from
// memory without queuing anything.
func (m *mirror) dropRevokedLocally(ctx context.Context, cluster string) error {
	return errors.Join(m.primary.DeleteInput(ctx, cluster), m.primary.DeleteOutputs(ctx, cluster))
}

// backoff is the wait between retries of a failed call to the backing
// store: MinBackoff, doubling up to MaxBackoff, back to MinBackoff once a
// call succeeds.
type backoff struct {
	next, min, max time.Duration
}

func (m *mirror) backoff() *backoff {
	return &backoff{next: m.opts.MinBackoff, min: m.opts.MinBackoff, max: m.opts.MaxBackoff}
}

// wait sleeps for the current backoff, then doubles it. It returns false,
// at once, when ctx ends first.
func (b *backoff) wait(ctx context.Context) bool {
	t := time.NewTimer(b.next)
	defer t.Stop()
	b.next = min(2*b.next, b.max)
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// reset starts the next wait at MinBackoff again.
func (b *backoff) reset() {
	b.next = b.min
}
