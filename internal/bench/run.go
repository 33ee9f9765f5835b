package bench

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/agent"
	"github.com/meshrelay/meshrelay/core/pluginhost"
	storeredis "github.com/meshrelay/meshrelay/core/store/redis"
	"github.com/meshrelay/meshrelay/core/traffic"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	goredis "github.com/redis/go-redis/v9"
	"github.com/spf13/pflag"
	"golang.org/x/sync/errgroup"
)

// Plugins are the translator plugins the benchmark installs.
var Plugins = []string{"istio", "envoy", "cilium"}

// Scenarios: what the fleet's policies are and what an input change is.
const (
	// ScenarioLocal: a fleet-wide AccessPolicy; each input change rewrites
	// one Service and its Deployment in one cluster, which changes that
	// cluster's Istio authorization only.
	ScenarioLocal = "local"
	// ScenarioGlobal: the AccessPolicy and a VirtualDestination exporting
	// svc-000 of every cluster under one hostname (every cluster has an
	// east-west gateway); each input change moves an endpoint of svc-000's
	// EndpointSlice in one cluster, and every cluster's Istio outputs are
	// computed from every cluster's svc-000 endpoints.
	ScenarioGlobal = "global"
)

// Options configure a benchmark run.
type Options struct {
	// Agents is how many clusters are simulated, each with its own agent.
	Agents int
	// Services is how many Services each cluster has.
	Services int
	// Scenario is ScenarioLocal (the default) or ScenarioGlobal.
	Scenario string
	// Churn is how many input changes per second the fleet makes.
	Churn float64
	// Duration is how long inputs churn.
	Duration time.Duration
	// PolicyChanges is how many times the fleet-wide policy is edited after
	// the churn, one edit at a time.
	PolicyChanges int
	// Store is the server's --store: "memory" or a redis:// URL. A Redis
	// database must hold no clusters yet.
	Store string
	// Replicas is how many server processes share the store (Redis when
	// more than one); the agents are spread over them round-robin.
	Replicas int
	// KillReplica, with two replicas or more, kills replica 0 after the
	// churn and measures its agents' move to the others.
	KillReplica bool
	// Plugins is a directory holding the meshrelay-plugin-* binaries. When
	// empty they are taken from beside Executable, and failing that built
	// from the source tree the working directory is in.
	Plugins string
	// Executable is the meshrelay binary run as the server; the running
	// executable when empty.
	Executable string
	// Concurrency bounds the agents registering and connecting at once.
	Concurrency int
	// Timeout bounds each wait: the fleet's convergence, a policy edit
	// reaching every agent. Default: 2 minutes plus 20ms per agent.
	Timeout time.Duration
	// WorkDir keeps the servers' data, logs and plugins; a temporary
	// directory, removed afterwards, when empty.
	WorkDir string
	// ServerArgs are added to every server's command line.
	ServerArgs []string
	// IdleWindow is how long the idle cost is measured before the churn;
	// when zero, two heartbeats of the slower side (see IdleWindow).
	IdleWindow time.Duration
	// Chaos runs the chaos soak ([RunChaos]) instead of the measurement:
	// Replicas server replicas on a redis-server of its own, faults, and
	// the checker. Duration is how long it soaks.
	Chaos bool
	// Seed draws the soak's faults, their targets and its input changes:
	// the same seed, the same schedule.
	Seed uint64
	// FaultEvery is the time between two faults' starts; Faults are the
	// kinds drawn from (FaultKinds when empty).
	FaultEvery time.Duration
	Faults     []string
	// CheckEvery is the time between two quiescent checks; the soak checks
	// at its end too.
	CheckEvery time.Duration
	// PolicyEvery is the time between two edits of the fleet-wide policy
	// during the soak.
	PolicyEvery time.Duration
	// RedisServer is the redis-server binary the soak runs.
	RedisServer string
	// RedisSentinel runs the soak on a Sentinel set (a primary, two
	// replicas, three Sentinels) instead of one redis-server, with
	// redis-failover among its faults.
	RedisSentinel bool
	// RedisCluster runs the soak on a Redis Cluster (three primaries,
	// each with a replica) instead of one redis-server, with
	// redis-reshard and redis-cluster-kill among its faults.
	RedisCluster bool
	// ChaosRollout stages the soak's policy edits through a
	// RolloutStrategy and has the checker judge each cluster under the
	// revision its stage is on (chaos_rollout.go).
	ChaosRollout bool
	// TrafficEdges, when positive, runs the traffic phase after the idle
	// measure: every agent relays that many edges every TrafficWindow,
	// TrafficWindows times (6 windows of 10s when 0).
	TrafficEdges   int
	TrafficWindows int
	TrafficWindow  time.Duration
	// Rollout runs the rollout phase ([RolloutReport]) after the churn:
	// the clusters are labelled by stage, the policies hold a
	// RolloutStrategy, and the policy edit is staged; Churn is then the
	// rate of input changes during each of its windows, RolloutWindow
	// long (20s when 0).
	Rollout       bool
	RolloutWindow time.Duration
	// ColdStart measures a server's cold start from Redis instead
	// ([RunColdStart]): Agents clusters written into the store, no agents.
	ColdStart bool
	// Logger receives the agents' logs and the benchmark's progress.
	Logger *slog.Logger
	// Progress, when set, receives one line per phase.
	Progress io.Writer
}

// DefaultOptions returns the defaults: 100 agents of 50 services, the
// local scenario, 10 changes per second for 30s, three policy edits, one
// server on a memory store.
func DefaultOptions() Options {
	return Options{
		Agents: 100, Services: 50, Scenario: ScenarioLocal, Churn: 10, Duration: 30 * time.Second,
		PolicyChanges: 3, Store: "memory", Replicas: 1, Concurrency: 32,
	}
}

// Validate reports whether the options can run.
func (o *Options) Validate() error {
	var errs []error
	if o.Agents < 1 {
		errs = append(errs, errors.New("--agents must be at least 1"))
	}
	if o.Agents > 99999 {
		errs = append(errs, errors.New("--agents must be at most 99999"))
	}
	if o.Services < 1 {
		errs = append(errs, errors.New("--services must be at least 1"))
	}
	if o.Scenario != ScenarioLocal && o.Scenario != ScenarioGlobal {
		errs = append(errs, fmt.Errorf("--scenario must be %s or %s, not %q", ScenarioLocal, ScenarioGlobal, o.Scenario))
	}
	if o.Churn < 0 {
		errs = append(errs, errors.New("--churn must not be negative"))
	}
	if o.Duration < 0 {
		errs = append(errs, errors.New("--duration must not be negative"))
	}
	if o.PolicyChanges < 0 {
		errs = append(errs, errors.New("--policy-changes must not be negative"))
	}
	redis := strings.HasPrefix(o.Store, "redis")
	if o.Store != "memory" && !redis {
		errs = append(errs, fmt.Errorf("--store must be memory or a redis://, redis+sentinel:// or redis+cluster:// URL, not %q", o.Store))
	}
	errs = append(errs, o.validateRollout()...)
	if o.ChaosRollout && !o.Chaos {
		errs = append(errs, errors.New("--chaos-rollout is a mode of --chaos: pass both"))
	}
	if o.Chaos {
		return errors.Join(append(errs, o.validateChaos()...)...)
	}
	switch {
	case o.Replicas < 1:
		errs = append(errs, errors.New("--replicas must be at least 1"))
	case o.Replicas > 1 && !redis:
		errs = append(errs, fmt.Errorf("--replicas %d needs a store the replicas share: pass --store redis://… (a memory store is each server's own)", o.Replicas))
	}
	if o.KillReplica && o.Replicas < 2 {
		errs = append(errs, errors.New("--kill-replica needs --replicas 2 or more: the killed replica's agents move to another"))
	}
	return errors.Join(errs...)
}

// Latency summarizes durations in milliseconds.
type Latency struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`
}

func summarize(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	slices.Sort(ds)
	at := func(q float64) float64 {
		i := min(int(q*float64(len(ds))), len(ds)-1)
		return float64(ds[i]) / float64(time.Millisecond)
	}
	return Latency{Count: len(ds), P50: at(0.50), P99: at(0.99), Max: float64(ds[len(ds)-1]) / float64(time.Millisecond)}
}

// Report is what a run measured. Durations are in seconds. Server and
// plugin figures are totals over the replicas; Replicas has each one's.
type Report struct {
	Agents         int     `json:"agents"`
	Services       int     `json:"services_per_agent"`
	InputResources int     `json:"input_resources_per_agent"`
	Scenario       string  `json:"scenario"`
	Store          string  `json:"store"`
	Churn          float64 `json:"churn_per_second"`
	ChurnSeconds   float64 `json:"churn_seconds"`
	// Connected agents had a stream open; ConnectSeconds is how long the
	// fleet took to register (admin API, then token and CSR for a
	// certificate) and connect, RegistrationsPerSecond the rate.
	Connected           int     `json:"agents_connected"`
	ConnectSeconds      float64 `json:"connect_all_seconds"`
	FirstOutputs        int     `json:"agents_with_outputs"`
	FirstOutputsSeconds float64 `json:"first_outputs_all_seconds"`
	// SettleSeconds is how long after every agent had its first outputs
	// the replicas and their plugins went on working before they were
	// quiet (settleQuietCPU), at most settleTimeout.
	SettleSeconds          float64 `json:"settle_seconds"`
	RegistrationsPerSecond float64 `json:"registrations_per_second"`

	InputChanges   int     `json:"input_changes"`
	InputLatency   Latency `json:"input_latency"`
	InputLost      int     `json:"input_changes_not_received"`
	InputCoalesced int     `json:"input_changes_coalesced"`
	// InputWireBytes and InputPayloadBytes are per input change, received
	// by all agents together.
	InputWireBytes    float64 `json:"input_wire_bytes_per_change"`
	InputPayloadBytes float64 `json:"input_payload_bytes_per_change"`

	PolicyChanges int `json:"policy_changes"`
	// PolicyLatency is each agent's receipt of each edit; PolicyAllLatency
	// is, per edit, when the last agent received it.
	PolicyLatency    Latency `json:"policy_latency"`
	PolicyAllLatency Latency `json:"policy_all_agents_latency"`
	PolicyMissing    int     `json:"policy_receipts_missing"`
	// PolicyWireBytes and PolicyPayloadBytes are per edit and per agent.
	PolicyWireBytes    float64 `json:"policy_wire_bytes_per_agent"`
	PolicyPayloadBytes float64 `json:"policy_payload_bytes_per_agent"`
	IdleWireBytesPerS  float64 `json:"idle_wire_bytes_per_second"`
	// IdleCPUPerS is the CPU seconds per second every replica and its
	// plugins spend with the fleet connected and nothing changing
	// (heartbeats, LastSeen writes, renewals), measured before the churn.
	IdleCPUPerS float64 `json:"idle_server_and_plugins_cpu_seconds_per_second"`
	// InputCPU and PolicyCPU are the CPU seconds every replica and its
	// plugins spent per input change (during the churn) and per policy
	// edit: the cost of a change, whatever else runs on the machine.
	InputCPU  float64 `json:"server_and_plugins_cpu_seconds_per_input_change"`
	PolicyCPU float64 `json:"server_and_plugins_cpu_seconds_per_policy_edit"`
	// InputCPUNet is InputCPU without the idle CPU of the same period: the
	// work a change itself causes. At a low churn rate the idle part,
	// which grows with the fleet, dominates InputCPU.
	InputCPUNet float64 `json:"server_and_plugins_cpu_seconds_per_input_change_net_of_idle"`
	// LoadAverage is the machine's 1-minute load average at the end: other
	// work on the machine lengthens every latency.
	LoadAverage float64 `json:"load_average"`

	Server ProcStats `json:"server"`
	// Plugins sums the server's plugin processes.
	Plugins ProcStats `json:"plugins"`
	// ServerRSSBefore is the server's RSS before any agent;
	// ServerRSSConverged once every agent had its outputs.
	ServerRSSBefore    int64   `json:"server_rss_before_agents_bytes"`
	ServerRSSConverged int64   `json:"server_rss_converged_bytes"`
	ServerRSSPerAgent  float64 `json:"server_rss_bytes_per_agent"`
	PluginRSSBefore    int64   `json:"plugins_rss_before_agents_bytes"`
	PluginRSSConverged int64   `json:"plugins_rss_converged_bytes"`
	PluginRSSPerAgent  float64 `json:"plugins_rss_bytes_per_agent"`
	ServerCPUConverge  float64 `json:"server_cpu_seconds_to_converge"`
	// ServerHeapPerAgent is the servers' live Go heap per agent once every
	// agent had its outputs, less the heap before any agent: what their
	// last collection kept (go_gc_heap_live_bytes), without the garbage
	// and the collector's headroom that RSS carries, so a steadier figure
	// of what an agent costs the server; 0 when it could not be read.
	ServerHeapPerAgent float64 `json:"server_live_heap_bytes_per_agent"`
	// PluginsCPUConverge and AgentsCPUConverge are the CPU the plugins and
	// this process used while the agents registered and got their first
	// outputs, beside ServerCPUConverge. This process is the simulated
	// agents (their handshakes, keys, inputs and state files), which
	// share the machine with the servers here and would not in a fleet.
	PluginsCPUConverge float64   `json:"plugins_cpu_seconds_to_converge"`
	AgentsCPUConverge  float64   `json:"agents_cpu_seconds_to_converge"`
	RedisUsedMemory    int64     `json:"redis_used_memory_bytes,omitempty"`
	Client             ProcStats `json:"bench_process"`

	// Replicas are the figures of each server replica.
	Replicas []ReplicaReport `json:"replicas"`
	// Failover is the --kill-replica phase.
	Failover *FailoverReport `json:"failover,omitempty"`
	// Traffic is the --traffic-edges phase.
	Traffic *TrafficReport `json:"traffic,omitempty"`
	// Rollout is the --rollout phase.
	Rollout *RolloutReport `json:"rollout,omitempty"`
}

// ReplicaReport is one server replica's share of a run.
type ReplicaReport struct {
	ID string `json:"id"`
	// Agents dialled this replica first (the fleet is spread round-robin);
	// Served were connected to it once the fleet converged, as its admin
	// API reported (-1 when it could not be asked).
	Agents int `json:"agents_assigned"`
	Served int `json:"agents_served"`
	// ServedAfterKill is how many agents were connected to it once the
	// killed replica's agents settled (--kill-replica).
	ServedAfterKill int  `json:"agents_served_after_kill,omitempty"`
	Killed          bool `json:"killed,omitempty"`
	// Server is the server process; Plugins sums its plugin processes. A
	// killed replica's figures are read just before it was killed.
	Server  ProcStats `json:"server"`
	Plugins ProcStats `json:"plugins"`
}

// run is one benchmark run's state.
type run struct {
	opts    Options
	say     func(format string, args ...any)
	work    string
	sims    []*sim
	watch   *policyWatch
	policy  string // the AccessPolicy's file
	servers replicaSet
	rep     *Report
	// served and servedAfterKill count each replica's agents.
	served, servedAfterKill []int
	// heapBefore is the servers' live heap before any agent;
	// pluginsCPUBefore and agentsCPUBefore the CPU of the plugins and of
	// this process then.
	heapBefore       int64
	pluginsCPUBefore float64
	agentsCPUBefore  time.Duration
}

// startRun validates opts and prepares a run: its work directory and
// plugins. The caller must call cleanup.
func startRun(ctx context.Context, opts Options) (r *run, cleanup func(), err error) {
	if err := opts.Validate(); err != nil {
		return nil, nil, err
	}
	r, cleanup, err = newRun(opts)
	if err != nil {
		return nil, nil, err
	}
	if err := r.prepare(ctx); err != nil {
		cleanup()
		return nil, nil, err
	}
	return r, cleanup, nil
}

// Run runs one benchmark; see the package documentation.
func Run(ctx context.Context, opts Options) (*Report, error) {
	r, cleanup, err := startRun(ctx, opts)
	if err != nil {
		return nil, err
	}
	defer cleanup()

	servers, err := startReplicas(ctx, r.opts, r.work, nil, r.say)
	if err != nil {
		return nil, err
	}
	defer servers.stop()
	r.servers = servers
	server, plugins := servers.totals()
	r.rep.ServerRSSBefore, r.rep.PluginRSSBefore = server.RSSBytes, plugins.RSSBytes
	r.heapBefore, _ = r.serverHeap(ctx)
	r.pluginsCPUBefore, r.agentsCPUBefore = plugins.CPUSeconds, cpuTime()

	// The agents stop before the servers.
	agentCtx, stopAgents := context.WithCancel(ctx)
	var agents errgroup.Group
	defer func() {
		stopAgents()
		_ = agents.Wait()
	}()
	start, err := r.connect(agentCtx, &agents)
	if err != nil {
		return nil, err
	}
	r.waitFirstOutputs(start)
	r.settle()
	r.converged(ctx)
	r.measureIdle()
	if r.opts.TrafficEdges > 0 {
		if err := r.trafficPhase(ctx); err != nil {
			return nil, err
		}
	}

	if r.opts.Churn > 0 && r.opts.Duration > 0 {
		r.say("churning %.1f changes/s for %s (%s scenario)", r.opts.Churn, r.opts.Duration, r.opts.Scenario)
		if err := r.churn(ctx); err != nil {
			return nil, err
		}
		r.say("input latency p50 %.1fms p99 %.1fms max %.1fms over %d changes; %.0f wire B/change",
			r.rep.InputLatency.P50, r.rep.InputLatency.P99, r.rep.InputLatency.Max, r.rep.InputLatency.Count, r.rep.InputWireBytes)
	}
	if r.opts.KillReplica {
		if err := r.killReplica(ctx); err != nil {
			return nil, err
		}
		r.servedAfterKill = r.countServed()
	}
	if r.opts.PolicyChanges > 0 {
		if err := r.policyEdits(ctx); err != nil {
			return nil, err
		}
	}
	if r.opts.Rollout {
		if err := r.rolloutPhase(ctx); err != nil {
			return nil, err
		}
	}
	if err := r.finish(ctx); err != nil {
		return nil, err
	}
	r.say("stopping")
	return r.rep, nil
}

// newRun fills in the defaults and makes the work directory; cleanup
// removes it unless it is opts.WorkDir.
func newRun(opts Options) (*run, func(), error) {
	opts.Concurrency = cmp.Or(opts.Concurrency, 32)
	opts.Timeout = cmp.Or(opts.Timeout, 2*time.Minute+time.Duration(opts.Agents)*20*time.Millisecond)
	opts.TrafficWindows = cmp.Or(opts.TrafficWindows, 6)
	opts.TrafficWindow = cmp.Or(opts.TrafficWindow, traffic.WindowLength)
	opts.RolloutWindow = cmp.Or(opts.RolloutWindow, 20*time.Second)
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	r := &run{opts: opts}
	r.say = func(format string, args ...any) {
		if opts.Progress != nil {
			fmt.Fprintf(opts.Progress, "%s  "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
		}
	}
	if _, err := raiseFileLimit(); err != nil {
		return nil, nil, err
	}
	if r.opts.Executable == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, nil, fmt.Errorf("find the meshrelay binary: %w", err)
		}
		r.opts.Executable = exe
	}
	cleanup := func() {}
	r.work = opts.WorkDir
	if r.work == "" {
		dir, err := os.MkdirTemp("", "meshrelay-bench-")
		if err != nil {
			return nil, nil, fmt.Errorf("create work directory: %w", err)
		}
		cleanup = func() { os.RemoveAll(dir) }
		r.work = dir
	}
	dirs := []string{"plugins", "policies", "agents"}
	for i := range opts.Replicas {
		_, dir := replicaNames(i, opts.Replicas)
		dirs = append(dirs, dir)
	}
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(r.work, d), 0o700); err != nil {
			cleanup()
			return nil, nil, fmt.Errorf("create work directory: %w", err)
		}
	}
	return r, cleanup, nil
}

// prepare installs the plugins, writes the policies and generates the
// fleet's inputs, before the clock starts.
func (r *run) prepare(ctx context.Context) error {
	bins, err := pluginBinaries(ctx, r.opts, r.work)
	if err != nil {
		return err
	}
	for _, name := range Plugins {
		if _, err := pluginhost.InstallContext(ctx, filepath.Join(r.work, "plugins"), bins[name], "", r.opts.Logger); err != nil {
			return fmt.Errorf("install plugin %s: %w", name, err)
		}
	}
	r.policy = filepath.Join(r.work, "policies", "bench-access.yaml")
	if err := writeFile(r.policy, PolicyYAML("p0")); err != nil {
		return err
	}
	if r.opts.Rollout {
		if err := writeFile(filepath.Join(r.work, "policies", "bench-rollout.yaml"), RolloutStrategyYAML()); err != nil {
			return err
		}
	}
	newCluster := NewCluster
	if r.opts.Scenario == ScenarioGlobal {
		if err := writeFile(filepath.Join(r.work, "policies", "bench-global.yaml"), GlobalPolicyYAML()); err != nil {
			return err
		}
		newCluster = NewGlobalCluster
	}

	r.say("generating %d clusters of %d services", r.opts.Agents, r.opts.Services)
	r.sims = make([]*sim, r.opts.Agents)
	r.watch = newPolicyWatch(r.opts.Agents)
	for i := range r.sims {
		c, err := newCluster(i, r.opts.Services)
		if err != nil {
			return err
		}
		snap, err := c.Snapshot()
		if err != nil {
			return err
		}
		r.sims[i] = &sim{index: i, replica: i % r.opts.Replicas, cluster: c, src: newSource(snap), policy: r.watch}
	}
	r.rep = &Report{Agents: r.opts.Agents, Services: r.opts.Services, Scenario: r.opts.Scenario,
		Store: redactStore(r.opts.Store), Churn: r.opts.Churn, InputResources: len(r.sims[0].cluster.resources)}
	return nil
}

// connect registers every agent through its replica's admin API and starts
// it, at most opts.Concurrency at once, and returns when it started.
func (r *run) connect(agentCtx context.Context, agents *errgroup.Group) (time.Time, error) {
	r.say("registering and connecting %d agents", r.opts.Agents)
	start := time.Now()
	regs := make(chan int)
	var regErr error
	var regMu sync.Mutex
	var regWG sync.WaitGroup
	for range r.opts.Concurrency {
		regWG.Add(1)
		go func() {
			defer regWG.Done()
			for i := range regs {
				a, err := r.register(r.sims[i])
				if err != nil {
					regMu.Lock()
					regErr = cmp.Or(regErr, err)
					regMu.Unlock()
					continue
				}
				r.startAgent(agentCtx, agents, r.sims[i], a)
				// Start the next agent once this one is connected, so at
				// most Concurrency handshakes are in flight.
				for a.Stats.Connects.Load() == 0 && agentCtx.Err() == nil && time.Since(start) < r.opts.Timeout {
					time.Sleep(5 * time.Millisecond)
				}
			}
		}()
	}
	for i := range r.sims {
		regs <- i
	}
	close(regs)
	regWG.Wait()
	registered := time.Since(start)
	if regErr != nil {
		return start, regErr
	}
	rep := r.rep
	rep.Connected = count(r.sims, func(s *sim) bool { return s.agent.Stats.Connects.Load() > 0 })
	rep.ConnectSeconds = registered.Seconds()
	rep.RegistrationsPerSecond = float64(rep.Connected) / registered.Seconds()
	r.say("%d agents connected in %s", rep.Connected, registered.Round(time.Millisecond))
	return start, nil
}

// waitFirstOutputs waits until every agent has outputs.
func (r *run) waitFirstOutputs(start time.Time) {
	deadline := start.Add(r.opts.Timeout)
	for time.Now().Before(deadline) && count(r.sims, func(s *sim) bool { return s.first.Load() != 0 }) < len(r.sims) {
		time.Sleep(20 * time.Millisecond)
	}
	var last int64
	for _, s := range r.sims {
		if f := s.first.Load(); f != 0 {
			r.rep.FirstOutputs++
			last = max(last, f)
		}
	}
	if last != 0 {
		r.rep.FirstOutputsSeconds = time.Unix(0, last).Sub(start).Seconds()
	}
	r.say("%d agents have their first outputs after %.3fs", r.rep.FirstOutputs, r.rep.FirstOutputsSeconds)
}

// converged lets the fleet settle, then takes the converged figures and
// counts each replica's agents.
func (r *run) converged(ctx context.Context) {
	time.Sleep(2 * time.Second)
	rep := r.rep
	server, plugins := r.servers.totals()
	rep.ServerRSSConverged, rep.ServerCPUConverge = server.RSSBytes, server.CPUSeconds
	rep.PluginsCPUConverge = plugins.CPUSeconds - r.pluginsCPUBefore
	rep.AgentsCPUConverge = (cpuTime() - r.agentsCPUBefore).Seconds()
	if heap, err := r.serverHeap(ctx); err == nil && r.heapBefore > 0 {
		rep.ServerHeapPerAgent = float64(heap-r.heapBefore) / float64(r.opts.Agents)
	}
	rep.ServerRSSPerAgent = float64(server.RSSBytes-rep.ServerRSSBefore) / float64(r.opts.Agents)
	rep.PluginRSSConverged = plugins.RSSBytes
	rep.PluginRSSPerAgent = float64(plugins.RSSBytes-rep.PluginRSSBefore) / float64(r.opts.Agents)
	r.served = r.countServed()
}

// The servers are quiet once they use less than settleQuietCPU cores over
// settleWindow; the bench waits at most settleTimeout for it.
const (
	settleQuietCPU = 0.1
	settleWindow   = 2 * time.Second
	settleTimeout  = 2 * time.Minute
)

// settle waits until the replicas and their plugins are quiet after every
// agent had its first outputs: work that follows delivery, such as a
// derivation of every cluster's discovery catalog when something reads
// it (seconds at 10,000 agents), must not count in the idle window.
func (r *run) settle() {
	start := time.Now()
	prev := r.servers.cpu()
	for time.Since(start) < settleTimeout {
		time.Sleep(settleWindow)
		cpu := r.servers.cpu()
		if (cpu-prev)/settleWindow.Seconds() < settleQuietCPU {
			break
		}
		prev = cpu
	}
	r.rep.SettleSeconds = time.Since(start).Seconds()
	r.say("servers quiet %.1fs after the first outputs", r.rep.SettleSeconds)
}

// countServed asks each live replica how many agents it serves; -1 when it
// could not tell, 0 for a killed one.
func (r *run) countServed() []int {
	out := make([]int, len(r.servers))
	for i, p := range r.servers {
		if p.isKilled() {
			continue
		}
		n, err := p.served()
		if err != nil {
			r.opts.Logger.Warn("count the agents of a replica", "replica", p.id, "error", err)
			n = -1
		}
		out[i] = n
	}
	if len(r.servers) > 1 {
		r.say("agents per replica: %v", out)
	}
	return out
}

// measureIdle measures the idle traffic (heartbeats) over
// Options.IdleWindow.
func (r *run) measureIdle() {
	ports := r.servers.ports()
	idle := r.opts.IdleWindow
	if idle <= 0 {
		idle = IdleWindow(r.agentOptions(), r.opts.ServerArgs)
	}
	b0, cpu0 := receivedFrom(ports...), r.servers.cpu()
	time.Sleep(idle)
	r.rep.IdleWireBytesPerS = float64(receivedFrom(ports...)-b0) / idle.Seconds()
	r.rep.IdleCPUPerS = (r.servers.cpu() - cpu0) / idle.Seconds()
	r.say("idle traffic %.0f B/s, idle CPU %.3f s/s", r.rep.IdleWireBytesPerS, r.rep.IdleCPUPerS)
}

// churn makes input changes at opts.Churn per second for opts.Duration and
// waits for them to arrive.
func (r *run) churn(ctx context.Context) error {
	opts, sims, rep := r.opts, r.sims, r.rep
	ports := r.servers.ports()
	cpu0 := r.servers.cpu()
	rng := rand.New(rand.NewPCG(uint64(opts.Agents), uint64(opts.Services)))
	payload0 := sumPayload(sims)
	wire0 := receivedFrom(ports...)
	start := time.Now()
	tick := time.NewTicker(time.Duration(float64(time.Second) / opts.Churn))
	defer tick.Stop()
	seq := 0
	for time.Since(start) < opts.Duration {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		seq++
		if err := r.change(rng, seq); err != nil {
			return err
		}
	}
	changed := time.Since(start)
	// Wait for the last changes to arrive.
	for wait := time.Now().Add(opts.Timeout); time.Now().Before(wait); time.Sleep(20 * time.Millisecond) {
		if sumFunc(sims, (*sim).outstanding) == 0 {
			break
		}
	}
	elapsed := time.Since(start)
	wire := float64(receivedFrom(ports...)-wire0) - rep.IdleWireBytesPerS*elapsed.Seconds()
	var lat []time.Duration
	for _, s := range sims {
		s.mu.Lock()
		lat = append(lat, s.inputLat...)
		rep.InputLost += len(s.waiting)
		rep.InputCoalesced += s.missed
		s.mu.Unlock()
	}
	rep.ChurnSeconds = changed.Seconds()
	rep.InputChanges = seq
	if seq > 0 {
		cpu := r.servers.cpu() - cpu0
		rep.InputCPU = cpu / float64(seq)
		rep.InputCPUNet = max(cpu-rep.IdleCPUPerS*elapsed.Seconds(), 0) / float64(seq)
	}
	rep.InputLatency = summarize(lat)
	if seq > 0 {
		rep.InputWireBytes = max(wire, 0) / float64(seq)
		rep.InputPayloadBytes = float64(sumPayload(sims)-payload0) / float64(seq)
	}
	return nil
}

// change makes the seq-th input change, in a random cluster, and expects
// its marker in that cluster's outputs. In the local scenario it rewrites
// a random Service and its Deployment with the marker "m<seq>x"; in the
// global one it gives svc-000's first endpoint the marker address
// EndpointAddress(seq).
func (r *run) change(rng *rand.Rand, seq int) error {
	_, _, err := r.changeInput(rng, seq)
	return err
}

// changeInput is change, returning the cluster changed and its new inputs.
func (r *run) changeInput(rng *rand.Rand, seq int) (*sim, *snapshot.Snapshot, error) {
	s := r.sims[rng.IntN(len(r.sims))]
	var (
		j      int
		marker string
		snap   *snapshot.Snapshot
		err    error
	)
	switch r.opts.Scenario {
	case ScenarioGlobal:
		j, marker = 0, EndpointAddress(seq)
		snap, err = s.cluster.ChangeEndpoint(j, marker)
	default:
		j, marker = rng.IntN(s.cluster.Services()), "m"+strconv.Itoa(seq)+"x"
		snap, err = s.cluster.Change(j, marker)
	}
	if err != nil {
		return nil, nil, err
	}
	s.expect(j, marker, time.Now())
	s.src.set(snap)
	return s, snap, nil
}

// policyEdits edits the fleet-wide policy opts.PolicyChanges times, each
// time waiting until every agent received the edit.
func (r *run) policyEdits(ctx context.Context) error {
	opts, sims, rep, watch := r.opts, r.sims, r.rep, r.watch
	ports := r.servers.ports()
	cpu0 := r.servers.cpu()
	var all, each []time.Duration
	var wire, payload float64
	for k := 1; k <= opts.PolicyChanges; k++ {
		marker := "p" + strconv.Itoa(k)
		payload0, wire0 := sumPayload(sims), receivedFrom(ports...)
		at := time.Now()
		watch.start(`"/`+marker+`/*"`, at)
		if err := writeFile(r.policy, PolicyYAML(marker)); err != nil {
			return err
		}
		deadline := at.Add(opts.Timeout)
		for {
			n, _ := watch.done()
			if n == len(sims) || time.Now().After(deadline) {
				break
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
		n, lat := watch.done()
		watch.stop()
		// Let acks and stragglers settle before counting bytes.
		time.Sleep(500 * time.Millisecond)
		elapsed := time.Since(at)
		wire += max(float64(receivedFrom(ports...)-wire0)-rep.IdleWireBytesPerS*elapsed.Seconds(), 0)
		payload += float64(sumPayload(sims) - payload0)
		each = append(each, lat...)
		rep.PolicyMissing += len(sims) - n
		if n > 0 {
			all = append(all, slices.Max(lat))
		}
		r.say("policy edit %d reached %d/%d agents; the last after %s", k, n, len(sims), slices.Max(append(lat, 0)).Round(time.Millisecond))
	}
	rep.PolicyChanges = opts.PolicyChanges
	rep.PolicyCPU = (r.servers.cpu() - cpu0) / float64(opts.PolicyChanges)
	rep.PolicyLatency, rep.PolicyAllLatency = summarize(each), summarize(all)
	rep.PolicyWireBytes = wire / float64(opts.PolicyChanges*len(sims))
	rep.PolicyPayloadBytes = payload / float64(opts.PolicyChanges*len(sims))
	return nil
}

// finish reads the final figures: every replica's CPU time and peak RSS
// (and its plugins'), this process's, the load, and Redis's memory.
func (r *run) finish(ctx context.Context) error {
	rep := r.rep
	rep.Server, rep.Plugins = r.servers.totals()
	for i, p := range r.servers {
		server, plugins := p.sample()
		rr := ReplicaReport{ID: p.id, Served: r.served[i], Killed: p.isKilled(), Server: server, Plugins: plugins}
		for _, s := range r.sims {
			if s.replica == i {
				rr.Agents++
			}
		}
		if r.servedAfterKill != nil {
			rr.ServedAfterKill = r.servedAfterKill[i]
		}
		rep.Replicas = append(rep.Replicas, rr)
	}
	var err error
	if rep.Client, err = readProc(os.Getpid()); err != nil {
		return err
	}
	rep.LoadAverage = loadAverage()
	if strings.HasPrefix(r.opts.Store, "redis") {
		if rep.RedisUsedMemory, err = redisUsedMemory(ctx, r.opts.Store); err != nil {
			r.opts.Logger.Warn("read redis memory", "error", err)
		}
	}
	return nil
}

func count(sims []*sim, f func(*sim) bool) int {
	n := 0
	for _, s := range sims {
		if s.agent != nil && f(s) {
			n++
		}
	}
	return n
}

func sumFunc(sims []*sim, f func(*sim) int) int {
	n := 0
	for _, s := range sims {
		n += f(s)
	}
	return n
}

func sumPayload(sims []*sim) int64 {
	var n int64
	for _, s := range sims {
		n += s.payload.Load()
	}
	return n
}

// pluginStats sums the figures of the server's child processes.
func pluginStats(serverPid int) ProcStats {
	var sum ProcStats
	for _, pid := range children(serverPid) {
		if ps, err := readProc(pid); err == nil {
			sum = sum.plus(ps)
		}
	}
	return sum
}

// register registers sim's cluster through the admin API of its replica
// (with a reusable token in the chaos soak, whose agents restart without
// their state) and builds its agent.
func (r *run) register(s *sim) (*agent.Agent, error) {
	name := s.cluster.Name
	srv := r.servers[s.replica]
	resp, err := srv.admin.RegisterCluster(srv.adminCtx, &relayv1.RegisterClusterRequest{Cluster: name, Reusable: r.opts.Chaos, Labels: r.clusterLabels(s)})
	if err != nil {
		return nil, fmt.Errorf("register %s: %w", name, err)
	}
	if err := os.MkdirAll(r.agentDir(s), 0o700); err != nil {
		return nil, fmt.Errorf("register %s: %w", name, err)
	}
	if err := writeFile(filepath.Join(r.agentDir(s), "token"), []byte(resp.GetToken())); err != nil {
		return nil, err
	}
	return r.newAgent(s)
}

func (r *run) agentDir(s *sim) string { return filepath.Join(r.work, "agents", s.cluster.Name) }

// newAgent builds sim's agent, which trades the token and a CSR for its
// certificate when it runs, unless its state directory holds one. The
// agent dials its replica first, then the others in turn when a stream
// fails.
func (r *run) newAgent(s *sim) (*agent.Agent, error) {
	opts := r.agentOptions()
	opts.Cluster, opts.Server, opts.ServerName = s.cluster.Name, r.servers.relays(s.replica), "127.0.0.1"
	opts.TokenFile, opts.CAFile, opts.StateDir = filepath.Join(r.agentDir(s), "token"), r.servers[s.replica].caBundle, r.agentDir(s)
	opts.Version = "bench"
	return agent.New(opts, s.src, agent.Sinks{s}, r.opts.Logger.With("cluster", s.cluster.Name))
}

// agentOptions are the options every simulated agent shares.
func (r *run) agentOptions() agent.Options {
	opts := agent.DefaultOptions()
	if r.opts.Chaos {
		opts.Heartbeat, opts.ServerTimeout = chaosHeartbeat, chaosServerTimeout
	}
	return opts
}

// IdleWindow is how long the idle cost of agents with options a, served
// by replicas started with serverArgs, takes to measure: two heartbeats of
// the slower side, the agent's or its replica's, so that every agent's
// heartbeats and its replica's are counted at least once each, and twice
// more often than not, whatever their phase. A replica heartbeats at a
// third of the agent's server timeout, never more often than its
// --heartbeat (core/server/heartbeat.go; core/server's tests check that
// this follows it).
func IdleWindow(a agent.Options, serverArgs []string) time.Duration {
	fs := pflag.NewFlagSet("server", pflag.ContinueOnError)
	fs.ParseErrorsAllowlist.UnknownFlags = true
	fs.SetOutput(io.Discard)
	heartbeat := fs.Duration("heartbeat", serverHeartbeat, "")
	_ = fs.Parse(serverArgs) // the server refuses bad flags itself
	return 2 * max(a.Heartbeat, *heartbeat, a.ServerTimeout/3)
}

// serverHeartbeat is the server's default --heartbeat.
const serverHeartbeat = 10 * time.Second

// startAgent runs a as sim's agent in agents until ctx ends or sim.stop
// is called.
func (r *run) startAgent(ctx context.Context, agents *errgroup.Group, s *sim, a *agent.Agent) {
	ctx, stop := context.WithCancel(ctx)
	stopped := make(chan struct{})
	s.agent, s.stop, s.stopped = a, stop, stopped
	agents.Go(func() error {
		defer close(stopped)
		if err := a.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			r.opts.Logger.Warn("agent stopped", "cluster", s.cluster.Name, "error", err)
		}
		return nil
	})
}

func writeFile(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// redactStore hides a Redis password.
func redactStore(store string) string {
	if i := strings.Index(store, "@"); i > 0 {
		if j := strings.Index(store, "://"); j > 0 && j < i {
			return store[:j+3] + "***" + store[i:]
		}
	}
	return store
}

// redisUsedMemory reads used_memory from INFO memory of the store: one
// server, the primary Sentinel names, or every primary of a Redis Cluster.
func redisUsedMemory(ctx context.Context, url string) (int64, error) {
	ropts, err := storeredis.ParseURL(url)
	if err != nil {
		return 0, fmt.Errorf("parse --store: %w", err)
	}
	c := goredis.NewUniversalClient(&ropts.Client)
	defer c.Close()
	// A Redis Cluster's memory is its primaries' together.
	var total atomic.Int64
	read := func(ctx context.Context, c *goredis.Client) error {
		n, err := usedMemory(ctx, c)
		total.Add(n)
		return err
	}
	if cc, ok := c.(*goredis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, read)
	} else {
		n, rerr := usedMemory(ctx, c)
		total.Add(n)
		err = rerr
	}
	return total.Load(), err
}

// usedMemory returns one Redis server's used_memory.
func usedMemory(ctx context.Context, c goredis.Cmdable) (int64, error) {
	info, err := c.Info(ctx, "memory").Result()
	if err != nil {
		return 0, fmt.Errorf("redis INFO memory: %w", err)
	}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "used_memory:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, errors.New("redis INFO memory has no used_memory")
}

// pluginBinaries finds the plugin binaries, or builds them from the source
// tree.
func pluginBinaries(ctx context.Context, opts Options, work string) (map[string]string, error) {
	dirs := []string{opts.Plugins}
	if opts.Plugins == "" {
		dirs = append(dirs, filepath.Dir(opts.Executable))
	}
	if found, ok := pluginhost.FindBinaries(Plugins, dirs...); ok {
		return found, nil
	}
	if opts.Plugins != "" {
		return nil, fmt.Errorf("--plugins %s does not hold meshrelay-plugin-{%s}", opts.Plugins, strings.Join(Plugins, ","))
	}
	root, err := sourceRoot()
	if err != nil {
		return nil, err
	}
	found, err := pluginhost.BuildBinaries(ctx, root, filepath.Join(work, "bin"), Plugins)
	if err != nil {
		return nil, fmt.Errorf("%w (or pass --plugins)", err)
	}
	return found, nil
}

// sourceRoot walks up from the working directory to the meshrelay module.
func sourceRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if data, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil &&
			bytes.Contains(data, []byte("module github.com/meshrelay/meshrelay\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no plugin binaries: pass --plugins DIR or run from the meshrelay source tree")
		}
		dir = parent
	}
}
