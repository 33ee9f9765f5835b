package bench

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/meshrelay/meshrelay/core/pluginhost"
	"github.com/meshrelay/meshrelay/internal/tcpproxy"
	"golang.org/x/sync/errgroup"
)

// The kinds of fault the chaos soak injects.
const (
	// FaultRedisRestart: SIGKILL redis-server, keep it down a few
	// seconds, start it again empty.
	FaultRedisRestart = "redis-restart"
	// FaultKillReplica: SIGKILL a replica and its plugins (never replica
	// 0, which lives through the soak); its agents move; start it again
	// on the same ports a few seconds later.
	FaultKillReplica = "kill-replica"
	// FaultPauseReplica: SIGSTOP a replica and its plugins past its
	// agents' server timeout, then SIGCONT.
	FaultPauseReplica = "pause-replica"
	// FaultRestartAgent: stop an agent and start it again with its state
	// (key and certificate).
	FaultRestartAgent = "restart-agent"
	// FaultRestartAgentFresh: stop an agent, remove its state, start it
	// again: it registers again with its token.
	FaultRestartAgentFresh = "restart-agent-fresh"
	// FaultCutReplica: cut one replica's connections to Redis while the
	// others keep theirs, then restore them.
	FaultCutReplica = "cut-replica"
	// FaultCrashPlugin: SIGKILL the Istio plugin process of a replica.
	FaultCrashPlugin = "crash-plugin"
	// FaultHangPlugin: SIGSTOP the Istio plugin process of a replica past
	// the plugin call timeout; SIGCONT it if its host did not replace it.
	FaultHangPlugin = "hang-plugin"
	// FaultRedisFailover (with --redis-sentinel): SIGKILL the Sentinel
	// primary; the Sentinels promote a replica and the server replicas
	// follow it; the killed server comes back as a replica.
	FaultRedisFailover = "redis-failover"
	// FaultRedisReshard (with --redis-cluster): move the hash slot that
	// holds the store's keys to another primary of the Redis Cluster, a
	// batch of keys at a time, while the replicas use the store.
	FaultRedisReshard = "redis-reshard"
	// FaultRedisClusterKill (with --redis-cluster): SIGKILL the Redis
	// Cluster primary that holds the store's slot; its replica takes
	// over and the killed node comes back as a replica.
	FaultRedisClusterKill = "redis-cluster-kill"
	// FaultHostileAgent: one cluster's agent certificate used against a
	// replica as a compromised agent would (connections and streams up to
	// the limits, Sync streams held without a Hello, large messages
	// declared and never finished) for 15s; every other agent must stay
	// connected and a new admin connection must still work.
	FaultHostileAgent = "hostile-agent"
)

// FaultKinds are every kind of fault, the default schedule's on one
// redis-server.
var FaultKinds = []string{
	FaultRedisRestart, FaultKillReplica, FaultPauseReplica, FaultRestartAgent,
	FaultRestartAgentFresh, FaultCutReplica, FaultCrashPlugin, FaultHangPlugin,
	FaultHostileAgent,
}

// SentinelFaultKinds are the default schedule's with --redis-sentinel: a
// Sentinel failover instead of a Redis restart, and no cut (the replicas
// reach the Sentinels and servers directly, without a proxy).
var SentinelFaultKinds = []string{
	FaultRedisFailover, FaultKillReplica, FaultPauseReplica, FaultRestartAgent,
	FaultRestartAgentFresh, FaultCrashPlugin, FaultHangPlugin, FaultHostileAgent,
}

// ClusterFaultKinds are the default schedule's with --redis-cluster: a
// slot migration and a primary's kill instead of a Redis restart, and no
// cut (the replicas reach every node directly, without a proxy).
var ClusterFaultKinds = []string{
	FaultRedisReshard, FaultRedisClusterKill, FaultKillReplica, FaultPauseReplica, FaultRestartAgent,
	FaultRestartAgentFresh, FaultCrashPlugin, FaultHangPlugin, FaultHostileAgent,
}

// The soak's timing: heartbeats every chaosHeartbeat both ways, agents
// leave a silent server after chaosServerTimeout, each replica checks its
// plugins' health every chaosPluginHealth and kills one that does not
// answer within as long (stopped or frozen, busy or not), and a stopped
// plugin is given chaosHangLimit to be killed. A call may take
// chaosPluginCallTimeout: long enough for a whole-fleet translation on a
// loaded machine, since a call timeout shorter than that kills a healthy
// plugin over and over.
const (
	chaosHeartbeat         = 3 * time.Second
	chaosServerTimeout     = 10 * time.Second
	chaosPluginCallTimeout = 2 * time.Minute
	chaosPluginHealth      = 2 * time.Second
	chaosHangLimit         = 15 * time.Second
	redisDowntime          = 3 * time.Second
	replicaDowntime        = 5 * time.Second
	cutDowntime            = 15 * time.Second
)

// DefaultChaosOptions returns the soak's defaults: 3 replicas, 100 agents
// of 20 services, 2 input changes per second, a policy edit every 30s, a
// fault every 20s, a check every 5 minutes, for 10 minutes, seed 1.
func DefaultChaosOptions() Options {
	o := DefaultOptions()
	o.Chaos, o.Replicas, o.Agents, o.Services = true, 3, 100, 20
	o.Churn, o.Duration, o.PolicyChanges = 2, 10*time.Minute, 0
	o.Seed, o.FaultEvery, o.CheckEvery, o.PolicyEvery = 1, 20*time.Second, 5*time.Minute, 30*time.Second
	o.RedisServer = "redis-server"
	return o
}

// faultKinds are the kinds of fault the soak's Redis allows.
func (o *Options) faultKinds() []string {
	switch {
	case o.RedisSentinel:
		return SentinelFaultKinds
	case o.RedisCluster:
		return ClusterFaultKinds
	}
	return FaultKinds
}

func (o *Options) validateChaos() []error {
	var errs []error
	if o.Store != "memory" {
		errs = append(errs, errors.New("--chaos runs a redis-server of its own (--redis-server): leave --store out"))
	}
	if o.RedisSentinel && o.RedisCluster {
		errs = append(errs, errors.New("--redis-sentinel and --redis-cluster are two ways to run Redis: pass one"))
	}
	if o.Replicas < 2 {
		errs = append(errs, errors.New("--chaos needs --replicas 2 or more: agents move between replicas"))
	}
	if o.KillReplica {
		errs = append(errs, errors.New("--kill-replica is a measurement; --chaos kills replicas on its own schedule"))
	}
	if o.FaultEvery <= 0 {
		errs = append(errs, errors.New("--fault-every must be positive"))
	}
	if o.CheckEvery <= 0 {
		errs = append(errs, errors.New("--check-every must be positive"))
	}
	if o.PolicyEvery < 0 {
		errs = append(errs, errors.New("--policy-every must not be negative"))
	}
	if o.Duration <= 0 {
		errs = append(errs, errors.New("--duration must be positive"))
	}
	if o.ChaosRollout && o.PolicyEvery == 0 {
		errs = append(errs, errors.New("--chaos-rollout stages the policy edits: --policy-every must be positive"))
	}
	kinds := o.faultKinds()
	for _, f := range o.Faults {
		if !slices.Contains(kinds, f) {
			errs = append(errs, fmt.Errorf("--faults: unknown fault %q; the kinds are %v", f, kinds))
		}
	}
	return errs
}

// Fault is one fault the soak injected.
type Fault struct {
	// At is when it began, since the soak began, and Time the wall clock.
	At   float64   `json:"at_seconds"`
	Time time.Time `json:"time"`
	Kind string    `json:"kind"`
	// Target is the replica, agent or plugin process hit.
	Target string `json:"target"`
	// Seconds is how long until it was healed (the process back, the
	// connections restored).
	Seconds float64 `json:"lasted_seconds"`
	Note    string  `json:"note,omitempty"`
	Error   string  `json:"error,omitempty"`
}

// Check is one quiescent check: churn, policy edits and faults stopped,
// every fault healed, the checker's model compared with every agent's
// outputs until they agree or the timeout.
type Check struct {
	At    float64 `json:"at_seconds"`
	Label string  `json:"label"`
	// ConvergedSeconds is how long the agents took to agree with the
	// model; -1 when they did not within the timeout, and Differences then
	// lists the clusters that did not (DifferentClusters counts them).
	ConvergedSeconds  float64      `json:"converged_seconds"`
	DifferentClusters int          `json:"different_clusters"`
	Differences       []Difference `json:"differences,omitempty"`
	// Deletions counts the resources agents pruned since the last check;
	// WrongfulPrunes are those the model holds (a prune during safe mode
	// or from a partial view).
	Deletions          int        `json:"pruned_resources"`
	WrongfulPruneCount int        `json:"wrongful_prune_count"`
	WrongfulPrunes     []Deletion `json:"wrongful_prunes,omitempty"`
	// Backwards are outputs that went back to an older change since the
	// last check.
	BackwardsCount int         `json:"backwards_count"`
	Backwards      []Backwards `json:"backwards,omitempty"`
	// Spread is how many agents each live replica serves, as its admin
	// API says, once the check converged: rebalancing keeps it even.
	Spread map[string]int `json:"agents_per_replica,omitempty"`
	// Rollout is the fleet's rollout as the check last read it, with
	// --chaos-rollout: each cluster was judged under the revision it puts
	// the cluster on.
	Rollout string `json:"rollout,omitempty"`
	// Error says why the model could not be computed.
	Error string `json:"error,omitempty"`
}

// StormReport is the reconnect storm after a replica died with its share
// of the fleet, measured from the agents' side.
type StormReport struct {
	When        string `json:"when"`
	Killed      string `json:"killed_replica"`
	MovedAgents int    `json:"moved_agents"`
	// PeakConnectsPerSecond is the most stream registrations (hello and
	// welcome) of moved agents in one second; PeakResyncsPerSecond the
	// most full input resends.
	PeakConnectsPerSecond float64 `json:"peak_registrations_per_second"`
	PeakResyncsPerSecond  float64 `json:"peak_resyncs_per_second"`
	// ReconnectedSeconds is when every moved agent had a stream again;
	// ConvergedSeconds when, besides, the live replicas computed for every
	// cluster the outputs the model holds. -1: not within the timeout.
	ReconnectedSeconds float64 `json:"reconnected_seconds"`
	ConvergedSeconds   float64 `json:"converged_seconds"`
}

// ChaosReport is what a soak saw. It passed when every check converged
// with nothing lost, extra or backwards and no wrongful prune, every fault
// healed, and the storms converged.
type ChaosReport struct {
	Seed              uint64        `json:"seed"`
	Agents            int           `json:"agents"`
	Services          int           `json:"services_per_agent"`
	Replicas          int           `json:"replicas"`
	Scenario          string        `json:"scenario"`
	DurationSeconds   float64       `json:"duration_seconds"`
	FaultEverySeconds float64       `json:"fault_every_seconds"`
	InputChanges      int           `json:"input_changes"`
	PolicyEdits       int           `json:"policy_edits"`
	Faults            []Fault       `json:"faults"`
	Checks            []Check       `json:"checks"`
	Storms            []StormReport `json:"reconnect_storms"`
	// Rollouts is what the staged rollouts did, with --chaos-rollout.
	Rollouts    *ChaosRolloutReport `json:"rollouts,omitempty"`
	Memory      []Growth            `json:"memory_and_goroutines"`
	Passed      bool                `json:"passed"`
	Failures    []string            `json:"failures,omitempty"`
	LoadAverage float64             `json:"load_average"`
	Client      ProcStats           `json:"bench_process"`
	Replicated  []ReplicaInfo       `json:"replica_processes"`
}

// ReplicaInfo names a replica and its log.
type ReplicaInfo struct {
	ID  string `json:"id"`
	Log string `json:"log"`
}

// chaosRun is one soak's state.
type chaosRun struct {
	*run
	redis *redisProcess
	// sentinel is the Sentinel set with --redis-sentinel, cluster the
	// Redis Cluster with --redis-cluster; redis is then their first
	// server, for the memory figures.
	sentinel *sentinelSet
	cluster  *redisCluster
	proxies  []*tcpproxy.Proxy
	checker  *checker
	rng      *rand.Rand
	start    time.Time
	crep     *ChaosReport
	sampler  *sampler

	agentCtx context.Context
	agents   *errgroup.Group

	// faultMu is held while a fault is under way and while a check runs,
	// so checks see every fault healed.
	faultMu sync.Mutex
	policyK int
	// ops is the rollout operator, with --chaos-rollout; nil without.
	// final is set once the rollouts were driven to their end.
	ops   *rolloutOps
	final bool
}

// RunChaos runs the chaos soak: Options.Replicas server replicas on a
// redis-server of its own (each replica through a proxy that can cut it
// off), Options.Agents simulated agents spread over them, input changes at
// Options.Churn per second and a policy edit every Options.PolicyEvery,
// and a fault every Options.FaultEvery drawn with Options.Seed. Every
// Options.CheckEvery, and at the end, it stops the churn and the faults
// and checks every agent's outputs against the checker's model; at the
// start, and again at the end, it kills a replica — replica 1 with its
// third of the evenly spread fleet, then the replica serving the most
// agents — and measures the reconnect storm, then checks again. Memory
// and goroutines are sampled throughout.
func RunChaos(ctx context.Context, opts Options) (*ChaosReport, error) {
	opts.Chaos = true
	r, cleanup, err := startRun(ctx, opts)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	c := &chaosRun{run: r, rng: rand.New(rand.NewPCG(opts.Seed, 0x5eed)), sampler: newSampler()}
	c.crep = &ChaosReport{
		Seed: opts.Seed, Agents: opts.Agents, Services: opts.Services, Replicas: opts.Replicas,
		Scenario: opts.Scenario, FaultEverySeconds: opts.FaultEvery.Seconds(),
	}
	if opts.ChaosRollout {
		c.ops = newRolloutOps(opts.Seed)
		c.crep.Rollouts = c.ops.rep
		if err := writeFile(filepath.Join(r.work, "policies", "bench-rollout.yaml"), ChaosStrategyYAML()); err != nil {
			return nil, err
		}
	}
	stop, err := c.startFleet(ctx)
	defer stop()
	if err != nil {
		return nil, err
	}
	if err := c.soak(ctx); err != nil {
		return nil, err
	}
	c.finish()
	return c.crep, nil
}

// startFleet starts Redis, the proxies, the replicas, the checker's
// plugins and the agents, and waits for the agents' first outputs. stop
// ends them all, agents first.
func (c *chaosRun) startFleet(ctx context.Context) (stop func(), err error) {
	var stops []func()
	stop = func() {
		for _, f := range slices.Backward(stops) {
			f()
		}
	}
	var stores []string
	if c.opts.RedisSentinel {
		c.sentinel, err = startSentinelSet(ctx, cmp.Or(c.opts.RedisServer, "redis-server"), c.work)
		stops = append(stops, c.sentinel.stop)
		if err != nil {
			return stop, err
		}
		c.redis = c.sentinel.servers[0]
		c.opts.Store = c.sentinel.URL() // for the CA wait and used_memory
		c.say("redis sentinel: primary %s, replicas %s and %s; %s", c.redis.Addr(), c.sentinel.servers[1].Addr(), c.sentinel.servers[2].Addr(), c.opts.Store)
		for range c.opts.Replicas {
			stores = append(stores, c.opts.Store)
		}
	} else if c.opts.RedisCluster {
		c.cluster, err = startRedisCluster(ctx, cmp.Or(c.opts.RedisServer, "redis-server"), c.work)
		stops = append(stops, c.cluster.stop)
		if err != nil {
			return stop, err
		}
		c.redis = c.cluster.nodes[0]
		c.opts.Store = c.cluster.URL() // for the CA wait and used_memory
		c.say("redis cluster: primaries %s, %s and %s, each with a replica; %s", c.redis.Addr(), c.cluster.nodes[1].Addr(), c.cluster.nodes[2].Addr(), c.opts.Store)
		for range c.opts.Replicas {
			stores = append(stores, c.opts.Store)
		}
	} else {
		if c.redis, err = startRedisProcess(ctx, cmp.Or(c.opts.RedisServer, "redis-server"), c.work); err != nil {
			return stop, err
		}
		stops = append(stops, c.redis.stop)
		c.say("redis-server pid %d on %s", c.redis.pid(), c.redis.Addr())
		for range c.opts.Replicas {
			p, err := tcpproxy.Start(c.redis.Addr())
			if err != nil {
				return stop, err
			}
			stops = append(stops, func() { p.Close() })
			c.proxies = append(c.proxies, p)
			stores = append(stores, "redis://"+p.Addr()+"/0")
		}
		c.opts.Store = c.redis.URL() // for the CA wait and used_memory
	}
	c.opts.ServerArgs = append([]string{
		"--heartbeat", chaosHeartbeat.String(), "--plugin-call-timeout", chaosPluginCallTimeout.String(),
		"--plugin-health-interval", chaosPluginHealth.String(), "--plugin-health-timeout", chaosPluginHealth.String(),
	}, c.opts.ServerArgs...)
	if c.servers, err = startReplicas(ctx, c.opts, c.work, stores, c.say); err != nil {
		return stop, err
	}
	stops = append(stops, c.servers.stop)
	for _, p := range c.servers {
		c.crep.Replicated = append(c.crep.Replicated, ReplicaInfo{ID: p.id, Log: p.logPath})
	}
	host, err := c.checkerPlugins(ctx)
	if err != nil {
		return stop, err
	}
	stops = append(stops, func() { host.Close() })

	agentCtx, stopAgents := context.WithCancel(ctx)
	c.agentCtx, c.agents = agentCtx, &errgroup.Group{}
	stops = append(stops, func() { stopAgents(); _ = c.agents.Wait() })
	for _, s := range c.sims {
		s.audit = newOutputAudit(s.cluster.Name)
	}
	start, err := c.connect(agentCtx, c.agents)
	if err != nil {
		return stop, err
	}
	c.waitFirstOutputs(start)
	if c.ops != nil {
		if err := c.ops.dialAdmins(c.servers); err != nil {
			return stop, err
		}
		stops = append(stops, c.ops.close)
		// Before the first policy edit, which starts the first rollout.
		if err := c.labelClusters(ctx); err != nil {
			return stop, err
		}
	}
	return stop, nil
}

// checkerPlugins starts the checker's own plugin processes from the
// installed plugins and fills its model with the fleet's inputs and
// policies.
func (c *chaosRun) checkerPlugins(ctx context.Context) (*pluginhost.Host, error) {
	hopts := pluginhost.DefaultOptions()
	hopts.CallTimeout = 5 * time.Minute // the whole fleet at once
	host, err := pluginhost.New(filepath.Join(c.work, "plugins"), c.opts.Logger, hopts)
	if err != nil {
		return nil, fmt.Errorf("checker plugins: %w", err)
	}
	if err := host.Start(ctx); err != nil {
		host.Close()
		return nil, fmt.Errorf("checker plugins: %w", err)
	}
	var ts []pluginhost.Translator
	for _, p := range host.Plugins() {
		ts = append(ts, p)
	}
	c.checker = newChecker(ts, c.opts.Logger)
	for _, s := range c.sims {
		snap, err := s.cluster.Snapshot()
		if err != nil {
			host.Close()
			return nil, err
		}
		c.checker.setInput(s.cluster.Name, snap)
	}
	h, err := c.checker.setPoliciesDir(filepath.Dir(c.policy))
	if err != nil {
		host.Close()
		return nil, err
	}
	if c.ops != nil {
		c.ops.markers[h] = c.policyK
	}
	return host, nil
}

// soak checks once, measures the first storm and checks, then churns,
// edits policies and injects faults for Options.Duration with periodic
// checks, then checks, measures the last storm and checks again.
func (c *chaosRun) soak(ctx context.Context) error {
	c.start = time.Now()
	c.check(ctx, "start")
	// The first storm hits the fleet spread evenly: replica 1 serves a
	// third of it with three replicas.
	c.faultMu.Lock()
	c.crep.Storms = append(c.crep.Storms, c.storm(ctx, c.servers[1], "start: replica 1, its share of the evenly spread fleet"))
	c.faultMu.Unlock()
	c.check(ctx, "after the first storm")
	samplerDone := c.runSampler(ctx)
	faultCtx, stopFaults := context.WithCancel(ctx)
	faultsDone := make(chan struct{})
	go func() {
		defer close(faultsDone)
		c.faultLoop(faultCtx)
	}()
	err := c.churnLoop(ctx)
	stopFaults()
	<-faultsDone
	if err != nil {
		samplerDone()
		return err
	}
	c.crep.DurationSeconds = time.Since(c.start).Seconds()
	if c.ops != nil {
		if err := c.finishRollouts(ctx); err != nil {
			c.crep.Failures = append(c.crep.Failures, err.Error())
		}
		c.final = true
	}
	c.check(ctx, "end")
	c.faultMu.Lock()
	c.crep.Storms = append(c.crep.Storms, c.storm(ctx, c.busiest(), "end: the replica serving the most agents"))
	c.faultMu.Unlock()
	c.check(ctx, "after the last storm")
	samplerDone()
	return ctx.Err()
}

// churnLoop changes inputs, edits the policy and runs the periodic checks
// until Options.Duration has passed.
func (c *chaosRun) churnLoop(ctx context.Context) error {
	end := time.NewTimer(c.opts.Duration)
	defer end.Stop()
	var churn, policy <-chan time.Time // nil: never
	if c.opts.Churn > 0 {
		t := time.NewTicker(time.Duration(float64(time.Second) / c.opts.Churn))
		defer t.Stop()
		churn = t.C
	}
	if c.opts.PolicyEvery > 0 {
		t := time.NewTicker(c.opts.PolicyEvery)
		defer t.Stop()
		policy = t.C
	}
	var operator <-chan time.Time
	if c.ops != nil {
		t := time.NewTicker(operatorEvery)
		defer t.Stop()
		operator = t.C
	}
	checks := time.NewTicker(c.opts.CheckEvery)
	defer checks.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-end.C:
			return nil
		case <-churn:
			c.crep.InputChanges++
			s, snap, err := c.changeInput(c.rng, c.crep.InputChanges)
			if err != nil {
				return err
			}
			c.checker.setInput(s.cluster.Name, snap)
		case <-policy:
			if err := c.editPolicy(); err != nil {
				return err
			}
		case <-operator:
			c.operate(ctx)
		case <-checks.C:
			c.check(ctx, "periodic")
		}
	}
}

// editPolicy rewrites the fleet-wide AccessPolicy with the next marker:
// the next revision, with --chaos-rollout.
func (c *chaosRun) editPolicy() error {
	c.policyK++
	c.crep.PolicyEdits++
	if err := writeFile(c.policy, PolicyYAML("p"+strconv.Itoa(c.policyK))); err != nil {
		return err
	}
	h, err := c.checker.setPoliciesDir(filepath.Dir(c.policy))
	if c.ops != nil {
		c.ops.markers[h] = c.policyK
	}
	return err
}

// runSampler samples memory and goroutines until the returned function
// is called, every 1/120 of the soak (2s to 30s).
func (c *chaosRun) runSampler(ctx context.Context) (stop func()) {
	every := min(max(c.opts.Duration/120, 2*time.Second), 30*time.Second)
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			c.sampler.read(sctx, c.servers, c.redis)
			select {
			case <-sctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() { cancel(); <-done }
}

// faultLoop injects a fault every Options.FaultEvery from the soak's
// start until ctx ends; a fault that lasts longer delays the next.
func (c *chaosRun) faultLoop(ctx context.Context) {
	kinds := c.opts.Faults
	if len(kinds) == 0 {
		kinds = c.opts.faultKinds()
	}
	rng := rand.New(rand.NewPCG(c.opts.Seed, 0xfa17))
	begin := time.Now()
	for k := 1; ; k++ {
		next := begin.Add(time.Duration(k) * c.opts.FaultEvery)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(next)):
		}
		kind := kinds[rng.IntN(len(kinds))]
		c.faultMu.Lock()
		if ctx.Err() == nil {
			f := c.inject(ctx, rng, kind)
			c.crep.Faults = append(c.crep.Faults, f)
			c.say("fault %s on %s at %.1fs, healed after %.1fs %s%s", f.Kind, f.Target, f.At, f.Seconds, f.Note, f.Error)
		}
		c.faultMu.Unlock()
	}
}

// inject runs one fault of kind, heal included.
func (c *chaosRun) inject(ctx context.Context, rng *rand.Rand, kind string) Fault {
	at := time.Now()
	f := Fault{At: at.Sub(c.start).Seconds(), Time: at, Kind: kind}
	var err error
	switch kind {
	case FaultRedisRestart:
		f.Target = "redis"
		err = c.restartRedis(ctx)
	case FaultRedisFailover:
		old, next, writes, ferr := c.sentinel.failover(ctx)
		if old != nil {
			f.Target = "redis primary " + old.Addr()
		}
		if next != nil {
			f.Note = fmt.Sprintf("new primary %s; writes through the sentinels again %.1fs after the kill", next.Addr(), writes.Seconds())
		}
		err = ferr
	case FaultRedisReshard:
		from, to, keys, rerr := c.cluster.reshard(ctx, rng)
		if from != nil {
			f.Target = "redis primary " + from.Addr()
		}
		if to != nil {
			f.Note = fmt.Sprintf("the store's slot moved to %s with %d keys", to.Addr(), keys)
		}
		err = rerr
	case FaultRedisClusterKill:
		old, next, writes, kerr := c.cluster.killPrimary(ctx)
		if old != nil {
			f.Target = "redis primary " + old.Addr()
		}
		if next != nil {
			f.Note = fmt.Sprintf("new primary %s; writes to the store's slot again %.1fs after the kill", next.Addr(), writes.Seconds())
		}
		err = kerr
	case FaultKillReplica:
		p := c.servers[1+rng.IntN(len(c.servers)-1)]
		f.Target = p.id
		err = c.killAndRestart(ctx, p)
	case FaultPauseReplica:
		p := c.servers[rng.IntN(len(c.servers))]
		f.Target = p.id
		err = c.pause(ctx, p)
	case FaultRestartAgent, FaultRestartAgentFresh:
		s := c.sims[rng.IntN(len(c.sims))]
		f.Target = s.cluster.Name
		err = c.restartAgent(s, kind == FaultRestartAgentFresh)
	case FaultCutReplica:
		i := rng.IntN(len(c.servers))
		f.Target = c.servers[i].id
		c.proxies[i].Cut()
		sleepCtx(ctx, cutDowntime)
		c.proxies[i].Restore()
	case FaultCrashPlugin, FaultHangPlugin:
		p := c.servers[rng.IntN(len(c.servers))]
		f.Target, f.Note, err = c.pluginFault(ctx, p, kind == FaultHangPlugin)
	case FaultHostileAgent:
		f.Target, f.Note, err = c.hostile(ctx, rng)
	}
	f.Seconds = time.Since(at).Seconds()
	if err != nil {
		f.Error = err.Error()
	}
	return f
}

func (c *chaosRun) restartRedis(ctx context.Context) error {
	c.redis.kill()
	sleepCtx(ctx, redisDowntime)
	return c.redis.start(context.WithoutCancel(ctx))
}

func (c *chaosRun) killAndRestart(ctx context.Context, p *serverProcess) error {
	p.kill()
	sleepCtx(ctx, replicaDowntime)
	return p.restart(context.WithoutCancel(ctx), c.opts.Timeout)
}

// pause stops the replica and its plugins past its agents' server
// timeout, then lets them run again.
func (c *chaosRun) pause(ctx context.Context, p *serverProcess) error {
	if err := p.signal(syscall.SIGSTOP); err != nil {
		return fmt.Errorf("pause %s: %w", p.id, err)
	}
	sleepCtx(ctx, chaosServerTimeout+3*time.Second)
	return p.signal(syscall.SIGCONT)
}

// restartAgent stops sim's agent and starts a new one, after removing its
// state (key, certificate, CA bundle; the token stays) when fresh.
func (c *chaosRun) restartAgent(s *sim, fresh bool) error {
	s.stop()
	<-s.stopped
	if fresh {
		entries, err := os.ReadDir(c.agentDir(s))
		if err != nil {
			return err
		}
		for _, e := range entries {
			if e.Name() != "token" {
				if err := os.RemoveAll(filepath.Join(c.agentDir(s), e.Name())); err != nil {
					return err
				}
			}
		}
	}
	a, err := c.newAgent(s)
	if err != nil {
		return err
	}
	c.startAgent(c.agentCtx, c.agents, s, a)
	return nil
}

// pluginFault kills (crash) or stops (hang) the Istio plugin process of p:
// the simulated clusters run Istio only, so the other plugins are never
// called and a fault in them goes unnoticed. A stopped plugin gets
// chaosHangLimit to be killed by its host's health checks; one still
// there then fails the run, and is let run again.
func (c *chaosRun) pluginFault(ctx context.Context, p *serverProcess, hang bool) (target, note string, err error) {
	pid := 0
	for _, k := range children(p.pid()) {
		if cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", k)); err == nil && bytes.Contains(cmdline, []byte(pluginhost.BinaryPrefix+"istio")) {
			pid = k
		}
	}
	if pid == 0 {
		return p.id, "no Istio plugin process running", nil
	}
	target = fmt.Sprintf("%s istio plugin pid %d", p.id, pid)
	if !hang {
		return target, "", syscall.Kill(pid, syscall.SIGKILL)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return target, "", err
	}
	sleepCtx(ctx, chaosHangLimit)
	if !alive(pid) {
		return target, "killed by its host", nil
	}
	err = fmt.Errorf("not killed by its host %s after it stopped (health checks every %s); resumed", chaosHangLimit, chaosPluginHealth)
	return target, "", errors.Join(err, syscall.Kill(pid, syscall.SIGCONT))
}

// alive reports whether pid runs (a zombie does not).
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z'
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
