// Package feed fans store events out to watchers without ever blocking the
// writer: each watcher has a bounded queue drained by its own goroutine, and
// a watcher that falls behind has its queue replaced by one Resync event.
//
// Package store's implementations and store.WriteThrough use it for their
// Watch channels:
//
//	hub := feed.New(store.Event{Kind: store.EventResync}, store.ErrClosed)
//	ch, err := hub.Watch(ctx) // closed when ctx ends or hub.Close
//	hub.Publish(e)            // never blocks
package feed
