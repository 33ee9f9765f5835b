package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// sentinelMaster is the name the soak's Sentinels monitor.
const sentinelMaster = "meshrelay"

// Sentinel timing: a primary that does not answer for sentinelDownAfter is
// down; a failover not done within sentinelFailoverTimeout is tried again.
const (
	sentinelDownAfter       = time.Second
	sentinelFailoverTimeout = 5 * time.Second
)

// sentinelSet is the Redis the soak runs with --redis-sentinel: a primary,
// two replicas of it and three Sentinels with a quorum of two, each a
// redis-server process on a loopback port.
type sentinelSet struct {
	servers   []*redisProcess
	sentinels []*redisProcess
}

// startSentinelSet starts the servers, then the Sentinels, and waits until
// every Sentinel sees both replicas and the other Sentinels, so that a
// failover can happen.
func startSentinelSet(ctx context.Context, binary, work string) (*sentinelSet, error) {
	s := &sentinelSet{}
	for i := range 3 {
		r, err := newRedisProcess(binary, work, fmt.Sprintf("redis-%d", i))
		if err != nil {
			return s, err
		}
		if i > 0 {
			r.args = []string{"--replicaof", "127.0.0.1", strconv.Itoa(s.servers[0].port)}
		}
		s.servers = append(s.servers, r)
		if err := r.start(ctx); err != nil {
			return s, err
		}
	}
	conf := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]d 2\n"+
		"sentinel down-after-milliseconds %[1]s %[3]d\n"+
		"sentinel failover-timeout %[1]s %[4]d\n"+
		"sentinel parallel-syncs %[1]s 1\n",
		sentinelMaster, s.servers[0].port, sentinelDownAfter.Milliseconds(), sentinelFailoverTimeout.Milliseconds())
	for i := range 3 {
		r, err := newRedisProcess(binary, work, fmt.Sprintf("sentinel-%d", i))
		if err != nil {
			return s, err
		}
		r.config = filepath.Join(r.dir, "sentinel.conf")
		if err := os.WriteFile(r.config, []byte(conf), 0o600); err != nil {
			return s, fmt.Errorf("start redis sentinel: %w", err)
		}
		r.args = []string{"--sentinel"}
		s.sentinels = append(s.sentinels, r)
		if err := r.start(ctx); err != nil {
			return s, err
		}
	}
	return s, s.waitReady(ctx)
}

// waitReady waits until every Sentinel knows the primary, both replicas
// and the two other Sentinels.
func (s *sentinelSet) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		err := s.ready(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redis sentinel not ready: %w", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (s *sentinelSet) ready(ctx context.Context) error {
	for _, r := range s.sentinels {
		c := goredis.NewSentinelClient(&goredis.Options{Addr: r.Addr(), MaxRetries: -1})
		replicas, rerr := c.Replicas(ctx, sentinelMaster).Result()
		sentinels, serr := c.Sentinels(ctx, sentinelMaster).Result()
		c.Close()
		if err := errors.Join(rerr, serr); err != nil {
			return err
		}
		if len(replicas) < 2 || len(sentinels) < 2 {
			return fmt.Errorf("sentinel %s sees %d replicas and %d other sentinels", r.Addr(), len(replicas), len(sentinels))
		}
	}
	return nil
}

// URL returns the store URL through the three Sentinels.
func (s *sentinelSet) URL() string {
	addrs := make([]string, len(s.sentinels))
	for i, r := range s.sentinels {
		addrs[i] = r.Addr()
	}
	return "redis+sentinel://" + strings.Join(addrs, ",") + "/" + sentinelMaster + "/0"
}

// primary returns the server the Sentinels name as the primary.
func (s *sentinelSet) primary(ctx context.Context) (*redisProcess, error) {
	var errs []error
	for _, r := range s.sentinels {
		if !r.isUp() {
			continue
		}
		c := goredis.NewSentinelClient(&goredis.Options{Addr: r.Addr(), MaxRetries: -1})
		addr, err := c.GetMasterAddrByName(ctx, sentinelMaster).Result()
		c.Close()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, sv := range s.servers {
			if net.JoinHostPort(addr[0], addr[1]) == sv.Addr() {
				return sv, nil
			}
		}
		errs = append(errs, fmt.Errorf("sentinel %s names %v, not a server of the set", r.Addr(), addr))
	}
	return nil, fmt.Errorf("no sentinel names the primary: %w", errors.Join(errs...))
}

// failover kills the primary with SIGKILL, waits until a client through
// the Sentinels can write again, and starts the killed server again as a
// replica of the new primary. It returns the old and new primaries and
// how long after the kill writes succeeded again.
func (s *sentinelSet) failover(ctx context.Context) (old, next *redisProcess, writes time.Duration, err error) {
	old, err = s.primary(ctx)
	if err != nil {
		return nil, nil, 0, err
	}
	addrs := make([]string, len(s.sentinels))
	for i, r := range s.sentinels {
		addrs[i] = r.Addr()
	}
	probe := goredis.NewFailoverClient(&goredis.FailoverOptions{MasterName: sentinelMaster, SentinelAddrs: addrs,
		MaxRetries: -1, DialTimeout: 500 * time.Millisecond, ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond})
	defer probe.Close()
	old.kill()
	killed := time.Now()
	// Once the primary is down the fault runs to its end, the soak's end
	// or not: the set must be whole for the last check.
	ctx = context.WithoutCancel(ctx)
	deadline := killed.Add(6 * sentinelFailoverTimeout)
	for i := 0; ; i++ {
		werr := probe.Set(ctx, "meshrelay-bench:failover-probe", i, 0).Err()
		if werr == nil {
			if next, err = s.primary(ctx); err == nil && next != old {
				break
			}
		}
		if time.Now().After(deadline) {
			return old, nil, time.Since(killed), fmt.Errorf("no write through the sentinels within %v after the kill: %v", 6*sentinelFailoverTimeout, cmpErr(werr, err))
		}
		time.Sleep(20 * time.Millisecond)
	}
	writes = time.Since(killed)
	old.args = []string{"--replicaof", "127.0.0.1", strconv.Itoa(next.port)}
	return old, next, writes, old.start(ctx)
}

// cmpErr returns the first non-nil error.
func cmpErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// stop ends every process of the set.
func (s *sentinelSet) stop() {
	for _, r := range append(s.sentinels, s.servers...) {
		if r.cmd != nil {
			r.kill()
		}
	}
}
