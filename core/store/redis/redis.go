package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/store"
	"github.com/meshrelay/meshrelay/core/store/internal/feed"
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
	putInput, putOutput, deleteKey, putField, deleteField, casCluster *goredis.Script
}

func newScripts() scripts {
	return scripts{
		putInput:    goredis.NewScript(putInputScriptSrc),
		putOutput:   goredis.NewScript(putOutputScriptSrc),
		deleteKey:   goredis.NewScript(deleteKeyScriptSrc),
		putField:    goredis.NewScript(putFieldScriptSrc),
		deleteField: goredis.NewScript(deleteFieldScriptSrc),
		casCluster:  goredis.NewScript(casClusterScriptSrc),
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
}

func (s *Store) message(e store.Event) string {
	e.Replica = s.replica
	b, _ := json.Marshal(message(e))
	return string(b)
}

// putInputScriptSrc stores an input unless the stored one is newer, or the
// same version with the same hash, and publishes the event when it stored.
// Versions are zero-padded so string comparison is numeric.
const putInputScriptSrc = `
local cur = redis.call('HGET', KEYS[1], 'v')
if cur then
  if ARGV[1] < cur then return 0 end
  if ARGV[1] == cur and redis.call('HGET', KEYS[1], 'h') == ARGV[2] then return 0 end
end
redis.call('HSET', KEYS[1], 'v', ARGV[1], 'h', ARGV[2], 'd', ARGV[3], 'r', ARGV[4])
redis.call('PUBLISH', ARGV[5], ARGV[6])
return 1
`

// putOutputScriptSrc stores a backend's output in the cluster's output hash
// unless the same version and hash are stored.
const putOutputScriptSrc = `
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

// PutInput implements store.Inputs. The version check and the write are one
// Lua script, so racing replicas cannot store an older snapshot over a
// newer one.
func (s *Store) PutInput(ctx context.Context, cluster string, snap *snapshot.Snapshot) error {
	if err := s.check(); err != nil {
		return err
	}
	if cluster == "" {
		return errors.New("redis: put input: empty cluster name")
	}
	if snap == nil {
		return fmt.Errorf("redis: put input %q: nil snapshot", cluster)
	}
	data, err := s.codec.encode(snap)
	if err != nil {
		return fmt.Errorf("redis: put input %q: %w", cluster, err)
	}
	h := snap.Hash()
	// The index entry goes first: a crash between the two leaves an index
	// entry without a key, which List skips, never a key List cannot see.
	if err := s.client.SAdd(ctx, s.keys.inputs(), cluster).Err(); err != nil {
		return s.wrap(fmt.Sprintf("put input %q", cluster), err)
	}
	ev := s.message(store.Event{Kind: store.EventInput, Cluster: cluster, Version: snap.Version()})
	err = s.scripts.putInput.Run(ctx, s.client, []string{s.keys.input(cluster)},
		versionField(snap.Version()), h[:], data, s.replica, s.keys.events(), ev).Err()
	if err != nil {
		return s.wrap(fmt.Sprintf("put input %q", cluster), err)
	}
	return nil
}

// GetInput implements store.Inputs.
func (s *Store) GetInput(ctx context.Context, cluster string) (*snapshot.Snapshot, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	vals, err := s.client.HMGet(ctx, s.keys.input(cluster), "v", "h", "d").Result()
	if err != nil {
		return nil, s.wrap(fmt.Sprintf("get input %q", cluster), err)
	}
	snap, err := s.decodeFields(vals[0], vals[1], vals[2])
	if err != nil {
		return nil, fmt.Errorf("redis: get input %q: %w", cluster, err)
	}
	return snap, nil
}

// decodeFields decodes a snapshot from its version, hash and data fields as
// HMGET returns them; a missing field is store.ErrNotFound.
func (s *Store) decodeFields(v, h, d any) (*snapshot.Snapshot, error) {
	vs, ok1 := v.(string)
	hs, ok2 := h.(string)
	ds, ok3 := d.(string)
	if !ok1 || !ok2 || !ok3 {
		return nil, store.ErrNotFound
	}
	return s.codec.decode([]byte(ds), vs, []byte(hs))
}

// ListInputs implements store.Inputs. It reads the index, fetches every
// input in one pipeline and decodes them in parallel.
func (s *Store) ListInputs(ctx context.Context) (map[string]*snapshot.Snapshot, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	names, err := s.client.SMembers(ctx, s.keys.inputs()).Result()
	if err != nil {
		return nil, s.wrap("list inputs", err)
	}
	cmds := make([]*goredis.SliceCmd, len(names))
	_, err = s.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i, name := range names {
			cmds[i] = p.HMGet(ctx, s.keys.input(name), "v", "h", "d")
		}
		return nil
	})
	if err != nil {
		return nil, s.wrap("list inputs", err)
	}
	snaps := make([]*snapshot.Snapshot, len(names))
	errs := make([]error, len(names))
	parallel(len(names), func(i int) {
		vals := cmds[i].Val()
		snaps[i], errs[i] = s.decodeFields(vals[0], vals[1], vals[2])
	})
	out := make(map[string]*snapshot.Snapshot, len(names))
	for i, name := range names {
		switch {
		case errors.Is(errs[i], store.ErrNotFound):
			// An index entry whose input is being written or was deleted.
		case errs[i] != nil:
			return nil, fmt.Errorf("redis: list inputs: %q: %w", name, errs[i])
		default:
			out[name] = snaps[i]
		}
	}
	return out, nil
}

// parallel calls f(0..n-1) on up to GOMAXPROCS goroutines.
func parallel(n int, f func(i int)) {
	workers := min(runtime.GOMAXPROCS(0), n)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				f(i)
			}
		})
	}
	wg.Wait()
}

// DeleteInput implements store.Inputs.
func (s *Store) DeleteInput(ctx context.Context, cluster string) error {
	if err := s.check(); err != nil {
		return err
	}
	ev := s.message(store.Event{Kind: store.EventInput, Cluster: cluster, Deleted: true})
	if err := s.scripts.deleteKey.Run(ctx, s.client, []string{s.keys.input(cluster)}, s.keys.events(), ev).Err(); err != nil {
		return s.wrap(fmt.Sprintf("delete input %q", cluster), err)
	}
	if err := s.client.SRem(ctx, s.keys.inputs(), cluster).Err(); err != nil {
		return s.wrap(fmt.Sprintf("delete input %q", cluster), err)
	}
	return nil
}

// PutOutput implements store.Outputs.
func (s *Store) PutOutput(ctx context.Context, cluster, backend string, snap *snapshot.Snapshot) error {
	if err := s.check(); err != nil {
		return err
	}
	if cluster == "" || backend == "" {
		return fmt.Errorf("redis: put output %q/%q: empty cluster or backend name", cluster, backend)
	}
	if snap == nil {
		return fmt.Errorf("redis: put output %q/%q: nil snapshot", cluster, backend)
	}
	data, err := s.codec.encode(snap)
	if err != nil {
		return fmt.Errorf("redis: put output %q/%q: %w", cluster, backend, err)
	}
	h := snap.Hash()
	ev := s.message(store.Event{Kind: store.EventOutput, Cluster: cluster, Backend: backend, Version: snap.Version()})
	err = s.scripts.putOutput.Run(ctx, s.client, []string{s.keys.output(cluster)},
		versionField(snap.Version()), h[:], data, s.replica, s.keys.events(), ev, backend).Err()
	if err != nil {
		return s.wrap(fmt.Sprintf("put output %q/%q", cluster, backend), err)
	}
	return nil
}

// GetOutput implements store.Outputs.
func (s *Store) GetOutput(ctx context.Context, cluster, backend string) (*snapshot.Snapshot, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	vals, err := s.client.HMGet(ctx, s.keys.output(cluster), "v:"+backend, "h:"+backend, "d:"+backend).Result()
	if err != nil {
		return nil, s.wrap(fmt.Sprintf("get output %q/%q", cluster, backend), err)
	}
	snap, err := s.decodeFields(vals[0], vals[1], vals[2])
	if err != nil {
		return nil, fmt.Errorf("redis: get output %q/%q: %w", cluster, backend, err)
	}
	return snap, nil
}

// ListOutputs implements store.Outputs.
func (s *Store) ListOutputs(ctx context.Context, cluster string) (map[string]*snapshot.Snapshot, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	fields, err := s.client.HGetAll(ctx, s.keys.output(cluster)).Result()
	if err != nil {
		return nil, s.wrap(fmt.Sprintf("list outputs %q", cluster), err)
	}
	out := make(map[string]*snapshot.Snapshot)
	for f, v := range fields {
		backend, ok := strings.CutPrefix(f, "v:")
		if !ok {
			continue
		}
		snap, err := s.decodeFields(v, fields["h:"+backend], fields["d:"+backend])
		if err != nil {
			return nil, fmt.Errorf("redis: list outputs %q: %q: %w", cluster, backend, err)
		}
		out[backend] = snap
	}
	return out, nil
}

// DeleteOutputs implements store.Outputs.
func (s *Store) DeleteOutputs(ctx context.Context, cluster string) error {
	if err := s.check(); err != nil {
		return err
	}
	ev := s.message(store.Event{Kind: store.EventOutput, Cluster: cluster, Deleted: true})
	if err := s.scripts.deleteKey.Run(ctx, s.client, []string{s.keys.output(cluster)}, s.keys.events(), ev).Err(); err != nil {
		return s.wrap(fmt.Sprintf("delete outputs %q", cluster), err)
	}
	return nil
}

// clusterRecord is a registry record's stored JSON.
type clusterRecord struct {
	Name          string    `json:"name"`
	TokenHash     []byte    `json:"tokenHash,omitempty"`
	TokenExpires  time.Time `json:"tokenExpires"`
	Registered    time.Time `json:"registered"`
	Serials       []string  `json:"serials,omitempty"`
	Revoked       bool      `json:"revoked,omitempty"`
	RevokedAt     time.Time `json:"revokedAt"`
	LastSeen      time.Time `json:"lastSeen"`
	Replica       string    `json:"replica,omitempty"`
	TokenReusable bool      `json:"tokenReusable,omitempty"`
	SharedToken   bool      `json:"sharedToken,omitempty"`
	Version       uint64    `json:"version,omitempty"`
}

// PutCluster implements store.Registry.
func (s *Store) PutCluster(ctx context.Context, c store.Cluster) error {
	if err := s.check(); err != nil {
		return err
	}
	if c.Name == "" {
		return errors.New("redis: put cluster: empty cluster name")
	}
	b, err := json.Marshal(clusterRecord(c))
	if err != nil {
		return fmt.Errorf("redis: put cluster %q: %w", c.Name, err)
	}
	ev := s.message(store.Event{Kind: store.EventCluster, Cluster: c.Name})
	if err := s.scripts.putField.Run(ctx, s.client, []string{s.keys.clusters()}, c.Name, b, s.keys.events(), ev).Err(); err != nil {
		return s.wrap(fmt.Sprintf("put cluster %q", c.Name), err)
	}
	return nil
}

// CompareAndPutCluster implements store.Registry: the version check and the
// write are one Lua script.
func (s *Store) CompareAndPutCluster(ctx context.Context, c store.Cluster) (store.Cluster, error) {
	if err := s.check(); err != nil {
		return store.Cluster{}, err
	}
	if c.Name == "" {
		return store.Cluster{}, errors.New("redis: put cluster: empty cluster name")
	}
	next := c.Clone()
	next.Version = c.Version + 1
	b, err := json.Marshal(clusterRecord(next))
	if err != nil {
		return store.Cluster{}, fmt.Errorf("redis: put cluster %q: %w", c.Name, err)
	}
	ev := s.message(store.Event{Kind: store.EventCluster, Cluster: c.Name})
	n, err := s.scripts.casCluster.Run(ctx, s.client, []string{s.keys.clusters()},
		c.Name, strconv.FormatUint(c.Version, 10), b, s.keys.events(), ev).Int()
	if err != nil {
		return store.Cluster{}, s.wrap(fmt.Sprintf("put cluster %q", c.Name), err)
	}
	if n == 0 {
		return store.Cluster{}, fmt.Errorf("redis: put cluster %q at version %d: %w", c.Name, c.Version, store.ErrConflict)
	}
	return next, nil
}

func decodeCluster(name, data string) (store.Cluster, error) {
	var r clusterRecord
	if err := json.Unmarshal([]byte(data), &r); err != nil {
		return store.Cluster{}, fmt.Errorf("decode cluster %q: %w", name, err)
	}
	return store.Cluster(r), nil
}

// GetCluster implements store.Registry.
func (s *Store) GetCluster(ctx context.Context, name string) (store.Cluster, error) {
	if err := s.check(); err != nil {
		return store.Cluster{}, err
	}
	data, err := s.client.HGet(ctx, s.keys.clusters(), name).Result()
	if errors.Is(err, goredis.Nil) {
		return store.Cluster{}, fmt.Errorf("redis: get cluster %q: %w", name, store.ErrNotFound)
	}
	if err != nil {
		return store.Cluster{}, s.wrap(fmt.Sprintf("get cluster %q", name), err)
	}
	c, err := decodeCluster(name, data)
	if err != nil {
		return store.Cluster{}, fmt.Errorf("redis: get cluster: %w", err)
	}
	return c, nil
}

// ListClusters implements store.Registry.
func (s *Store) ListClusters(ctx context.Context) ([]store.Cluster, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	all, err := s.client.HGetAll(ctx, s.keys.clusters()).Result()
	if err != nil {
		return nil, s.wrap("list clusters", err)
	}
	out := make([]store.Cluster, 0, len(all))
	for name, data := range all {
		c, err := decodeCluster(name, data)
		if err != nil {
			return nil, fmt.Errorf("redis: list clusters: %w", err)
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b store.Cluster) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// DeleteCluster implements store.Registry.
func (s *Store) DeleteCluster(ctx context.Context, name string) error {
	if err := s.check(); err != nil {
		return err
	}
	ev := s.message(store.Event{Kind: store.EventCluster, Cluster: name, Deleted: true})
	if err := s.scripts.deleteField.Run(ctx, s.client, []string{s.keys.clusters()}, name, s.keys.events(), ev).Err(); err != nil {
		return s.wrap(fmt.Sprintf("delete cluster %q", name), err)
	}
	return nil
}

// PutCA implements store.CA.
func (s *Store) PutCA(ctx context.Context, certPEM, keyPEM []byte) error {
	if err := s.check(); err != nil {
		return err
	}
	if len(certPEM) == 0 || len(keyPEM) == 0 {
		return errors.New("redis: put ca: empty certificate or key")
	}
	if err := s.client.HSet(ctx, s.keys.ca(), "cert", certPEM, "key", keyPEM).Err(); err != nil {
		return s.wrap("put ca", err)
	}
	return nil
}

// GetCA implements store.CA.
func (s *Store) GetCA(ctx context.Context) (certPEM, keyPEM []byte, err error) {
	if err := s.check(); err != nil {
		return nil, nil, err
	}
	vals, err := s.client.HMGet(ctx, s.keys.ca(), "cert", "key").Result()
	if err != nil {
		return nil, nil, s.wrap("get ca", err)
	}
	cert, ok1 := vals[0].(string)
	key, ok2 := vals[1].(string)
	if !ok1 || !ok2 {
		return nil, nil, fmt.Errorf("redis: get ca: %w", store.ErrNotFound)
	}
	return []byte(cert), []byte(key), nil
}

// PutTrust implements store.Trust.
func (s *Store) PutTrust(ctx context.Context, name string, data []byte) error {
	if err := s.check(); err != nil {
		return err
	}
	if name == "" || len(data) == 0 {
		return errors.New("redis: put trust: empty name or data")
	}
	if err := s.client.HSet(ctx, s.keys.trust(), name, data).Err(); err != nil {
		return s.wrap(fmt.Sprintf("put trust %q", name), err)
	}
	return nil
}

// GetTrust implements store.Trust.
func (s *Store) GetTrust(ctx context.Context, name string) ([]byte, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	data, err := s.client.HGet(ctx, s.keys.trust(), name).Bytes()
	if errors.Is(err, goredis.Nil) {
		return nil, fmt.Errorf("redis: get trust %q: %w", name, store.ErrNotFound)
	}
	if err != nil {
		return nil, s.wrap(fmt.Sprintf("get trust %q", name), err)
	}
	return data, nil
}

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
