package redis_test

import (
	"log/slog"
	"testing"

	"github.com/meshrelay/meshrelay/core/store"
	"github.com/meshrelay/meshrelay/core/store/redis"
	"github.com/meshrelay/meshrelay/core/store/storetest"
	"github.com/meshrelay/meshrelay/internal/testenv"
)

// newStoreURL connects a store to the Redis at url with the given prefix
// and replica ID and closes it when the test ends.
func newStoreURL(t testing.TB, url, prefix, replica string) *redis.Store {
	t.Helper()
	o, err := redis.ParseURL(url)
	if err != nil {
		t.Fatalf("ParseURL(%q): %v", url, err)
	}
	o.Prefix, o.Replica = prefix, replica
	o.Logger = slog.New(slog.NewTextHandler(t.Output(), nil))
	s, err := redis.New(t.Context(), o)
	if err != nil {
		t.Fatalf("redis.New(%q): %v", url, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestConformanceSentinel runs the conformance suite through three real
// Sentinels to the primary they name.
func TestConformanceSentinel(t *testing.T) {
	url := testenv.StartRedisSentinel(t).URL()
	storetest.Run(t, storetest.Shared(
		func(t *testing.T) string { return "test:" + t.Name() + ":" },
		func(t *testing.T, prefix, replica string) store.Store { return newStoreURL(t, url, prefix, replica) },
	))
}

// TestConformanceCluster runs the conformance suite on a real three-primary
// Redis Cluster, whose nodes each hold a third of the slots.
func TestConformanceCluster(t *testing.T) {
	url := testenv.StartRedisCluster(t).URL()
	storetest.Run(t, storetest.Shared(
		func(t *testing.T) string { return "test:" + t.Name() + ":" },
		func(t *testing.T, prefix, replica string) store.Store { return newStoreURL(t, url, prefix, replica) },
	))
}
