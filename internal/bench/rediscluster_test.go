package bench

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/meshrelay/meshrelay/internal/testenv"
	goredis "github.com/redis/go-redis/v9"
)

// TestRedisClusterFaultsRunToTheirEnd starts the soak's Redis Cluster,
// writes a key into the store's slot, and runs each Redis fault with a
// context that has already ended, as the soak's end can end it just as a
// fault is drawn: each must still run to its end, the slot moved or its
// primary replaced, with the key still readable through the cluster
// (the kill waits for the primary's replica to hold the key).
func TestRedisClusterFaultsRunToTheirEnd(t *testing.T) {
	rc, err := startRedisCluster(t.Context(), testenv.RedisServer(t), t.TempDir())
	t.Cleanup(rc.stop)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	client := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{rc.nodes[0].Addr(), rc.nodes[1].Addr(), rc.nodes[2].Addr()}})
	defer client.Close()
	const key = "{meshrelay}:inputs"
	if err := client.SAdd(ctx, key, "east", "west").Err(); err != nil {
		t.Fatal(err)
	}
	slot, err := rc.storeSlot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	holds := func(what string) {
		t.Helper()
		client.ReloadState(ctx)
		got, err := client.SMembers(ctx, key).Result()
		if err != nil || len(got) != 2 {
			t.Errorf("after %s: SMEMBERS %s = %v, %v; want east and west", what, key, got, err)
		}
	}
	ended, cancel := context.WithCancel(ctx)
	cancel()

	from, to, keys, err := rc.reshard(ended, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatalf("reshard with an ended context: %v", err)
	}
	if owner, _, err := rc.topology(ctx, rc.anyUp(), slot); err != nil || owner != to || to == from {
		t.Errorf("after the reshard from %s to %s, slot %d is on %v (%v)", from.Addr(), to.Addr(), slot, owner, err)
	}
	if keys != 1 {
		t.Errorf("the reshard moved %d keys, want 1", keys)
	}
	holds("the reshard")

	// Redis replicates asynchronously: a primary killed before its replica
	// has the moved key loses it, which the store survives (it writes back
	// what memory holds) but this test's direct read would not. Kill only
	// once the replica has everything.
	if n, err := rc.do(ctx, to, "WAIT", 1, 10_000).Int64(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 on %s: %d replicas acknowledged, %v; want 1", to.Addr(), n, err)
	}
	old, next, _, err := rc.killPrimary(ended)
	if err != nil {
		t.Fatalf("killPrimary with an ended context: %v", err)
	}
	if old != to || next == old {
		t.Errorf("killPrimary killed %v and promoted %v, want %s killed and another promoted", old, next, to.Addr())
	}
	if !old.isUp() {
		t.Errorf("the killed primary %s did not come back", old.Addr())
	}
	holds("the kill")
}
