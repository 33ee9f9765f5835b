package store

import (
	"context"
	"errors"
	"maps"
	"slices"

	"github.com/meshrelay/meshrelay/api/snapshot"
)

// followLoop copies other replicas' writes into memory and passes their
// events on. It subscribes before it reloads, so nothing is missed between
// the two; the subscription Load made needs no reload.
func (w *WriteThrough) followLoop(ctx context.Context) {
	retry := w.backoff()
	for ctx.Err() == nil {
		events := w.takeEvents()
		if events == nil {
			var err error
			events, err = w.watch()
			if err != nil {
				if errors.Is(err, ErrClosed) || ctx.Err() != nil {
					return
				}
				w.setHealth(err)
				if !retry.wait(ctx) {
					return
				}
				continue
			}
			w.apply(ctx, Event{Kind: EventResync})
		}
		retry.reset()
		if !w.follow(ctx, events) {
			return
		}
	}
}

// takeEvents returns the subscription Load made, once; nil when there is
// none.
func (w *WriteThrough) takeEvents() <-chan Event {
	w.mu.Lock()
	defer w.mu.Unlock()
	events := w.events
	w.events = nil
	return events
}

// follow applies events until the channel closes, and then returns true,
// or until ctx ends. Events already waiting are taken together (drain),
// so that a run of registry changes is read from the backing store in one
// round trip (applyClusters).
func (w *WriteThrough) follow(ctx context.Context, events <-chan Event) bool {
	batch := make([]Event, 0, followBatch)
	for {
		select {
		case e, ok := <-events:
			if !ok {
				return true
			}
			batch = drain(append(batch[:0], e), events)
			w.applyBatch(ctx, batch)
		case <-ctx.Done():
			return false
		}
	}
}

// drain appends the events already waiting on events to batch, up to
// followBatch in all. A closed channel is left for the next receive to
// report.
func drain(batch []Event, events <-chan Event) []Event {
	for len(batch) < followBatch {
		select {
		case e, ok := <-events:
			if !ok {
				return batch
			}
			batch = append(batch, e)
		default:
			return batch
		}
	}
	return batch
}

// followBatch bounds the events follow takes together.
const followBatch = 512

// applyBatch applies events in order. Consecutive registry changes go
// through applyClusters when the backing store reads many records at once.
func (w *WriteThrough) applyBatch(ctx context.Context, events []Event) {
	_, batched := w.backing.(clustersGetter)
	for len(events) > 0 {
		n := 1
		if batched && events[0].Kind == EventCluster {
			for n < len(events) && events[n].Kind == EventCluster {
				n++
			}
		}
		if n > 1 {
			w.applyClusters(ctx, events[:n])
		} else {
			w.apply(ctx, events[0])
		}
		events = events[n:]
	}
}

// clustersGetter is a backing store that reads many registry records in
// one round trip, as redis.Store.GetClusters does with one HMGET: a
// replica then follows the others' heartbeats, which touch every record
// they serve at once (touchLastSeen in core/server), in a round trip per
// heartbeat instead of one per record.
type clustersGetter interface {
	// GetClusters returns the records of names that are stored, by name.
	GetClusters(ctx context.Context, names []string) (map[string]Cluster, error)
}

// applyClusters applies a run of registry events, reading their records
// in one round trip, then publishes each event in order. A record whose
// write of memory's is queued is not read nor copied: that write is on
// its way to the backing store. When the read fails each event is applied
// on its own, as apply does.
func (w *WriteThrough) applyClusters(ctx context.Context, events []Event) {
	read := make(map[string]bool, len(events))
	for _, e := range events {
		if !w.queue.has(clusterKey(e.Cluster)) {
			read[e.Cluster] = true
		}
	}
	octx, cancel := w.op(ctx)
	records, err := w.backing.(clustersGetter).GetClusters(octx, slices.Collect(maps.Keys(read)))
	cancel()
	if err != nil {
		for _, e := range events {
			w.apply(ctx, e)
		}
		return
	}
	for _, e := range events {
		if read[e.Cluster] {
			if err := w.copyRecord(ctx, e.Cluster, records); err != nil {
				if ctx.Err() != nil {
					return
				}
				w.apply(ctx, e) // applied on its own, or reloaded
				continue
			}
		}
		w.hub.Publish(e)
	}
}

// copyRecord copies a registry record read from the backing store, found
// in records or deleted there when absent, into memory, unless a write of
// memory's was queued since the read.
func (w *WriteThrough) copyRecord(ctx context.Context, name string, records map[string]Cluster) error {
	if w.queue.has(clusterKey(name)) {
		return nil
	}
	c, ok := records[name]
	if !ok {
		return w.primary.DeleteCluster(ctx, name)
	}
	return w.copyCluster(ctx, c)
}

// apply copies the change e announces into memory, then publishes e. When
// the backing store cannot be read it reconciles everything instead.
func (w *WriteThrough) apply(ctx context.Context, e Event) {
	if e.Kind != EventResync {
		err := w.applyOne(ctx, e)
		if err == nil {
			w.hub.Publish(e)
			return
		}
		if ctx.Err() != nil {
			return
		}
		w.logger.Warn("copy a change from the backing store; reloading everything", "cluster", e.Cluster, "kind", e.Kind.String(), "err", err)
	}
	retry := w.backoff()
	for {
		_, err := w.reconcile(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		w.setHealth(err)
		if !retry.wait(ctx) {
			return
		}
	}
	w.hub.Publish(Event{Kind: EventResync, Replica: e.Replica})
}

// applyOne copies the change e announces from the backing store into
// memory. Where this replica's own write of the key is still queued, that
// write wins: it is on its way to the backing store (an input's version
// rule decides between the two; for an output, see copyOutput).
func (w *WriteThrough) applyOne(ctx context.Context, e Event) error {
	octx, cancel := w.op(ctx)
	defer cancel()
	switch e.Kind {
	case EventInput:
		w.queue.forgetWritten(e.Cluster)
		if applied, err := w.applyInputDelta(ctx, e); applied || err != nil {
			return err
		}
		s, err := w.backing.GetInput(octx, e.Cluster)
		if errors.Is(err, ErrNotFound) {
			if w.queue.has(inputKey(e.Cluster)) {
				return nil
			}
			return w.primary.DeleteInput(ctx, e.Cluster)
		}
		if err != nil {
			return err
		}
		return w.primary.PutInput(ctx, e.Cluster, s)
	case EventOutput:
		if w.queue.has(outputsDeletedKey(e.Cluster)) {
			return nil
		}
		if e.Backend == "" {
			return w.primary.DeleteOutputs(ctx, e.Cluster)
		}
		s, err := w.backingOutput(octx, e.Cluster, e.Backend)
		if errors.Is(err, ErrNotFound) {
			return nil // deleted since; that deletion's event follows
		}
		if err != nil {
			return err
		}
		kept, err := w.copyOutput(ctx, e.Cluster, e.Backend, s)
		if kept {
			w.queue.add(outputKey(e.Cluster, e.Backend))
		}
		return err
	case EventCluster:
		if w.queue.has(clusterKey(e.Cluster)) {
			return nil
		}
		c, err := w.backing.GetCluster(octx, e.Cluster)
		if errors.Is(err, ErrNotFound) {
			return w.primary.DeleteCluster(ctx, e.Cluster)
		}
		if err != nil {
			return err
		}
		return w.copyCluster(ctx, c)
	}
	return nil
}

// applyInputDelta applies the delta an input event carries to the input
// memory holds, when that is the delta's base (its version and hash) and
// no write of memory's own is queued: the other replica's change then
// costs no read of the whole input. It reports whether it applied it.
func (w *WriteThrough) applyInputDelta(ctx context.Context, e Event) (bool, error) {
	if e.Delta == nil || e.Deleted || w.queue.has(inputKey(e.Cluster)) {
		return false, nil
	}
	base, err := w.primary.GetInput(ctx, e.Cluster)
	if err != nil || base.Version() != e.Delta.BaseVersion || base.Hash() != e.Delta.BaseHash {
		return false, nil
	}
	s, err := snapshot.Apply(base, e.Delta.Delta)
	if err != nil {
		return false, nil // read whole, as without a delta
	}
	return true, w.primary.PutInput(ctx, e.Cluster, s)
}

// encodedOutputGetter is a backing store that reads an output without
// decoding it (redis.Store.GetEncodedOutput).
type encodedOutputGetter interface {
	GetEncodedOutput(ctx context.Context, cluster, backend string) (*Encoded, error)
}

// backingOutput reads an output another replica wrote from the backing
// store, kept encoded where the backing store reads it so: this replica
// decodes it only when an agent moves here or a reader asks, and holds it
// meanwhile as stored, a fraction of its decoded size.
func (w *WriteThrough) backingOutput(ctx context.Context, cluster, backend string) (*Encoded, error) {
	if g, ok := w.backing.(encodedOutputGetter); ok {
		return g.GetEncodedOutput(ctx, cluster, backend)
	}
	s, err := w.backing.GetOutput(ctx, cluster, backend)
	if err != nil {
		return nil, err
	}
	return Decoded(s), nil
}
