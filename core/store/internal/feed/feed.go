package feed

import (
	"context"
	"sync"
)

// queueLimit bounds the events held for one slow watcher before they are
// dropped in favour of a Resync.
const queueLimit = 4096

// chanBuffer is the capacity of a watcher's channel: a watcher that takes
// the events already waiting as one batch (store.WriteThrough's follow)
// finds a burst of them there, not one at a time behind the pump.
const chanBuffer = 256

// Hub delivers events of type E to every watcher. The zero value is not
// usable; call New.
type Hub[E any] struct {
	resync   E
	closeErr error
	mu       sync.Mutex
	closed   bool
	watchers map[*watcher[E]]struct{}
	wg       sync.WaitGroup
}

type watcher[E any] struct {
	ch     chan E
	wake   chan struct{}
	done   chan struct{}
	mu     sync.Mutex
	queue  []E
	behind bool   // queue holds only a Resync; drop events until it is sent
	gen    uint64 // counts queue replacements, so pump never pops a Resync it did not send
}

// New returns an empty hub. resync is the event that replaces the queue of
// a watcher that fell behind; closed is the error Watch returns after Close.
func New[E any](resync E, closed error) *Hub[E] {
	return &Hub[E]{resync: resync, closeErr: closed, watchers: make(map[*watcher[E]]struct{})}
}

// Watch registers a watcher until ctx ends or the hub closes; its channel is
// then closed.
func (h *Hub[E]) Watch(ctx context.Context) (<-chan E, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, h.closeErr
	}
	w := &watcher[E]{
		ch:   make(chan E, chanBuffer),
		wake: make(chan struct{}, 1),
		done: make(chan struct{}),
	}
	h.watchers[w] = struct{}{}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		w.pump(ctx)
		h.mu.Lock()
		delete(h.watchers, w)
		h.mu.Unlock()
	}()
	return w.ch, nil
}

// Publish queues e for every watcher. It never blocks.
func (h *Hub[E]) Publish(e E) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.watchers {
		w.push(e, h.resync)
	}
}

// Close closes every watcher's channel and waits for their goroutines.
func (h *Hub[E]) Close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	for w := range h.watchers {
		close(w.done)
	}
	h.mu.Unlock()
	h.wg.Wait()
}

func (w *watcher[E]) push(e, resync E) {
	w.mu.Lock()
	switch {
	case w.behind:
	case len(w.queue) >= queueLimit:
		w.behind = true
		w.gen++
		w.queue = []E{resync}
	default:
		w.queue = append(w.queue, e)
	}
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *watcher[E]) pump(ctx context.Context) {
	defer close(w.ch)
	for {
		w.mu.Lock()
		var next *E
		gen := w.gen
		if len(w.queue) > 0 {
			e := w.queue[0]
			next = &e
			// The head is the Resync: from now on the watcher will reload
			// after it, so later events are worth queueing again.
			w.behind = false
		}
		w.mu.Unlock()
		if next == nil {
			select {
			case <-w.wake:
				continue
			case <-ctx.Done():
				return
			case <-w.done:
				return
			}
		}
		select {
		case w.ch <- *next:
			w.mu.Lock()
			if w.gen == gen {
				w.queue = w.queue[1:]
			}
			if len(w.queue) == 0 {
				w.queue = nil
			}
			w.mu.Unlock()
		case <-ctx.Done():
			return
		case <-w.done:
			return
		}
	}
}
