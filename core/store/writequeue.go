package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/meshrelay/meshrelay/api/snapshot"
)

// writeQueue is a WriteThrough's queue of writes to the backing store. It
// holds keys, not values, so writes coalesce per key: only the latest value
// of an input, output, registry record or the CA is written, read from the
// primary when the key is flushed. Keys are flushed in the order they were
// last queued; run retries with backoff while the backing store fails.
//
// A flush never undoes another replica's change: an input or output of a
// cluster whose record in the backing store is revoked is dropped, not
// written (writeUnlessRevoked), and a registry record is never written over
// a newer version of itself (writeCluster).
type writeQueue struct {
	*mirror
	wake chan struct{} // signals run that the queue grew

	mu      sync.Mutex
	seq     uint64
	pending map[pendingKey]uint64 // key → sequence number of its last write
	// written holds each cluster's input this replica wrote last, until
	// another replica's input of the cluster is copied or the input is
	// deleted: the base of the delta its next write announces
	// (unlessRevokedWriter). It is the snapshot memory holds, or the one
	// before it.
	written map[string]*snapshot.Snapshot
}

type pendingKind int

const (
	pendingInput pendingKind = iota + 1
	pendingOutput
	pendingOutputsDeleted
	pendingCluster
	pendingCA
)

// pendingKey names one queued write. Values are not queued: they are read
// from the primary when flushed.
type pendingKey struct {
	kind    pendingKind
	cluster string
	backend string
}

func inputKey(cluster string) pendingKey { return pendingKey{kind: pendingInput, cluster: cluster} }

func outputKey(cluster, backend string) pendingKey {
	return pendingKey{kind: pendingOutput, cluster: cluster, backend: backend}
}

func outputsDeletedKey(cluster string) pendingKey {
	return pendingKey{kind: pendingOutputsDeleted, cluster: cluster}
}

func clusterKey(name string) pendingKey { return pendingKey{kind: pendingCluster, cluster: name} }

var caKey = pendingKey{kind: pendingCA}

func (k pendingKey) String() string {
	switch k.kind {
	case pendingInput:
		return fmt.Sprintf("input %q", k.cluster)
	case pendingOutput:
		return fmt.Sprintf("output %q/%q", k.cluster, k.backend)
	case pendingOutputsDeleted:
		return fmt.Sprintf("deletion of outputs %q", k.cluster)
	case pendingCluster:
		return fmt.Sprintf("cluster %q", k.cluster)
	case pendingCA:
		return "ca"
	}
	return "unknown"
}

func newWriteQueue(m *mirror) *writeQueue {
	return &writeQueue{mirror: m, wake: make(chan struct{}, 1), pending: make(map[pendingKey]uint64)}
}

// add queues keys after the primary accepted a write.
func (q *writeQueue) add(keys ...pendingKey) {
	q.mu.Lock()
	for _, k := range keys {
		q.seq++
		q.pending[k] = q.seq
	}
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// deleteOutputs queues the deletion of every output of cluster, which
// supersedes the queued writes of its outputs: they are dropped.
func (q *writeQueue) deleteOutputs(cluster string) {
	q.mu.Lock()
	for k := range q.pending {
		if k.kind == pendingOutput && k.cluster == cluster {
			delete(q.pending, k)
		}
	}
	q.mu.Unlock()
	q.add(outputsDeletedKey(cluster))
}

// has reports whether a write of k waits in the queue.
func (q *writeQueue) has(k pendingKey) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	_, ok := q.pending[k]
	return ok
}

// size returns how many keys wait in the queue.
func (q *writeQueue) size() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.pending)
}

// run flushes the queue until ctx ends, retrying with backoff while the
// backing store fails, and pings the backing store every PingInterval while
// the queue is empty. Each flush's and ping's outcome goes to report.
func (q *writeQueue) run(ctx context.Context, report func(error)) {
	retry := q.backoff()
	ping := time.NewTicker(q.opts.PingInterval)
	defer ping.Stop()
	for {
		if q.size() > 0 {
			err := q.flush(ctx)
			if ctx.Err() != nil {
				return
			}
			report(err)
			if err == nil {
				retry.reset()
			} else if !retry.wait(ctx) {
				return
			}
			continue
		}
		select {
		case <-q.wake:
		case <-ping.C:
			err := q.ping(ctx)
			if ctx.Err() != nil {
				return
			}
			report(err)
		case <-ctx.Done():
			return
		}
	}
}

func (q *writeQueue) ping(ctx context.Context) error {
	octx, cancel := q.op(ctx)
	defer cancel()
	return q.backing.Ping(octx)
}

// flush writes every queued key to the backing store once, in order, and
// returns the first failure. A key queued again while it was written stays
// queued.
func (q *writeQueue) flush(ctx context.Context) error {
	q.mu.Lock()
	seqs := maps.Clone(q.pending)
	q.mu.Unlock()
	batch := slices.SortedFunc(maps.Keys(seqs), func(a, b pendingKey) int { return cmp.Compare(seqs[a], seqs[b]) })
	for _, k := range batch {
		if err := q.write(ctx, k); err != nil {
			return fmt.Errorf("write %s to backing store: %w", k, err)
		}
		q.mu.Lock()
		if q.pending[k] == seqs[k] {
			delete(q.pending, k)
		}
		q.mu.Unlock()
	}
	return nil
}

// write copies one key's current value from the primary to the backing
// store, or deletes it there when the primary has none.
func (q *writeQueue) write(ctx context.Context, k pendingKey) error {
	octx, cancel := q.op(ctx)
	defer cancel()
	switch k.kind {
	case pendingInput:
		s, err := q.primary.GetInput(ctx, k.cluster)
		if errors.Is(err, ErrNotFound) {
			q.forgetWritten(k.cluster)
			return q.backing.DeleteInput(octx, k.cluster)
		}
		if err != nil {
			return err
		}
		if w, ok := q.backing.(unlessRevokedWriter); ok {
			revoked, err := w.PutInputUnlessRevoked(octx, k.cluster, q.lastWritten(k.cluster), s)
			if err == nil && !revoked {
				q.setWritten(k.cluster, s)
			}
			return q.droppedIfRevoked(ctx, k.cluster, revoked, err)
		}
		return q.writeUnlessRevoked(ctx, octx, k.cluster, func() error { return q.backing.PutInput(octx, k.cluster, s) })
	case pendingOutput:
		s, err := q.primary.GetOutput(ctx, k.cluster, k.backend)
		if errors.Is(err, ErrNotFound) {
			return nil // deleted since: a queued deletion of all outputs follows
		}
		if err != nil {
			return err
		}
		if w, ok := q.backing.(unlessRevokedWriter); ok {
			revoked, err := w.PutOutputUnlessRevoked(octx, k.cluster, k.backend, s)
			return q.droppedIfRevoked(ctx, k.cluster, revoked, err)
		}
		return q.writeUnlessRevoked(ctx, octx, k.cluster, func() error { return q.backing.PutOutput(octx, k.cluster, k.backend, s) })
	case pendingOutputsDeleted:
		return q.backing.DeleteOutputs(octx, k.cluster)
	case pendingCluster:
		return q.writeCluster(ctx, octx, k.cluster)
	case pendingCA:
		cert, key, err := q.primary.GetCA(ctx)
		if errors.Is(err, ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		return q.backing.PutCA(octx, cert, key)
	}
	return fmt.Errorf("unknown queued write %d", k.kind)
}

// lastWritten returns the input of cluster this replica wrote last; nil
// when it wrote none since another replica's was copied.
func (q *writeQueue) lastWritten(cluster string) *snapshot.Snapshot {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.written[cluster]
}

func (q *writeQueue) setWritten(cluster string, s *snapshot.Snapshot) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.written == nil {
		q.written = map[string]*snapshot.Snapshot{}
	}
	q.written[cluster] = s
}

// forgetWritten drops the input of cluster this replica wrote last: the
// backing store holds another replica's, or none.
func (q *writeQueue) forgetWritten(cluster string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.written, cluster)
}

// unlessRevokedWriter is a backing store that writes an input or output
// only while the cluster's registry record is not revoked, checked in the
// same atomic step as the write (redis.Store): the write then needs no
// read of the record around it, as writeUnlessRevoked makes. An input's
// write names the input it replaces (nil: unknown), and its event then
// carries the delta from it when that is what the backing store held.
type unlessRevokedWriter interface {
	PutInputUnlessRevoked(ctx context.Context, cluster string, base, s *snapshot.Snapshot) (revoked bool, err error)
	PutOutputUnlessRevoked(ctx context.Context, cluster, backend string, s *snapshot.Snapshot) (revoked bool, err error)
}

// droppedIfRevoked ends a write an unlessRevokedWriter made: a revoked
// cluster's inputs and outputs leave memory.
func (q *writeQueue) droppedIfRevoked(ctx context.Context, cluster string, revoked bool, err error) error {
	if err != nil || !revoked {
		return err
	}
	q.forgetWritten(cluster)
	return q.dropRevokedLocally(ctx, cluster)
}

// writeUnlessRevoked runs put, which writes an input or output of cluster
// to the backing store, unless the cluster's record there is revoked. A
// deregistration revokes the record, then deletes the inputs and outputs:
// reading the record again after put tells whether that deletion may have
// come before put, and then the write is deleted again. Either way, a
// revoked cluster's inputs and outputs also leave memory.
func (q *writeQueue) writeUnlessRevoked(ctx, octx context.Context, cluster string, put func() error) error {
	revoked, err := q.backingRevoked(octx, cluster)
	if err != nil {
		return err
	}
	if revoked {
		return q.dropRevokedLocally(ctx, cluster)
	}
	if err := put(); err != nil {
		return err
	}
	if revoked, err = q.backingRevoked(octx, cluster); err != nil || !revoked {
		return err
	}
	q.logger.Info("cluster deregistered by another replica while its write was queued; dropping it", "cluster", cluster)
	return errors.Join(q.backing.DeleteInput(octx, cluster), q.backing.DeleteOutputs(octx, cluster), q.dropRevokedLocally(ctx, cluster))
}

// writeCluster copies a registry record from memory to the backing store
// (a backing store that restarted empty is refilled this way), unless the
// backing store holds a newer version, which it copies into memory
// instead: another replica's revocation must survive. A record of the same
// version is written: only PutCluster makes two records of one version
// differ, and it replaces the record as given.
func (q *writeQueue) writeCluster(ctx, octx context.Context, name string) error {
	c, err := q.primary.GetCluster(ctx, name)
	if errors.Is(err, ErrNotFound) {
		return q.backing.DeleteCluster(octx, name)
	}
	if err != nil {
		return err
	}
	cur, err := q.backing.GetCluster(octx, name)
	switch {
	case err == nil && cur.Version > c.Version:
		return q.copyCluster(ctx, cur)
	case err != nil && !errors.Is(err, ErrNotFound):
		return err
	}
	return q.backing.PutCluster(octx, c)
}
