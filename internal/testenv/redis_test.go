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
