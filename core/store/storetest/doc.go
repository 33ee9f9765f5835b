// Package storetest is the conformance suite every store.Store passes: the
// memory store, the Redis store against a real redis-server, and
// store.WriteThrough over both.
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, storetest.Shared(newBackend, newReplica))
//	}
//
// The factory given to Run returns, for one *testing.T, store instances with
// distinct replica IDs over one shared backend (so that Watch can be checked
// across replicas), and for different *testing.T values, independent empty
// backends. Shared builds such a factory.
package storetest
