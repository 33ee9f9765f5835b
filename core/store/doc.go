// Package store owns meshrelay's storage contract: where the server keeps
// every cluster's last input snapshot, the outputs computed for it per
// backend, the registry of clusters and the CA, and how server replicas learn
// of each other's writes.
//
// [Store] is the contract. Two implementations pass the same conformance
// suite (package storetest): package memory, the embedded default for demos
// and tests, and package redis, the shared source of truth across server
// replicas. [WriteThrough] combines them as docs/architecture.md describes: reads
// and writes hit memory and return at once, writes reach Redis from a
// coalescing queue, and translation keeps going from memory while Redis is
// down (the failure contract in docs/architecture.md, "Redis unavailable").
//
// Typical use in the server:
//
//	backing, err := redis.New(ctx, opts)
//	wt := store.NewWriteThrough(memory.New(), backing, store.WriteThroughOptions{Logger: log})
//	stats, err := wt.Load(ctx) // cold start: fill memory from Redis
//	go wt.Run(ctx)             // flush the queue, follow other replicas
//	state, err := wt.Health()  // "ok" or "degraded"
package store
