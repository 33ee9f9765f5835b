package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/meshrelay/meshrelay/core/store"
)

// lease is the key of the lease name: a string holding its holder, which
// Redis expires when the lease's time runs out.
func (k keys) lease(name string) string { return k.prefix + "lease:" + name }

// acquireLeaseScript sets the lease KEYS[1] to holder ARGV[1] for ARGV[2]
// milliseconds if nobody holds it or ARGV[1] does, and returns the holder
// and the milliseconds left.
var acquireLeaseScript = goredis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur == false or cur == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return {ARGV[1], tonumber(ARGV[2])}
end
return {cur, redis.call('PTTL', KEYS[1])}
`)

// releaseLeaseScript deletes the lease KEYS[1] if ARGV[1] holds it.
var releaseLeaseScript = goredis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`)

// AcquireLease implements store.Leases with one script, so the check and
// the write are one step for every replica. Expiry is Redis's: the lease
// ends on Redis's clock, and Expires is counted from before the call.
func (s *Store) AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (store.Lease, error) {
	if err := s.check(); err != nil {
		return store.Lease{}, err
	}
	if name == "" || holder == "" {
		return store.Lease{}, errors.New("redis: acquire lease: empty lease name or holder")
	}
	if ttl < time.Millisecond {
		return store.Lease{}, fmt.Errorf("redis: acquire lease %q: ttl %s is shorter than a millisecond", name, ttl)
	}
	start := time.Now()
	res, err := acquireLeaseScript.Run(ctx, s.client, []string{s.keys.lease(name)}, holder, strconv.FormatInt(ttl.Milliseconds(), 10)).Slice()
	if err != nil {
		return store.Lease{}, s.wrap(fmt.Sprintf("acquire lease %q", name), err)
	}
	if len(res) != 2 {
		return store.Lease{}, fmt.Errorf("redis: acquire lease %q: unexpected reply %v", name, res)
	}
	cur, _ := res[0].(string)
	left, _ := res[1].(int64)
	return store.Lease{Holder: cur, Expires: start.Add(time.Duration(max(left, 0)) * time.Millisecond)}, nil
}

// ReleaseLease implements store.Leases.
func (s *Store) ReleaseLease(ctx context.Context, name, holder string) error {
	if err := s.check(); err != nil {
		return err
	}
	if err := releaseLeaseScript.Run(ctx, s.client, []string{s.keys.lease(name)}, holder).Err(); err != nil {
		return s.wrap(fmt.Sprintf("release lease %q", name), err)
	}
	return nil
}

// presence is the key of the replicas' presence: a sorted set of replicas
// scored by when their announcement runs out (Redis's clock, in
// milliseconds); presenceAgents the hash of their agent counts, and
// presenceAddress the hash of the addresses of those that gave one (a
// hash of its own, so that a replica of an older version, which reads
// the first two only, reads them as before).
func (k keys) presence() string        { return k.prefix + "presence" }
func (k keys) presenceAgents() string  { return k.prefix + "presence-agents" }
func (k keys) presenceAddress() string { return k.prefix + "presence-address" }

// announceScript records replica ARGV[1] with ARGV[2] agents and the
// address ARGV[4] (none when empty) for ARGV[3] milliseconds of Redis's
// clock, and drops the replicas whose time ran out.
var announceScript = goredis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
if ARGV[4] == '' then
  redis.call('HDEL', KEYS[3], ARGV[1])
else
  redis.call('HSET', KEYS[3], ARGV[1], ARGV[4])
end
local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
if #gone > 0 then
  redis.call('ZREM', KEYS[1], unpack(gone))
  redis.call('HDEL', KEYS[2], unpack(gone))
  redis.call('HDEL', KEYS[3], unpack(gone))
end
return 1
`)

// replicasScript returns the replicas whose time has not run out, each
// followed by its agent count and its address, empty when none.
var replicasScript = goredis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local live = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf')
local out = {}
for _, r in ipairs(live) do
  out[#out + 1] = r
  out[#out + 1] = redis.call('HGET', KEYS[2], r) or '0'
  out[#out + 1] = redis.call('HGET', KEYS[3], r) or ''
end
return out
`)

// presenceKeys are the keys of the presence scripts.
func (s *Store) presenceKeys() []string {
	return []string{s.keys.presence(), s.keys.presenceAgents(), s.keys.presenceAddress()}
}

// Announce implements store.Presence with one script on Redis's clock.
func (s *Store) Announce(ctx context.Context, replica string, r store.Replica, ttl time.Duration) error {
	if err := s.check(); err != nil {
		return err
	}
	if err := store.CheckAnnounce(replica, r, ttl); err != nil {
		return fmt.Errorf("redis: announce: %w", err)
	}
	if err := announceScript.Run(ctx, s.client, s.presenceKeys(), replica, r.Agents, ttl.Milliseconds(), r.Address).Err(); err != nil {
		return s.wrap(fmt.Sprintf("announce replica %q", replica), err)
	}
	return nil
}

// Replicas implements store.Presence.
func (s *Store) Replicas(ctx context.Context) (map[string]store.Replica, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	res, err := replicasScript.Run(ctx, s.client, s.presenceKeys()).StringSlice()
	if err != nil {
		return nil, s.wrap("read replicas", err)
	}
	if len(res)%3 != 0 {
		return nil, fmt.Errorf("redis: read replicas: unexpected reply %v", res)
	}
	out := make(map[string]store.Replica, len(res)/3)
	for i := 0; i < len(res); i += 3 {
		n, err := strconv.Atoi(res[i+1])
		if err != nil {
			return nil, fmt.Errorf("redis: read replicas: agents of %q: %w", res[i], err)
		}
		out[res[i]] = store.Replica{Agents: n, Address: res[i+2]}
	}
	return out, nil
}
