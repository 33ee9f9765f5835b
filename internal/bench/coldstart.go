package bench

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/store"
	storeredis "github.com/meshrelay/meshrelay/core/store/redis"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
)

// ColdStartReport is what [RunColdStart] measured. Times are seconds from
// the server process's start.
type ColdStartReport struct {
	Clusters int    `json:"clusters"`
	Services int    `json:"services"`
	Store    string `json:"store"`
	// FillSeconds is how long writing the fleet into Redis took.
	FillSeconds float64 `json:"fill_seconds"`
	// RedisBytes is Redis's used_memory once filled.
	RedisBytes int64 `json:"redis_bytes"`
	// LoadSeconds is the store's Load as the server logged it: Redis
	// copied into memory.
	LoadSeconds float64 `json:"load_seconds"`
	// StoreLoaded is when the server logged the store loaded, FleetLoaded
	// when it logged the fleet in its engine (after the plugins started).
	StoreLoaded float64 `json:"store_loaded"`
	FleetLoaded float64 `json:"fleet_loaded"`
	// Serving is when the admin API first answered on the relay port (the
	// listener agents' streams use), which it opens once the store and the
	// fleet are loaded: the engine holds every cluster's input and memory
	// every stored output, which an agent that connects resumes from. The
	// report checks that the server then lists every cluster's input.
	Serving float64 `json:"serving"`
	// LoadedOutputs is how many outputs the store's Load copied into
	// memory: one per cluster and plugin.
	LoadedOutputs int `json:"loaded_outputs"`
	// SafeMode is whether the server was in safe mode then, as it must be
	// with no agent connected.
	SafeMode bool `json:"safe_mode"`
	// Server and Plugins are the processes' figures at serving.
	Server      ProcStats `json:"server"`
	Plugins     ProcStats `json:"plugins"`
	LoadAverage float64   `json:"load_average"`
}

// coldStartReplica names the replica that wrote the fleet into Redis:
// a replica that is gone, so that every cluster's input waits for its
// agent, as after a restart of the whole Deployment.
const coldStartReplica = "bench-gone"

// RunColdStart measures a server's cold start from Redis: it writes
// opts.Agents clusters of opts.Services services (a registry record, the
// input of [NewCluster], and an output for each of [Plugins]) into the
// store's Redis with the store's own writes, pipelined
// (redis.Store.Batch), with no agents, then starts one `meshrelay server`
// on it and times the stages to serving. With --store memory it runs a
// redis-server of its own (opts.RedisServer).
func RunColdStart(ctx context.Context, opts Options) (*ColdStartReport, error) {
	opts.Replicas = 1
	r, cleanup, err := newRun(opts)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	if err := r.opts.Validate(); err != nil {
		return nil, err
	}
	if !strings.HasPrefix(r.opts.Store, "redis") {
		rp, err := startRedisProcess(ctx, cmp.Or(r.opts.RedisServer, "redis-server"), r.work)
		if err != nil {
			return nil, err
		}
		defer rp.stop()
		r.opts.Store = rp.URL()
		r.say("redis-server pid %d on %s", rp.pid(), rp.Addr())
	}
	if err := r.installPlugins(ctx); err != nil {
		return nil, err
	}
	rep := &ColdStartReport{Clusters: r.opts.Agents, Services: r.opts.Services, Store: redactStore(r.opts.Store)}

	r.say("writing %d clusters of %d services into redis", r.opts.Agents, r.opts.Services)
	start := time.Now()
	if err := fillColdStart(ctx, r.opts); err != nil {
		return nil, err
	}
	rep.FillSeconds = time.Since(start).Seconds()
	if rep.RedisBytes, err = redisUsedMemory(ctx, r.opts.Store); err != nil {
		return nil, err
	}
	r.say("filled in %.1fs; redis used_memory %d MiB (%.1f KiB per cluster)", rep.FillSeconds, rep.RedisBytes>>20, float64(rep.RedisBytes)/1024/float64(r.opts.Agents))

	// Info level for the load lines the report reads.
	start = time.Now()
	p, err := startServer(r.opts, r.work, r.opts.Store, 0, 1, "--log-level", "info")
	if err != nil {
		return nil, err
	}
	defer p.stop()
	if err := p.waitReady(ctx, r.opts.Timeout); err != nil {
		return nil, err
	}
	// The server listens only once the store and the fleet are loaded:
	// its first answer is the time to serving. Listing 10,000 clusters
	// takes seconds itself, so the check of what it holds is not timed.
	rep.Serving = time.Since(start).Seconds()
	rep.Server, rep.Plugins = p.sample()
	st, err := p.admin.GetStatus(p.adminCtx, &relayv1.GetStatusRequest{})
	if err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	rep.SafeMode = st.GetSafeMode()
	if n, err := listedInputs(p); err != nil {
		return nil, err
	} else if n != r.opts.Agents {
		return nil, fmt.Errorf("the server lists %d clusters with an input, want %d", n, r.opts.Agents)
	}
	rep.LoadAverage = loadAverage()
	if err := readLoadLines(p.logPath, start, rep); err != nil {
		return nil, err
	}
	if want := r.opts.Agents * len(Plugins); rep.LoadedOutputs != want {
		return nil, fmt.Errorf("the store's Load read %d outputs, want %d", rep.LoadedOutputs, want)
	}
	r.say("store loaded at %.2fs (Load %.2fs), fleet at %.2fs, serving at %.2fs; server RSS %d MiB",
		rep.StoreLoaded, rep.LoadSeconds, rep.FleetLoaded, rep.Serving, rep.Server.RSSBytes>>20)
	return rep, nil
}

// installPlugins installs the plugins and the fleet-wide policy as
// prepare does, without generating the fleet in memory.
func (r *run) installPlugins(ctx context.Context) error {
	saved := r.opts.Agents
	r.opts.Agents = 1
	defer func() { r.opts.Agents = saved }()
	return r.prepare(ctx)
}

// listedInputs counts the clusters the server lists with an input.
func listedInputs(p *serverProcess) (int, error) {
	st, err := p.admin.ListClusters(p.adminCtx, &relayv1.ListClustersRequest{})
	if err != nil {
		return 0, fmt.Errorf("list clusters: %w", err)
	}
	n := 0
	for _, c := range st.GetClusters() {
		if c.GetInputHash() != "" {
			n++
		}
	}
	return n, nil
}

// fillBatch is how many clusters a worker of fillColdStart writes in one
// round trip to Redis (redis.Store.Batch): 5 writes each.
const fillBatch = 16

// fillColdStart writes the cold start's fleet into the store's Redis,
// fillBatch clusters per round trip, through the store's write scripts.
func fillColdStart(ctx context.Context, opts Options) error {
	ropts, err := storeredis.ParseURL(opts.Store)
	if err != nil {
		return fmt.Errorf("parse --store: %w", err)
	}
	ropts.Replica, ropts.Logger = coldStartReplica, opts.Logger
	st, err := storeredis.New(ctx, ropts)
	if err != nil {
		return err
	}
	defer st.Close()
	if cs, err := st.ListClusters(ctx); err != nil {
		return err
	} else if len(cs) > 0 {
		return fmt.Errorf("the store already holds %d clusters; run against an empty store", len(cs))
	}
	outputs, err := coldStartOutputs(opts.Services)
	if err != nil {
		return err
	}
	var next atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	for range cmp.Or(opts.Concurrency, 32) {
		g.Go(func() error {
			b := st.Batch()
			for {
				first := int(next.Add(fillBatch) - fillBatch)
				if first >= opts.Agents || gctx.Err() != nil {
					return gctx.Err()
				}
				for i := first; i < min(first+fillBatch, opts.Agents); i++ {
					if err := fillCluster(b, i, opts.Services, outputs); err != nil {
						return err
					}
				}
				if err := b.Exec(gctx); err != nil {
					return err
				}
			}
		})
	}
	return g.Wait()
}

// fillCluster queues cluster i: its registry record, as a replica that
// has gone wrote it an hour ago, its input, and its output of each plugin.
func fillCluster(b *storeredis.Batch, i, services int, outputs map[string]*snapshot.Snapshot) error {
	c, err := NewCluster(i, services)
	if err != nil {
		return err
	}
	in, err := c.Snapshot()
	if err != nil {
		return err
	}
	seen := time.Now().Add(-time.Hour)
	b.PutCluster(store.Cluster{Name: c.Name, Registered: seen, LastSeen: seen, Replica: coldStartReplica, Version: 1})
	b.PutInput(c.Name, in)
	for _, backend := range Plugins {
		b.PutOutput(c.Name, backend, outputs[backend])
	}
	return nil
}

// coldStartOutputs returns the output of each of [Plugins] that every
// cluster of the cold start gets: [coldStartOutput] of a cluster of
// services, the same for every cluster since the Services are.
func coldStartOutputs(services int) (map[string]*snapshot.Snapshot, error) {
	c, err := NewCluster(0, services)
	if err != nil {
		return nil, err
	}
	outputs := map[string]*snapshot.Snapshot{}
	for _, backend := range Plugins {
		if outputs[backend], err = coldStartOutput(c, backend); err != nil {
			return nil, err
		}
	}
	return outputs, nil
}

// coldStartOutput stands in for a plugin's output for c: one object per
// Service of the cluster, renamed for the backend, which puts Redis at
// about the 13 KiB per cluster the bench's real fleet takes. The server does not
// translate at a cold start without agents, so only the size counts.
func coldStartOutput(c *Cluster, backend string) (*snapshot.Snapshot, error) {
	var rs []snapshot.Resource
	for _, idx := range c.services {
		obj := map[string]any{}
		if err := json.Unmarshal(c.resources[idx].Body, &obj); err != nil {
			return nil, fmt.Errorf("output of %s: %w", c.Name, err)
		}
		meta, _ := obj["metadata"].(map[string]any)
		meta["name"] = backend + "-" + fmt.Sprint(meta["name"])
		r, err := snapshot.FromObject(obj)
		if err != nil {
			return nil, fmt.Errorf("output of %s: %w", c.Name, err)
		}
		rs = append(rs, r)
	}
	return snapshot.New(1, rs)
}

// readLoadLines reads from the server's JSON log when it logged the store
// and the fleet loaded, relative to start.
func readLoadLines(path string, start time.Time, rep *ColdStartReport) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var line struct {
			Time  time.Time `json:"time"`
			Msg   string    `json:"msg"`
			Stats string    `json:"stats"`
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil {
			continue
		}
		switch line.Msg {
		case "fleet loaded from redis":
			rep.StoreLoaded = line.Time.Sub(start).Seconds()
			// The stats are LoadStats printed with %+v.
			if _, o, ok := strings.Cut(line.Stats, "Outputs:"); ok {
				fmt.Sscan(o, &rep.LoadedOutputs)
			}
			if _, d, ok := strings.Cut(line.Stats, "Duration:"); ok {
				if dur, err := time.ParseDuration(strings.TrimSuffix(d, "}")); err == nil {
					rep.LoadSeconds = dur.Seconds()
				}
			}
		case "fleet loaded":
			rep.FleetLoaded = line.Time.Sub(start).Seconds()
		}
	}
	if rep.StoreLoaded == 0 {
		return errors.New("the server's log has no \"fleet loaded from redis\" line: did the load fail?")
	}
	return sc.Err()
}
