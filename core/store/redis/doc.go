// Package redis is the store.Store in Redis: the shared source of truth
// across meshrelay server replicas (docs/architecture.md). It uses go-redis's
// UniversalClient, so one server, Sentinel and Redis Cluster all work; see
// ParseURL for the --store URL forms.
//
//	o, err := redis.ParseURL("redis://:secret@10.0.0.5:6379/0")
//	o.Replica = podName
//	s, err := redis.New(ctx, o)
//
// # Key layout
//
// Every key starts with Options.Prefix (default "meshrelay:", shown as P;
// "{meshrelay}:" on Redis Cluster, below):
//
//	P input:CLUSTER   hash  v: version, 20 zero-padded digits
//	                        h: snapshot hash, 32 raw bytes
//	                        d: the snapshot, compressed (below)
//	                        r: replica ID of the last writer
//	P inputs          set   names of clusters with an input (the index
//	                        ListInputs reads, so it never SCANs)
//	P output:CLUSTER  hash  v:BACKEND, h:BACKEND, d:BACKEND as above, one
//	                        triple per backend; DeleteOutputs is one DEL
//	P clusters        hash  NAME → registry record as JSON
//	P ca              hash  cert, key: PEM
//	P trust           hash  NAME → trust record: its version (20 zero-padded
//	                        digits), ':', its data
//	P rollouts        hash  NAME → rollout record, encoded as a trust record
//	P lease:NAME      string the lease's holder (store.Leases), expiring
//	                        with the lease (PX); written only by Lua scripts
//	P events          pub/sub channel of the change feed
//
// A stored snapshot is one format byte ('g') followed by the gzip
// (BestSpeed) of snapshot.Marshal, written and read with
// github.com/klauspost/compress/gzip: the same format as compress/gzip,
// compressed in about 60 % of its time (BenchmarkCodec). On the way out
// the decoded snapshot is checked against the version and hash stored
// beside it. Versions are zero-padded so the Lua scripts compare them as
// strings: Lua numbers are doubles and lose uint64 precision above 2^53.
//
// Each write that can change something is one Lua script on one key: it
// checks (a PutInput older than the stored version is ignored; a Put of the
// stored version and hash is a no-op), writes, and publishes the event, so
// an event is published exactly when data changed and never before the data
// is readable. Scripts write a single key; the index set is written before
// the input (SADD, then the script) and removed after it (the script, then
// SREM), so a crash in between
// leaves an index entry without a key, which ListInputs skips, and never an
// input that ListInputs cannot see. PutInputUnlessRevoked and
// PutOutputUnlessRevoked also read the cluster's registry record in their
// script (in the same hash slot on Redis Cluster) and write nothing when
// it is revoked; a record that is not JSON does not stop the write.
//
// # Sentinel and Redis Cluster
//
// With Sentinel the store talks to the primary the Sentinels name, and
// follows a failover without a new store. Redis replicates asynchronously
// and the store does not WAIT, so an acknowledged write is on the primary
// only: a failover may drop the writes the dead primary acknowledged
// before its replicas had them. The change feed's subscription is on the
// primary and breaks with it, so every watcher gets store.EventResync, and
// store.WriteThrough writes back what memory holds.
//
// On Redis Cluster, New wraps a prefix without a hash tag in one
// ("meshrelay:" becomes "{meshrelay}:"), so every key and the channel share
// one hash slot and one shard. The change feed subscribes on the primary
// serving that slot, through that primary's own client (watch.go), and
// keeps it there: after every failure it asks again which primary serves
// the slot, and every 2 s it compares the primary it is on with go-redis's
// view of the cluster, reloaded at each check. When the slot has another
// primary (a slot migration, a failover) it subscribes there, which
// resyncs every watcher. Ordinary pub/sub reaches every node, so a
// subscription left on the old primary would still carry events but no
// longer break with the node holding the data. A shard that restarts
// empty or fails over thus always breaks the subscription and resyncs,
// also after the slot moved. The cluster gives the store failover, not
// sharding.
//
// Tested for real (ha_test.go, failover_test.go, internal/testenv): the
// conformance suite (core/store/storetest) through three Sentinels and on
// a three-primary Redis Cluster; a SIGKILL of the Sentinel primary under
// writes, with and without store.WriteThrough (writes acknowledged again
// about 2.4 s after the kill with down-after-milliseconds 1000); each
// Cluster node restarting empty under store.WriteThrough; the store's slot
// moved to another primary, which then restarts empty, under
// store.WriteThrough (TestClusterWatchFollowsSlotMove).
//
// A Sentinel failover that leaves the old primary alive (SENTINEL
// FAILOVER, or a partition that heals) moves the store's commands to the
// new primary at the switch, but its subscription stays on the old primary
// until the Sentinels make that a replica and close its clients (the
// Resync came 10.9 s after SENTINEL FAILOVER in
// TestSentinelManualFailoverResyncs, the switch about 1 s after). Until then the watcher misses other replicas'
// events; the Resync then reloads what it missed, and store.WriteThrough
// writes back what the old primary took after the promotion and dropped.
// A slot migration under writes (redis-cli --cluster reshard of every slot
// of the node holding the store's slot, TestClusterReshardLosesNothing)
// loses nothing: the client follows the MOVED and ASK redirects, and
// store.WriteThrough retries a write refused meanwhile. Cluster shards with
// replicas are not tested.
//
// Loading the fleet is ListEncodedInputs: one SMEMBERS and one pipeline
// of HMGETs (no per-key round trip); ListInputs then decodes them in
// parallel on GOMAXPROCS goroutines. ListOutputsOf reads many clusters'
// outputs in one pipeline. Both decode none: each is a store.Encoded, its
// version and hash read, its data decoded and checked when first read
// (store.WriteThrough's Load keeps them so in memory).
// Decoding trusts what the store wrote (snapshot.Unmarshal): bodies are not
// checked for JSON again and share the decompressed data; the hash stored
// beside each snapshot is checked instead.
//
// Store.Batch sends many PutCluster, PutInput and PutOutput writes in one
// pipeline, each the same script with the same checks and event as the
// method: for filling a store in bulk (meshrelay bench --cold-start).
//
// # Change feed: pub/sub with a resync, not Streams
//
// Replicas learn of each other's writes through one pub/sub channel
// (P events). Each message is a hint: kind, cluster, backend, version,
// deleted, replica. The data itself is read from the keys, which are the
// truth, with one exception: a write of an input that names the input it
// replaces (PutInputUnlessRevoked with a base, as store.WriteThrough's
// queue writes) publishes the delta between the two, at most
// maxEventDelta bytes, when its script finds that base stored (same
// version and hash). A follower that holds the base applies the delta,
// which carries the result's hash, instead of reading and decoding the
// whole input; one that does not reads the key as for any event. A store holds one subscription, started by the first Watch,
// drops its own replica's messages, and whenever the subscription is
// re-established after a failure (go-redis reconnects it; on Redis Cluster
// the store does, also when it moves the subscription to the slot's new
// primary) sends store.EventResync to its watchers, which reload.
//
// Streams were the alternative (XADD per write, XREAD from the last ID
// seen, replay after a reconnect). They were not chosen because:
//
//   - The state is small and keyed, and a watcher only needs to know what to
//     reload; a resync after a disconnect costs one ListInputs, which the
//     cold start already makes fast. Replaying a log gives nothing more.
//   - A stream grows with every write and needs trimming (MAXLEN), and a
//     replica that was away longer than the trimmed window needs a full
//     reload anyway: the resync path is needed in both designs, so the
//     simpler one carries only that path.
//   - Pub/sub stores nothing in Redis, needs no consumer bookkeeping per
//     replica, and works unchanged with Sentinel and Redis Cluster.
//   - A Redis that restarted empty has lost any stream with the data; the
//     resync that pub/sub forces after the reconnect is exactly what lets
//     store.WriteThrough refill it from memory.
package redis
