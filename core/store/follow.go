package store

import (
	"context"
	"errors"
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
// or until ctx ends.
func (w *WriteThrough) follow(ctx context.Context, events <-chan Event) bool {
	for {
		select {
		case e, ok := <-events:
			if !ok {
				return true
			}
			w.apply(ctx, e)
		case <-ctx.Done():
			return false
		}
	}
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
		s, err := w.backing.GetOutput(octx, e.Cluster, e.Backend)
		if errors.Is(err, ErrNotFound) {
			return nil // deleted since; that deletion's event follows
		}
		if err != nil {
			return err
		}
		kept, err := w.copyOutput(ctx, e.Cluster, e.Backend, Decoded(s))
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
