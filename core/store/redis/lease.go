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
