package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	storeredis "github.com/meshrelay/meshrelay/core/store/redis"
	goredis "github.com/redis/go-redis/v9"
)

// Redis Cluster timing: a primary that does not answer its peers for
// clusterNodeTimeout is failed, and its replica takes its slots over.
// Short, so that a failover takes seconds.
const clusterNodeTimeout = 2 * time.Second

// reshardBatch is how many keys one MIGRATE moves, as redis-cli --cluster
// reshard's default --cluster-pipeline; reshardBatchPause is waited
// between two batches, which stretches the time the store's keys are
// split between the two nodes (a store of thousands of clusters spends
// seconds there) so that churn meets it.
const (
	reshardBatch      = 10
	reshardBatchPause = 200 * time.Millisecond
)

// redisCluster is the Redis the soak runs with --redis-cluster: three
// primaries sharing the 16384 slots, each with one replica, every node a
// redis-server process on a loopback port.
type redisCluster struct {
	nodes []*redisProcess // primaries as started, then their replicas
	ids   map[*redisProcess]string
	bus   map[*redisProcess]int
}

// startRedisCluster starts the six nodes in cluster mode, joins them
// (CLUSTER MEET), gives the first three a third of the slots each
// (CLUSTER ADDSLOTSRANGE) and the last three to them as replicas (CLUSTER
// REPLICATE), and waits until every node reports the cluster ok and every
// replica is in sync.
func startRedisCluster(ctx context.Context, binary, work string) (*redisCluster, error) {
	rc := &redisCluster{ids: map[*redisProcess]string{}, bus: map[*redisProcess]int{}}
	for i := range 6 {
		r, err := newRedisProcess(binary, work, fmt.Sprintf("cluster-%d", i))
		if err != nil {
			return rc, err
		}
		busAddr, err := freePort()
		if err != nil {
			return rc, err
		}
		_, busPort, _ := net.SplitHostPort(busAddr)
		rc.bus[r], _ = strconv.Atoi(busPort)
		r.args = []string{"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(r.dir, "nodes.conf"),
			"--cluster-port", busPort, "--cluster-node-timeout", strconv.FormatInt(clusterNodeTimeout.Milliseconds(), 10)}
		rc.nodes = append(rc.nodes, r)
		if err := r.start(ctx); err != nil {
			return rc, err
		}
		id, err := rc.do(ctx, r, "CLUSTER", "MYID").Text()
		if err != nil {
			return rc, fmt.Errorf("start redis cluster: CLUSTER MYID: %w", err)
		}
		rc.ids[r] = id
	}
	for _, r := range rc.nodes[1:] {
		if err := rc.do(ctx, rc.nodes[0], "CLUSTER", "MEET", "127.0.0.1", r.port, rc.bus[r]).Err(); err != nil {
			return rc, fmt.Errorf("start redis cluster: CLUSTER MEET %s: %w", r.Addr(), err)
		}
	}
	const slots = 16384
	for i, r := range rc.nodes[:3] {
		if err := rc.do(ctx, r, "CLUSTER", "ADDSLOTSRANGE", i*slots/3, (i+1)*slots/3-1).Err(); err != nil {
			return rc, fmt.Errorf("start redis cluster: CLUSTER ADDSLOTSRANGE on %s: %w", r.Addr(), err)
		}
	}
	// A node must know the primary it is to replicate.
	if err := rc.wait(ctx, 30*time.Second, func(ctx context.Context) error {
		for _, r := range rc.nodes[3:] {
			info, err := rc.do(ctx, r, "CLUSTER", "INFO").Text()
			if err != nil {
				return err
			}
			if !strings.Contains(info, "cluster_known_nodes:6") {
				return fmt.Errorf("node %s does not know all six nodes yet", r.Addr())
			}
		}
		return nil
	}); err != nil {
		return rc, fmt.Errorf("start redis cluster: %w", err)
	}
	for i, r := range rc.nodes[3:] {
		if err := rc.do(ctx, r, "CLUSTER", "REPLICATE", rc.ids[rc.nodes[i]]).Err(); err != nil {
			return rc, fmt.Errorf("start redis cluster: CLUSTER REPLICATE on %s: %w", r.Addr(), err)
		}
	}
	return rc, rc.waitReady(ctx)
}

// do runs one command on node r alone, without following redirects.
func (rc *redisCluster) do(ctx context.Context, r *redisProcess, args ...any) *goredis.Cmd {
	c := goredis.NewClient(&goredis.Options{Addr: r.Addr(), MaxRetries: -1,
		DialTimeout: time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: time.Second})
	defer c.Close()
	return c.Do(ctx, args...)
}

// wait calls check until it succeeds, for at most timeout, and returns its
// last error then.
func (rc *redisCluster) wait(ctx context.Context, timeout time.Duration, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		err := check(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitReady waits until every running node reports cluster_state:ok and
// knows all six nodes, and every replica is in sync with its primary.
func (rc *redisCluster) waitReady(ctx context.Context) error {
	err := rc.wait(ctx, 30*time.Second, func(ctx context.Context) error {
		replicas := 0
		for _, r := range rc.nodes {
			if !r.isUp() {
				continue
			}
			info, err := rc.do(ctx, r, "CLUSTER", "INFO").Text()
			if err != nil {
				return fmt.Errorf("node %s: %w", r.Addr(), err)
			}
			if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_known_nodes:6") {
				return fmt.Errorf("node %s: cluster not ready", r.Addr())
			}
			repl, err := rc.do(ctx, r, "INFO", "replication").Text()
			if err != nil {
				return fmt.Errorf("node %s: %w", r.Addr(), err)
			}
			if strings.Contains(repl, "role:slave") {
				if !strings.Contains(repl, "master_link_status:up") {
					return fmt.Errorf("replica %s not in sync with its primary", r.Addr())
				}
				replicas++
			}
		}
		if replicas != 3 {
			return fmt.Errorf("%d of 3 replicas in sync", replicas)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redis cluster not ready: %w", err)
	}
	return nil
}

// URL returns the store URL with every node as a seed.
func (rc *redisCluster) URL() string {
	addrs := make([]string, len(rc.nodes))
	for i, r := range rc.nodes {
		addrs[i] = r.Addr()
	}
	return "redis+cluster://" + strings.Join(addrs, ",")
}

// storeSlot returns the hash slot of every key of the servers' store:
// their prefix is the default, which the store wraps in a hash tag.
func (rc *redisCluster) storeSlot(ctx context.Context) (int64, error) {
	key := "{" + strings.TrimSuffix(storeredis.DefaultPrefix, ":") + "}:inputs"
	return rc.do(ctx, rc.anyUp(), "CLUSTER", "KEYSLOT", key).Int64()
}

// topology returns, as a running node sees it, the primary that holds
// slot and every primary that holds slots.
func (rc *redisCluster) topology(ctx context.Context, from *redisProcess, slot int64) (owner *redisProcess, primaries []*redisProcess, err error) {
	c := goredis.NewClient(&goredis.Options{Addr: from.Addr(), MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	ranges, err := c.ClusterSlots(ctx).Result()
	if err != nil {
		return nil, nil, fmt.Errorf("CLUSTER SLOTS on %s: %w", from.Addr(), err)
	}
	byAddr := func(addr string) *redisProcess {
		for _, r := range rc.nodes {
			if r.Addr() == addr {
				return r
			}
		}
		return nil
	}
	for _, sr := range ranges {
		if len(sr.Nodes) == 0 {
			continue
		}
		p := byAddr(sr.Nodes[0].Addr)
		if p == nil {
			return nil, nil, fmt.Errorf("%s names %s, not a node of the cluster", from.Addr(), sr.Nodes[0].Addr)
		}
		if !slices.Contains(primaries, p) {
			primaries = append(primaries, p)
		}
		if int64(sr.Start) <= slot && slot <= int64(sr.End) {
			owner = p
		}
	}
	if owner == nil {
		return nil, primaries, fmt.Errorf("%s names no primary for slot %d", from.Addr(), slot)
	}
	return owner, primaries, nil
}

// agreed waits until every running node names want as the primary of
// slot.
func (rc *redisCluster) agreed(ctx context.Context, slot int64, want *redisProcess) error {
	return rc.wait(ctx, 30*time.Second, func(ctx context.Context) error {
		for _, r := range rc.nodes {
			if !r.isUp() {
				continue
			}
			got, _, err := rc.topology(ctx, r, slot)
			if err != nil {
				return err
			}
			if got != want {
				return fmt.Errorf("node %s names %s for slot %d, want %s", r.Addr(), got.Addr(), slot, want.Addr())
			}
		}
		return nil
	})
}

// reshard moves the slot that holds the store's keys from its primary to
// another primary drawn with rng, as redis-cli --cluster reshard moves
// each slot (which it cannot be told to pick): the target IMPORTING and
// the source MIGRATING the slot, the keys moved reshardBatch at a time
// with MIGRATE, then the slot given to the target on every primary
// (CLUSTER SETSLOT NODE). The servers keep using the store meanwhile,
// following ASK and MOVED redirects. It returns the two primaries and how
// many keys moved, once every node names the target.
func (rc *redisCluster) reshard(ctx context.Context, rng *rand.Rand) (from, to *redisProcess, keys int, err error) {
	// A fault once drawn runs to its end, the soak's end or not: a slot
	// left migrating has two owners at the last check.
	ctx = context.WithoutCancel(ctx)
	slot, err := rc.storeSlot(ctx)
	if err != nil {
		return nil, nil, 0, err
	}
	from, primaries, err := rc.topology(ctx, rc.anyUp(), slot)
	if err != nil {
		return nil, nil, 0, err
	}
	others := slices.DeleteFunc(primaries, func(p *redisProcess) bool { return p == from })
	if len(others) == 0 {
		return from, nil, 0, errors.New("no other primary to move the store's slot to")
	}
	to = others[rng.IntN(len(others))]
	if err := rc.do(ctx, to, "CLUSTER", "SETSLOT", slot, "IMPORTING", rc.ids[from]).Err(); err != nil {
		return from, to, 0, fmt.Errorf("CLUSTER SETSLOT %d IMPORTING on %s: %w", slot, to.Addr(), err)
	}
	if err := rc.do(ctx, from, "CLUSTER", "SETSLOT", slot, "MIGRATING", rc.ids[to]).Err(); err != nil {
		return from, to, 0, fmt.Errorf("CLUSTER SETSLOT %d MIGRATING on %s: %w", slot, from.Addr(), err)
	}
	for {
		batch, err := rc.do(ctx, from, "CLUSTER", "GETKEYSINSLOT", slot, reshardBatch).StringSlice()
		if err != nil {
			return from, to, keys, fmt.Errorf("CLUSTER GETKEYSINSLOT %d on %s: %w", slot, from.Addr(), err)
		}
		if len(batch) == 0 {
			break
		}
		args := []any{"MIGRATE", "127.0.0.1", to.port, "", 0, 5000, "KEYS"}
		for _, k := range batch {
			args = append(args, k)
		}
		if err := rc.do(ctx, from, args...).Err(); err != nil {
			return from, to, keys, fmt.Errorf("MIGRATE %d keys of slot %d from %s to %s: %w", len(batch), slot, from.Addr(), to.Addr(), err)
		}
		keys += len(batch)
		time.Sleep(reshardBatchPause)
	}
	// The target first, then the source, then the rest, as redis-cli
	// does: the slot is never without an owner that accepts it.
	order := append([]*redisProcess{to, from}, slices.DeleteFunc(slices.Clone(others), func(p *redisProcess) bool { return p == to })...)
	for _, p := range order {
		if err := rc.do(ctx, p, "CLUSTER", "SETSLOT", slot, "NODE", rc.ids[to]).Err(); err != nil {
			return from, to, keys, fmt.Errorf("CLUSTER SETSLOT %d NODE on %s: %w", slot, p.Addr(), err)
		}
	}
	return from, to, keys, rc.agreed(ctx, slot, to)
}

// anyUp returns a running node to ask.
func (rc *redisCluster) anyUp() *redisProcess {
	for _, r := range rc.nodes {
		if r.isUp() {
			return r
		}
	}
	return rc.nodes[0]
}

// killPrimary kills the primary that holds the store's slot with SIGKILL,
// waits until a client of the cluster can write to that slot again (its
// replica promoted), and starts the killed node again, which rejoins as a
// replica of the new primary. It returns the old and new primaries and how
// long after the kill writes to the store's slot succeeded again.
func (rc *redisCluster) killPrimary(ctx context.Context) (old, next *redisProcess, writes time.Duration, err error) {
	// A fault once drawn runs to its end, the soak's end or not: the
	// cluster must be whole for the last check.
	ctx = context.WithoutCancel(ctx)
	slot, err := rc.storeSlot(ctx)
	if err != nil {
		return nil, nil, 0, err
	}
	if old, _, err = rc.topology(ctx, rc.anyUp(), slot); err != nil {
		return nil, nil, 0, err
	}
	// In the store's slot, and read by nothing of the store's.
	key := "{" + strings.TrimSuffix(storeredis.DefaultPrefix, ":") + "}:bench-failover-probe"
	old.kill()
	killed := time.Now()
	limit := 15 * clusterNodeTimeout
	deadline := killed.Add(limit)
	for i := 0; ; i++ {
		// The primary a running node names for the slot takes a write
		// once it knows itself as that primary.
		var werr error
		if next, _, err = rc.topology(ctx, rc.anyUp(), slot); err == nil && next != old {
			if werr = rc.do(ctx, next, "SET", key, i).Err(); werr == nil {
				break
			}
		}
		if time.Now().After(deadline) {
			return old, nil, time.Since(killed), fmt.Errorf("no write to slot %d within %v after the kill: %v", slot, limit, cmpErr(werr, err))
		}
		time.Sleep(20 * time.Millisecond)
	}
	writes = time.Since(killed)
	if err := old.start(ctx); err != nil {
		return old, next, writes, err
	}
	return old, next, writes, rc.waitReady(ctx)
}

// stop ends every node.
func (rc *redisCluster) stop() {
	for _, r := range rc.nodes {
		if r.cmd != nil {
			r.kill()
		}
	}
}
