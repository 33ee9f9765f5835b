// Package store owns meshrelay's storage contract: where the server keeps
// every cluster's last input snapshot, the outputs computed for it per
// backend, the registry of clusters, the CA and the meshes' trust state, how
// server replicas learn of each other's writes, and the leases by which they
// take turns at a job only one of them may do at a time.
//
// [Store] is the contract, composed of one small interface per job, as
// go-control-plane composes its Cache of a ConfigWatcher and a
// ConfigFetcher. A caller that needs one job takes that interface:
//
//	interface        methods                                   job
//	[Inputs]         PutInput, DeleteInput + [InputReader]      each cluster's input snapshot
//	[InputReader]    GetInput, ListInputs
//	[Outputs]        PutOutput, DeleteOutputs + [OutputReader]  each cluster's outputs, per backend
//	[OutputReader]   GetOutput, ListOutputs
//	[Registry]       PutCluster, CompareAndPutCluster(s),       the cluster registry: tokens,
//	                 DeleteCluster + [RegistryReader]           certificates, revocation
//	[RegistryReader] GetCluster, ListClusters
//	[CA]             PutCA, GetCA                               the server's CA
//	[Trust]          GetTrust, PutTrust, CompareAndPutTrust,    mesh trust: roots, rotation,
//	                 DeleteTrust                                the clusters' reports
//	[Watcher]        Watch                                      the change feed across replicas
//	[Leases]         AcquireLease, ReleaseLease                 one replica at a time at a job
//	[Presence]       Announce, Replicas                         the live replicas and their agents
//	[Store]          all of the above, Ping, Close
//
// [UpdateCluster] needs only a [Registry], [UpdateTrust] only a [Trust].
//
// Two implementations pass the same conformance suite (package
// storetest): package memory, the embedded default for demos and tests, and
// package redis, the shared source of truth across server replicas.
// [WriteThrough] combines them as docs/architecture.md describes: reads and
// writes hit memory and return at once, writes reach Redis from a
// coalescing queue, and translation keeps going from memory while Redis is
// down (the failure contract in docs/architecture.md, "Redis unavailable").
// It passes the conformance suite too, over either backing store.
//
// A cold start keeps the inputs and outputs it loads as [Encoded]: their
// versions and hashes at once, their objects decoded when first read
// (memory.Store's PutEncodedInput and PutEncodedOutput), so that a fleet's
// outputs cost the load neither the decoding nor the memory of their
// objects until an agent or a reader needs them. [ListEncodedInputs] lists
// inputs so; the server decodes them all as it loads its fleet. A damaged
// snapshot is then found when first read, an error of that cluster's input
// or output, not of the whole Load.
//
// Typical use in the server:
//
//	backing, err := redis.New(ctx, opts)
//	wt := store.NewWriteThrough(memory.New(), backing, store.WriteThroughOptions{Logger: log})
//	stats, err := wt.Load(ctx) // cold start: fill memory from Redis
//	go wt.Run(ctx)             // flush the queue, follow other replicas
//	state, err := wt.Health()  // "ok" or "degraded"
package store
