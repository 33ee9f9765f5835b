// Package memory is the in-process implementation of store.Store: the
// embedded default for `meshrelay demo` and unit tests, and the primary half
// of store.WriteThrough in the server.
//
// Everything lives in maps guarded by one mutex. Snapshots are immutable and
// shared, not copied; registry records and PEM blocks are copied on the way
// in and out.
//
// A Store is one replica's handle. [Store.Replica] returns another handle on
// the same data under another replica ID, so that several in-process
// "replicas" see each other's writes through Watch as server replicas do
// through Redis:
//
//	a := memory.New()
//	b := a.Replica("b")
//	events, _ := a.Watch(ctx) // sees b's writes, not a's own
package memory
