package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/store"
	"github.com/meshrelay/meshrelay/core/store/internal/feed"
	snapshotv1 "github.com/meshrelay/meshrelay/proto/snapshot/v1"
)

var _ store.Store = (*Store)(nil)

// Store is a store.Store in Redis. Its methods are safe for concurrent use.
type Store struct {
	client  goredis.UniversalClient
	keys    keys
	replica string
	logger  *slog.Logger
	codec   codec
	scripts scripts
	hub     *feed.Hub[store.Event]

	// The change feed's subscription, started by the first Watch.
	subMu      sync.Mutex
	subStarted bool
	subscribed bool          // the subscription is confirmed and healthy
	ready      chan struct{} // closed at the first confirmation
	stop       context.CancelFunc
	done       chan struct{} // closed when the subscription loop exits

	mu     sync.Mutex
	closed bool
}

// scripts are the Lua scripts that check and write atomically and publish
// the change in the same step.
type scripts struct {
	putInput, putOutput, deleteKey, putField, deleteField, casCluster, casClusters, casTrust *goredis.Script
}

func newScripts() scripts {
	return scripts{
		putInput:    goredis.NewScript(putInputScriptSrc),
		putOutput:   goredis.NewScript(putOutputScriptSrc),
		deleteKey:   goredis.NewScript(deleteKeyScriptSrc),
		putField:    goredis.NewScript(putFieldScriptSrc),
		deleteField: goredis.NewScript(deleteFieldScriptSrc),
		casCluster:  goredis.NewScript(casClusterScriptSrc),
		casClusters: goredis.NewScript(casClustersScriptSrc),
		casTrust:    goredis.NewScript(casTrustScriptSrc),
	}
}

// keys names everything the store writes; see the package documentation.
type keys struct {
	prefix string
}

func (k keys) input(cluster string) string  { return k.prefix + "input:" + cluster }
func (k keys) inputs() string               { return k.prefix + "inputs" }
func (k keys) output(cluster string) string { return k.prefix + "output:" + cluster }
func (k keys) clusters() string             { return k.prefix + "clusters" }
func (k keys) ca() string                   { return k.prefix + "ca" }
func (k keys) trust() string                { return k.prefix + "trust" }
func (k keys) rollouts() string             { return k.prefix + "rollouts" }
func (k keys) events() string               { return k.prefix + "events" }

// New connects to Redis and returns a store. It fails if Redis does not
// answer PING before ctx ends.
func New(ctx context.Context, o Options) (*Store, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.Client.MasterName == "" && (o.Client.IsClusterMode || len(o.Client.Addrs) > 1) {
		o.Prefix = clusterPrefix(o.Prefix)
	}
	if o.Replica == "" {
		var b [8]byte
		rand.Read(b[:])
		o.Replica = hex.EncodeToString(b[:])
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	client := o.Client
	client.ContextTimeoutEnabled = true
	s := &Store{
		client:  goredis.NewUniversalClient(&client),
		keys:    keys{prefix: o.Prefix},
		replica: o.Replica,
		logger:  o.Logger.With("store", "redis", "replica", o.Replica),
		hub:     feed.New(store.Event{Kind: store.EventResync}, store.ErrClosed),
		scripts: newScripts(),
		ready:   make(chan struct{}),
		done:    make(chan struct{}),
	}
	if err := s.client.Ping(ctx).Err(); err != nil {
		s.client.Close()
		return nil, fmt.Errorf("connect to redis %s: %w", strings.Join(o.Client.Addrs, ","), err)
	}
	return s, nil
}

// clusterPrefix returns prefix with a Redis Cluster hash tag, so that every
// key and the change feed's channel map to one hash slot: "meshrelay:"
// becomes "{meshrelay}:". A prefix that has a hash tag is kept.
//
// Redis Cluster keeps a slot on one shard, and the change feed subscribes
// on the primary serving the slot (subscribeCluster), so it breaks
// whenever that shard restarts or fails over, and every watcher resyncs,
// which lets store.WriteThrough write back what the shard lost. Keys
// spread over other shards could be lost with no resync at all.
func clusterPrefix(prefix string) string {
	if open := strings.IndexByte(prefix, '{'); open >= 0 {
		if end := strings.IndexByte(prefix[open+1:], '}'); end > 0 {
			return prefix
		}
	}
	return "{" + strings.TrimSuffix(prefix, ":") + "}:"
}

// ReplicaID returns the replica ID this store writes in events.
func (s *Store) ReplicaID() string { return s.replica }

// wrap adds context to a Redis error and maps a closed client to
// store.ErrClosed.
func (s *Store) wrap(op string, err error) error {
	if errors.Is(err, goredis.ErrClosed) {
		return fmt.Errorf("redis: %s: %w", op, store.ErrClosed)
	}
	return fmt.Errorf("redis: %s: %w", op, err)
}

func (s *Store) check() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return store.ErrClosed
	}
	return nil
}

// message is the change feed's wire form, published by the write scripts.
type message struct {
	Kind    store.EventKind `json:"k"`
	Cluster string          `json:"c"`
	Backend string          `json:"b,omitempty"`
	Version uint64          `json:"v,omitempty"`
	Deleted bool            `json:"d,omitempty"`
	Replica string          `json:"r"`
	// Delta and BaseHash are an input event's Delta: the delta in its
	// wire form (snapshotv1.Delta) and the hash of its base.
	Delta    []byte `json:"x,omitempty"`
	BaseHash []byte `json:"bh,omitempty"`
}

// message returns e's wire form, from this store's replica.
func (s *Store) message(e store.Event) string {
	m := message{Kind: e.Kind, Cluster: e.Cluster, Backend: e.Backend, Version: e.Version, Deleted: e.Deleted, Replica: s.replica}
	if e.Delta != nil {
		m.Delta, _ = proto.Marshal(snapshot.DeltaToProto(e.Delta.Delta, false))
		m.BaseHash = e.Delta.BaseHash[:]
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// event returns the event m is the wire form of. A delta that does not
// decode, or does not lead to m's version, is left out, with its error:
// the event still says the input changed, and a follower reads it whole.
func (m message) event() (store.Event, error) {
	e := store.Event{Kind: m.Kind, Cluster: m.Cluster, Backend: m.Backend, Version: m.Version, Deleted: m.Deleted, Replica: m.Replica}
	if m.Kind != store.EventInput || len(m.Delta) == 0 {
		return e, nil
	}
	if len(m.Delta) > 2*maxEventDelta {
		// The writer carries at most maxEventDelta of resources.
		return e, fmt.Errorf("input delta: %d bytes, more than a writer sends", len(m.Delta))
	}
	var p snapshotv1.Delta
	if err := proto.Unmarshal(m.Delta, &p); err != nil {
		return e, fmt.Errorf("input delta: %w", err)
	}
	d, err := snapshot.DeltaFromProto(&p)
	if err != nil {
		return e, fmt.Errorf("input delta: %w", err)
	}
	base, err := snapshot.HashFromBytes(m.BaseHash)
	if err != nil {
		return e, fmt.Errorf("input delta: %w", err)
	}
	if d.Full || d.Version != m.Version || base.IsZero() || d.Hash.IsZero() {
		return e, fmt.Errorf("input delta: not a change to version %d with both hashes", m.Version)
	}
	e.Delta = &store.InputDelta{BaseHash: base, Delta: d}
	return e, nil
}

// unlessRevokedLua returns -1 from a write script given the registry hash
// as KEYS[2] when the record of the cluster named by ARGV[n] is revoked.
// A write without KEYS[2] is not checked.
const unlessRevokedLua = `
if KEYS[2] then
  local rec = redis.call('HGET', KEYS[2], ARGV[%d])
  if rec then
    local ok, r = pcall(cjson.decode, rec)
    if ok and type(r) == 'table' and r['revoked'] == true then return -1 end
  end
end
`

// putInputScriptSrc stores an input unless the stored one is newer, or the
// same version with the same hash, and publishes the event when it stored:
// the one with the delta (ARGV[8], when not empty) if the input it
// replaced has the delta's base version and hash (ARGV[9] and ARGV[10]),
// else the plain one (ARGV[6]). Versions are zero-padded so string
// comparison is numeric. Given the registry hash as KEYS[2], it stores
// nothing and returns -1 when the cluster's (ARGV[7]) record is revoked.
var putInputScriptSrc = fmt.Sprintf(unlessRevokedLua, 7) + `
local cur = redis.call('HGET', KEYS[1], 'v')
local msg = ARGV[6]
if cur then
  if ARGV[1] < cur then return 0 end
  local h = redis.call('HGET', KEYS[1], 'h')
  if ARGV[1] == cur and h == ARGV[2] then return 0 end
  if ARGV[8] ~= '' and cur == ARGV[9] and h == ARGV[10] then msg = ARGV[8] end
end
redis.call('HSET', KEYS[1], 'v', ARGV[1], 'h', ARGV[2], 'd', ARGV[3], 'r', ARGV[4])
redis.call('PUBLISH', ARGV[5], msg)
return 1
`

// putOutputScriptSrc stores a backend's output in the cluster's output hash
// unless the same version and hash are stored. Given the registry hash as
// KEYS[2], it stores nothing and returns -1 when the cluster's (ARGV[8])
// record is revoked.
var putOutputScriptSrc = fmt.Sprintf(unlessRevokedLua, 8) + `
local b = ARGV[7]
if redis.call('HGET', KEYS[1], 'v:' .. b) == ARGV[1] and redis.call('HGET', KEYS[1], 'h:' .. b) == ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], 'v:' .. b, ARGV[1], 'h:' .. b, ARGV[2], 'd:' .. b, ARGV[3])
redis.call('PUBLISH', ARGV[5], ARGV[6])
return 1
`

// deleteKeyScriptSrc deletes a key and publishes the event if it existed.
const deleteKeyScriptSrc = `
if redis.call('DEL', KEYS[1]) == 1 then
  redis.call('PUBLISH', ARGV[1], ARGV[2])
  return 1
end
return 0
`

// putFieldScriptSrc sets a hash field and publishes the event.
const putFieldScriptSrc = `
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('PUBLISH', ARGV[3], ARGV[4])
return 1
`

// deleteFieldScriptSrc deletes a hash field and publishes the event if it
// existed.
const deleteFieldScriptSrc = `
if redis.call('HDEL', KEYS[1], ARGV[1]) == 1 then
  redis.call('PUBLISH', ARGV[2], ARGV[3])
  return 1
end
return 0
`

// casClusterScriptSrc stores a registry record only if the stored one's
// version is ARGV[2] (0 when none is stored) and publishes the event.
// Versions are compared as decimal strings; records written before versions
// existed count as version 0.
const casClusterScriptSrc = `
local cur = redis.call('HGET', KEYS[1], ARGV[1])
local v = '0'
if cur then
  local ok, rec = pcall(cjson.decode, cur)
  if ok and type(rec) == 'table' and rec['version'] then v = string.format('%d', rec['version']) end
end
if v ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('PUBLISH', ARGV[4], ARGV[5])
return 1
`

// casClustersScriptSrc is casClusterScriptSrc for many records: ARGV[1]
// is the event channel, then each record is four arguments (name, version,
// record, event). It returns, per record, 1 when it stored it and 0 when
// the stored version differed.
const casClustersScriptSrc = `
local out = {}
for i = 2, #ARGV, 4 do
  local cur = redis.call('HGET', KEYS[1], ARGV[i])
  local v = '0'
  if cur then
    local ok, rec = pcall(cjson.decode, cur)
    if ok and type(rec) == 'table' and rec['version'] then v = string.format('%d', rec['version']) end
  end
  if v == ARGV[i+1] then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i+2])
    redis.call('PUBLISH', ARGV[1], ARGV[i+3])
    out[#out+1] = 1
  else
    out[#out+1] = 0
  end
end
return out
`

// Ping implements store.Store.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.check(); err != nil {
		return err
	}
	if err := s.client.Ping(ctx).Err(); err != nil {
		return s.wrap("ping", err)
	}
	return nil
}

// Close implements store.Store: it ends the change feed, closes the Watch
// channels and the connections.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()

	s.subMu.Lock()
	started := s.subStarted
	s.subMu.Unlock()
	if started {
		s.stop()
		<-s.done
	}
	s.hub.Close()
	if err := s.client.Close(); err != nil {
		return fmt.Errorf("redis: close: %w", err)
	}
	return nil
}
