package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

const redisCLIHint = installHint + ", which installs the Debian package redis-tools"

// SentinelMaster is the master name StartRedisSentinel's Sentinels monitor.
const SentinelMaster = "meshrelay"

// haReadyTimeout bounds how long a Sentinel set or a Redis Cluster may take
// to agree on its topology after its servers answer PING.
const haReadyTimeout = 30 * time.Second

// Sentinel timing: a primary that does not answer for sentinelDownAfter is
// down, and a failover that has not finished within sentinelFailoverTimeout
// is tried again. Short, so that a failover test takes seconds.
const (
	sentinelDownAfter       = 1000 * time.Millisecond
	sentinelFailoverTimeout = 5 * time.Second
)

// RedisSentinel is a Sentinel set started by StartRedisSentinel: a primary,
// two replicas and three Sentinels monitoring them as SentinelMaster.
type RedisSentinel struct {
	servers   []*Redis
	sentinels []*Redis
}

// StartRedisSentinel starts a primary and two replicas of it, and three
// Sentinels with a quorum of two, each on free 127.0.0.1 ports, and waits
// until every Sentinel sees both replicas and the other two Sentinels, so
// that a failover can happen. Everything is stopped when the test ends, and
// the logs are written to the test log if it fails.
//
// If redis-server is not installed the test is skipped, or fails when
// Required.
func StartRedisSentinel(t testing.TB) *RedisSentinel {
	t.Helper()
	s := &RedisSentinel{}
	for i := range 3 {
		r := newRedis(t, fmt.Sprintf("redis-server %d", i), "redis.log")
		r.args = append(r.args, "--save", "", "--appendonly", "no", "--protected-mode", "no")
		if i > 0 {
			r.args = append(r.args, "--replicaof", "127.0.0.1", strconv.Itoa(s.servers[0].port))
		}
		r.launch(t)
		s.servers = append(s.servers, r)
	}
	conf := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]d 2\n"+
		"sentinel down-after-milliseconds %[1]s %[3]d\n"+
		"sentinel failover-timeout %[1]s %[4]d\n"+
		"sentinel parallel-syncs %[1]s 1\n",
		SentinelMaster, s.servers[0].port, sentinelDownAfter.Milliseconds(), sentinelFailoverTimeout.Milliseconds())
	for i := range 3 {
		r := newRedis(t, fmt.Sprintf("redis-sentinel %d", i), "sentinel.log")
		// Sentinel rewrites its config file with what it learns.
		r.config = filepath.Join(r.dir, "sentinel.conf")
		if err := os.WriteFile(r.config, []byte(conf), 0o644); err != nil {
			t.Fatalf("start redis sentinel: %v", err)
		}
		r.args = append(r.args, "--sentinel", "--protected-mode", "no")
		r.launch(t)
		s.sentinels = append(s.sentinels, r)
	}
	if err := s.waitReady(t.Context()); err != nil {
		t.Fatalf("start redis sentinel: %v", err)
	}
	return s
}

// waitReady waits until every Sentinel knows both replicas, linked to the
// primary, and the two other Sentinels.
func (s *RedisSentinel) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, haReadyTimeout)
	defer cancel()
	return poll(ctx, func() error {
		for _, sen := range s.sentinels {
			c := goredis.NewSentinelClient(&goredis.Options{Addr: sen.Addr(), MaxRetries: -1})
			err := sentinelReady(ctx, c, len(s.servers)-1, len(s.sentinels)-1)
			c.Close()
			if err != nil {
				return fmt.Errorf("sentinel %s: %w", sen.Addr(), err)
			}
		}
		return nil
	})
}

func sentinelReady(ctx context.Context, c *goredis.SentinelClient, replicas, sentinels int) error {
	rs, err := c.Replicas(ctx, SentinelMaster).Result()
	if err != nil {
		return err
	}
	up := 0
	for _, r := range rs {
		if r["flags"] == "slave" && r["master-link-status"] == "ok" {
			up++
		}
	}
	if up != replicas {
		return fmt.Errorf("%d of %d replicas up", up, replicas)
	}
	ss, err := c.Sentinels(ctx, SentinelMaster).Result()
	if err != nil {
		return err
	}
	if len(ss) != sentinels {
		return fmt.Errorf("knows %d of %d other sentinels", len(ss), sentinels)
	}
	return c.CkQuorum(ctx, SentinelMaster).Err()
}

// URL returns the redis+sentinel:// URL of the set, as accepted by the
// Redis store's ParseURL.
func (s *RedisSentinel) URL() string {
	addrs := make([]string, len(s.sentinels))
	for i, r := range s.sentinels {
		addrs[i] = r.Addr()
	}
	return "redis+sentinel://" + strings.Join(addrs, ",") + "/" + SentinelMaster
}

// Servers returns the data servers; the first was started as the primary.
func (s *RedisSentinel) Servers() []*Redis { return s.servers }

// Sentinels returns the Sentinels.
func (s *RedisSentinel) Sentinels() []*Redis { return s.sentinels }

// Primary returns the server a running Sentinel names as the primary.
func (s *RedisSentinel) Primary(ctx context.Context) (*Redis, error) {
	var errs []error
	for _, sen := range s.sentinels {
		if !sen.Running() {
			continue
		}
		c := goredis.NewSentinelClient(&goredis.Options{Addr: sen.Addr(), MaxRetries: -1})
		addr, err := c.GetMasterAddrByName(ctx, SentinelMaster).Result()
		c.Close()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, r := range s.servers {
			if len(addr) == 2 && r.Addr() == addr[0]+":"+addr[1] {
				return r, nil
			}
		}
		return nil, fmt.Errorf("sentinel %s names %v, not one of the servers", sen.Addr(), addr)
	}
	return nil, fmt.Errorf("ask sentinels for the primary: %w", errors.Join(errs...))
}

// RedisCluster is a Redis Cluster started by StartRedisCluster: three
// primaries without replicas, sharing the 16384 slots.
type RedisCluster struct {
	nodes []*Redis
	cli   string // redis-cli
}

// StartRedisCluster starts three redis-servers in cluster mode, each on a
// free 127.0.0.1 port and bus port, joins them with redis-cli --cluster
// create, and waits until every node reports the cluster ok. The nodes are
// stopped when the test ends, and the logs are written to the test log if
// it fails.
//
// If redis-server or redis-cli is not installed the test is skipped, or
// fails when Required.
func StartRedisCluster(t testing.TB) *RedisCluster {
	t.Helper()
	cli, err := lookPath("MESHRELAY_REDIS_CLI", "redis-cli", redisCLIHint)
	if err != nil {
		skipOrFatal(t, err)
	}
	c := &RedisCluster{cli: cli}
	args := []string{"--cluster", "create"}
	for i := range 3 {
		r := newRedis(t, fmt.Sprintf("redis-server %d", i), "redis.log")
		r.busPort = -1 // chosen by launch
		r.args = append(r.args, "--save", "", "--appendonly", "no", "--protected-mode", "no",
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(r.dir, "nodes.conf"),
			"--cluster-node-timeout", "5000")
		r.launch(t)
		c.nodes = append(c.nodes, r)
		args = append(args, r.Addr())
	}
	args = append(args, "--cluster-yes")

	logPath := filepath.Join(c.nodes[0].dir, "cluster-create.log")
	dumpLogOnFailure(t, "redis-cli --cluster create", logPath)
	ctx, cancel := context.WithTimeout(t.Context(), haReadyTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
	os.WriteFile(logPath, out, 0o644)
	if err != nil {
		t.Fatalf("start redis cluster: redis-cli %s: %v", strings.Join(args, " "), err)
	}
	if err := c.waitReady(ctx); err != nil {
		t.Fatalf("start redis cluster: %v", err)
	}
	return c
}

// waitReady waits until every node reports cluster_state:ok and knows all
// three nodes.
func (c *RedisCluster) waitReady(ctx context.Context) error {
	return poll(ctx, func() error {
		for _, n := range c.nodes {
			cl := goredis.NewClient(&goredis.Options{Addr: n.Addr(), MaxRetries: -1})
			info, err := cl.ClusterInfo(ctx).Result()
			cl.Close()
			if err != nil {
				return fmt.Errorf("node %s: %w", n.Addr(), err)
			}
			if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(len(c.nodes))) {
				return fmt.Errorf("node %s: cluster not ready", n.Addr())
			}
		}
		return nil
	})
}

// URL returns the redis+cluster:// URL of the cluster, as accepted by the
// Redis store's ParseURL.
func (c *RedisCluster) URL() string {
	addrs := make([]string, len(c.nodes))
	for i, r := range c.nodes {
		addrs[i] = r.Addr()
	}
	return "redis+cluster://" + strings.Join(addrs, ",")
}

// Nodes returns the cluster's nodes.
func (c *RedisCluster) Nodes() []*Redis { return c.nodes }

// Reshard moves every slot of the node that holds key's slot to another
// node with redis-cli --cluster reshard, as an operator emptying a node
// would, while clients keep using the cluster. It returns the two nodes
// once every node agrees that the other one holds key's slot, and how
// long redis-cli took.
func (c *RedisCluster) Reshard(t testing.TB, key string) (from, to *Redis, took time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*haReadyTimeout)
	defer cancel()
	cl := goredis.NewClient(&goredis.Options{Addr: c.nodes[0].Addr()})
	defer cl.Close()
	slot, err := cl.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		t.Fatalf("reshard: CLUSTER KEYSLOT %q: %v", key, err)
	}
	owner := func(n *Redis) (string, int, error) {
		nc := goredis.NewClient(&goredis.Options{Addr: n.Addr()})
		defer nc.Close()
		ranges, err := nc.ClusterSlots(ctx).Result()
		if err != nil {
			return "", 0, err
		}
		var addr string
		count := map[string]int{}
		for _, r := range ranges {
			if len(r.Nodes) == 0 {
				continue
			}
			count[r.Nodes[0].Addr] += int(r.End - r.Start + 1)
			if int64(r.Start) <= slot && slot <= int64(r.End) {
				addr = r.Nodes[0].Addr
			}
		}
		return addr, count[addr], nil
	}
	addr, slots, err := owner(c.nodes[0])
	if err != nil {
		t.Fatalf("reshard: CLUSTER SLOTS: %v", err)
	}
	id := func(n *Redis) string {
		nc := goredis.NewClient(&goredis.Options{Addr: n.Addr()})
		defer nc.Close()
		out, err := nc.Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			t.Fatalf("reshard: CLUSTER MYID of %s: %v", n.Addr(), err)
		}
		return out
	}
	for i, n := range c.nodes {
		if n.Addr() == addr {
			from, to = n, c.nodes[(i+1)%len(c.nodes)]
		}
	}
	if from == nil {
		t.Fatalf("reshard: slot %d of %q is on %q, not a node of the cluster", slot, key, addr)
	}
	args := []string{"--cluster", "reshard", from.Addr(), "--cluster-from", id(from), "--cluster-to", id(to),
		"--cluster-slots", strconv.Itoa(slots), "--cluster-yes"}
	start := time.Now()
	out, err := exec.CommandContext(ctx, c.cli, args...).CombinedOutput()
	took = time.Since(start)
	if err != nil {
		t.Fatalf("reshard: redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	err = poll(ctx, func() error {
		for _, n := range c.nodes {
			got, _, err := owner(n)
			if err != nil {
				return err
			}
			if got != to.Addr() {
				return fmt.Errorf("node %s says slot %d is on %s, want %s", n.Addr(), slot, got, to.Addr())
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("reshard: %v", err)
	}
	return from, to, took
}

// poll calls check until it succeeds or ctx ends, and then returns check's
// last error.
func poll(ctx context.Context, check func() error) error {
	for {
		err := check()
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
