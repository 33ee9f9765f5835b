package testenv_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/meshrelay/meshrelay/internal/testenv"
)

func newRedisClient(t *testing.T, r *testenv.Redis) *redis.Client {
	t.Helper()
	opts, err := redis.ParseURL(r.URL())
	if err != nil {
		t.Fatalf("ParseURL(%q): %v", r.URL(), err)
	}
	if opts.Addr != r.Addr() {
		t.Fatalf("ParseURL(%q).Addr = %q, want %q", r.URL(), opts.Addr, r.Addr())
	}
	opts.MaxRetries = -1
	opts.DialTimeout = time.Second
	c := redis.NewClient(opts)
	t.Cleanup(func() { c.Close() })
	return c
}

func TestRedisPing(t *testing.T) {
	r := testenv.StartRedis(t)
	c := newRedisClient(t, r)
	got, err := c.Ping(t.Context()).Result()
	if err != nil || got != "PONG" {
		t.Fatalf("PING = %q, %v, want PONG", got, err)
	}
}

func TestRedisStopStart(t *testing.T) {
	tests := map[string]struct {
		opts     []testenv.RedisOption
		wantKept bool
	}{
		"persistent": {opts: []testenv.RedisOption{testenv.RedisPersistence()}, wantKept: true},
		"ephemeral":  {wantKept: false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := testenv.StartRedis(t, tc.opts...)
			c := newRedisClient(t, r)
			ctx := t.Context()
			if err := c.Set(ctx, "key", "value", 0).Err(); err != nil {
				t.Fatalf("SET: %v", err)
			}
			addr := r.Addr()

			r.Stop()
			if r.Running() {
				t.Fatal("Running() = true after Stop")
			}
			if err := c.Ping(ctx).Err(); err == nil {
				t.Fatal("PING after Stop succeeded, want an error")
			}

			if err := r.Start(); err != nil {
				t.Fatalf("Start: %v", err)
			}
			if r.Addr() != addr {
				t.Fatalf("Addr() after Start = %q, want %q", r.Addr(), addr)
			}
			got, err := c.Get(ctx, "key").Result()
			switch {
			case tc.wantKept && (err != nil || got != "value"):
				t.Fatalf("GET after restart = %q, %v, want %q", got, err, "value")
			case !tc.wantKept && !errors.Is(err, redis.Nil):
				t.Fatalf("GET after restart = %q, %v, want redis.Nil", got, err)
			}
		})
	}
}

func TestRedisStartWhileRunning(t *testing.T) {
	r := testenv.StartRedis(t)
	if err := r.Start(); err != nil {
		t.Fatalf("Start on a running server: %v", err)
	}
	if err := newRedisClient(t, r).Ping(context.Background()).Err(); err != nil {
		t.Fatalf("PING: %v", err)
	}
}

func TestRedisSentinel(t *testing.T) {
	s := testenv.StartRedisSentinel(t)
	ctx := t.Context()
	primary, err := s.Primary(ctx)
	if err != nil {
		t.Fatalf("Primary: %v", err)
	}
	if primary != s.Servers()[0] {
		t.Fatalf("Primary = %s, want the first server %s", primary.Addr(), s.Servers()[0].Addr())
	}
	// The Sentinels must have taken the short timing from their config.
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Sentinels()[0].Addr()})
	defer sc.Close()
	m, err := sc.Master(ctx, testenv.SentinelMaster).Result()
	if err != nil {
		t.Fatalf("SENTINEL MASTER: %v", err)
	}
	if got := m["down-after-milliseconds"]; got != "1000" {
		t.Errorf("down-after-milliseconds = %q, want 1000", got)
	}
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: testenv.SentinelMaster, SentinelAddrs: sentinelAddrs(s)})
	defer c.Close()
	if err := c.Set(ctx, "key", "value", 0).Err(); err != nil {
		t.Fatalf("SET through the sentinels: %v", err)
	}
}

func sentinelAddrs(s *testenv.RedisSentinel) []string {
	var addrs []string
	for _, r := range s.Sentinels() {
		addrs = append(addrs, r.Addr())
	}
	return addrs
}

func TestRedisCluster(t *testing.T) {
	rc := testenv.StartRedisCluster(t)
	var addrs []string
	for _, n := range rc.Nodes() {
		addrs = append(addrs, n.Addr())
	}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	defer c.Close()
	ctx := t.Context()
	// Keys in all three nodes' slots.
	for _, k := range []string{"a", "b", "c", "d", "e", "f"} {
		if err := c.Set(ctx, k, k, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
	}
	for i, n := range rc.Nodes() {
		nc := redis.NewClient(&redis.Options{Addr: n.Addr()})
		keys, err := nc.DBSize(ctx).Result()
		nc.Close()
		if err != nil || keys == 0 {
			t.Errorf("node %d holds %d keys, %v; want some", i, keys, err)
		}
	}
}
