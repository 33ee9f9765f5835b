package main

import (
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/meshrelay/meshrelay/internal/bench"
	"github.com/spf13/cobra"
)

func newBenchCommand(logs *logOptions) *cobra.Command {
	opts := bench.DefaultOptions()
	var output, cpuProfile string
	var quiet bool
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure server replicas against a simulated fleet",
		Long: `Simulate a fleet of relay agents in one process against real meshrelay
server processes on loopback, and report the scale figures of docs/performance.md.

The server runs as a child process (this binary's "server" command) with the
real translator plugins installed and a generated fleet-wide AccessPolicy.
Each simulated cluster is registered through the admin API and runs a real
agent: token, CSR, client certificate, its own mTLS stream. Its inputs are
generated (Services with their EndpointSlices, Deployments and
ServiceAccounts, an istiod Deployment); outputs are discarded after timing.

The run connects the fleet, churns inputs (--churn changes/s for --duration),
edits the policy --policy-changes times, and reports: time to connect and to
first outputs, and how long the servers and plugins then went on working until
they were quiet, under 0.1 cores over 2s, at most 2 minutes, before the idle
window; latency from an input change to its agent and from a policy edit to
every agent (p50/p99/max); bytes on the wire per change as the agents received
them; the servers' and plugins' CPU seconds per input change (the headline
figure) and per policy edit, and per input change net of the idle CPU measured
before the churn (--idle-window); the server's CPU seconds and peak RSS (and
its plugins'), and Redis used_memory with --store redis://.

Scenarios (--scenario):
  local   each input change rewrites one Service and its Deployment in one
          random cluster, which changes that cluster's outputs only.
  global  the policies add a VirtualDestination exporting svc-000 of
          namespace bench from every cluster as svc-000.bench.global, and
          every cluster gets an east-west gateway, so every cluster's Istio
          outputs are computed from every cluster's svc-000 endpoints; each
          input change moves one endpoint of svc-000's EndpointSlice in one
          random cluster.

Replicas (--replicas N, N > 1 needs --store redis://): N server processes
share the store. The first creates the CA (kept in the store) and the admin
token; the others start once the CA is in the store and read the admin token
from the first's file. Agents are spread round-robin: agent i registers
through replica i mod N's admin API and dials it first, the others in turn
when its stream fails. The report adds, per replica, the agents assigned and
served, and the CPU seconds and peak RSS of its server and plugins; server
and plugin figures elsewhere are totals over the replicas.

--cold-start measures a server's cold start from Redis instead: it writes
--agents clusters (registry record, the generated input, an output per
plugin) into Redis through the store API, with no agents, starts one server
on it and reports the seconds from the process's start until the store is
loaded into memory, the fleet is in the engine, and the admin API on the
relay port lists every cluster (serving), with Redis used_memory and the
server's RSS and CPU then.

--chaos runs a soak instead (defaults: 3 replicas, 100 agents of 20
services, 2 changes/s, 10m): the replicas run on a redis-server of the
bench's own (--redis-server), each through a proxy that can cut it off, and
while inputs churn and the policy is edited every --policy-every, a fault
starts every --fault-every, drawn with --seed from --faults (all by
default): redis-restart (SIGKILL, back empty after 3s), kill-replica
(SIGKILL a replica other than the first, back on its ports after 5s; its
agents move), pause-replica (SIGSTOP past the agents' 10s server timeout),
restart-agent and restart-agent-fresh (with and without its key and
certificate), cut-replica (its Redis connections cut for 15s while the
others keep theirs), crash-plugin (SIGKILL the Istio plugin process),
hang-plugin (SIGSTOP one past the 10s plugin call timeout) and
hostile-agent (one cluster's certificate used against a replica for 15s:
64 connections of 100 streams, Sync streams held without a Hello, 16 MiB
messages declared on the calls that need kilobytes and some sent but never
finished; the other agents must stay connected, one restarted meanwhile
must be welcomed, a new admin connection must work and the replica's
memory may grow by 128 MiB at most). With --redis-sentinel, Redis is a
Sentinel set instead (a primary, two replicas, three Sentinels; the
replicas reach it through redis+sentinel://), and redis-failover (SIGKILL
the primary; the Sentinels promote a replica, the killed server comes back
as a replica, and the fault reports when writes went through again) takes
the place of redis-restart and cut-replica. With --redis-cluster, Redis is
a Redis Cluster instead (three primaries, each with a replica; the replicas
reach it through redis+cluster://, the store's keys in one hash slot), and
redis-reshard (the store's slot moved to another primary, 10 keys per
MIGRATE, 200ms apart, while the replicas use it) and redis-cluster-kill
(SIGKILL the primary holding that slot; its replica takes over, the killed
node comes back as a replica) take their place. Every
--check-every and at the end, churn and faults stop and an independent
checker compares each agent's outputs with what translating the same
inputs and policies offline gives (its own plugin processes), until they
agree or --timeout: outputs missing, stale or extra at an agent, outputs
that went back to an older change, and resources pruned that the model
holds (in safe mode, or from a partial view) fail the soak. Before the
faults, replica 1 is killed with its third of the evenly spread fleet, and
at the end the replica serving the most agents: each reconnect storm is
measured (peak registrations and full resyncs per second, time until every
cluster's outputs converged) and the replica started again. Each check also
reports the agents each live replica serves.
With --chaos-rollout, the policies carry a RolloutStrategy: the clusters
are labelled bench.meshrelay.io/wave canary (one in ten), early (three in
ten) or late, staged in that order with 3s of health each, early at most
half at a time and late behind an approval gate. Each policy edit is then
a revision that a staged rollout carries (an edit during a rollout waits
for it to end). Every 2s the bench acts as an operator through replica 0:
it approves a waiting gate after 4s, resumes a rollout that a failure or a
missed 60s deadline paused, and, drawn with --seed, pauses one rollout in
three for 10s and undoes one in six. Each check reads the rollout record
and judges every cluster under the revision it puts that cluster on
(released: the new one; not released, or undone: the previous one). After
the faults stop, the bench drives the rollouts to their end (resume,
approve, one more edit if the last revision was undone), and the last
checks require every cluster to hold the last revision written. A rollout
record that goes missing or back to an older rollout, or that puts a
released cluster back to Pending without an undo, fails the soak.
Memory (servers, plugins, Redis) and the servers' goroutines are sampled
throughout; the report gives each one's growth per hour after warm-up. The
exit code is 1 when the soak failed.

--rollout measures a staged rollout (defaults: 1,000 agents of 5 services).
The clusters are registered with the label bench.meshrelay.io/stage=s1..s5
(cluster i of N in stage 1+5i/N), and the policies hold a RolloutStrategy
of five stages selecting them, each gated by approval and done once its
clusters are healthy (minHealthy 0s), so the bench sets the pace. Once the
fleet settled for a window (--rollout-window), it measures one revision over
a window (inputs changing at --churn per second meanwhile), edits the
AccessPolicy, and approves the stages one at a time (ActOnRollout), timing
each from its approval until every agent
of the stage received the new outputs and until the server counts the stage
done; after stage s1 it measures two revisions over a window, and once the
rollout completed and the fleet settled for a window, one revision again.
It reports the server's and plugins' RSS, the server's live Go heap (what its
last collection kept, go_gc_heap_live_bytes) and their CPU seconds per second in each window, the ratios of two revisions
and of after-completion to one (goal: memory at most 1.5× while two
revisions are live, and back to 1× after), the peak RSS during the
rollout, and any cluster that received the new outputs before its stage
was approved.

--kill-replica (N ≥ 2) adds a phase after the churn: replica 0 and its
plugins get SIGKILL, and its agents move to the next replica of their lists.
It reports the moved agents, their reconnect latency from the kill (p50/p99/
max), when they all held the outputs their new replica computed, their full
input resends, and the output churn they saw (output sets whose content
changed, resources deleted and re-created; inputs and policies do not change
in that phase, so anything but 0 is churn). The bench reports; it asserts
nothing.`,
		Example: `  # A quick run:
  meshrelay bench --agents 100 --services 50 --duration 30s

  # Toward the design target, on Redis, as JSON:
  redis-server --port 6390 --save '' &
  meshrelay bench --agents 5000 --services 50 --churn 20 --duration 60s \
    --store redis://127.0.0.1:6390/0 -o json

  # Three replicas on one Redis, a global service, and a lost replica:
  meshrelay bench --agents 300 --replicas 3 --store redis://127.0.0.1:6390/0 \
    --scenario global --kill-replica

  # A 1,000-cluster rollout in 5 stages, approved one stage at a time:
  meshrelay bench --rollout --plugins bin

  # A 30-minute chaos soak: 3 replicas, 500 agents, a fault every 20s:
  meshrelay bench --chaos --replicas 3 --agents 500 --duration 30m \
    --fault-every 20s --seed 1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "table" && output != "json" && output != "yaml" {
				return &exitError{code: 2, err: fmt.Errorf("--output must be table, yaml or json, not %q", output)}
			}
			// A thousand agents logging their connections would bury the
			// report: warnings only, unless asked.
			if !cmd.Flags().Changed("log-level") {
				logs.level = "warn"
				if opts.Chaos {
					// Faults make every agent warn.
					logs.level = "error"
				}
			}
			logger, err := logs.logger(os.Stderr)
			if err != nil {
				return err
			}
			opts.Logger = logger
			if !quiet {
				opts.Progress = cmd.ErrOrStderr()
			}
			if cpuProfile != "" {
				f, err := os.Create(cpuProfile)
				if err != nil {
					return fmt.Errorf("--cpuprofile: %w", err)
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return fmt.Errorf("--cpuprofile: %w", err)
				}
				defer pprof.StopCPUProfile()
			}
			if opts.Chaos {
				return runChaos(cmd, opts, output)
			}
			if opts.ColdStart {
				return runColdStart(cmd, opts, output)
			}
			if opts.Rollout {
				opts = rolloutDefaults(cmd, opts)
			}
			rep, err := bench.Run(cmd.Context(), opts)
			if err != nil {
				return err
			}
			if output != "table" {
				return printData(cmd.OutOrStdout(), output, rep)
			}
			return printBench(cmd.OutOrStdout(), rep)
		},
	}
	fs := cmd.Flags()
	fs.IntVar(&opts.Agents, "agents", opts.Agents, "simulated clusters, one agent each")
	fs.IntVar(&opts.Services, "services", opts.Services, "Services per cluster (each with an EndpointSlice, a Deployment and a ServiceAccount)")
	fs.StringVar(&opts.Scenario, "scenario", opts.Scenario, "what an input change is: local (one Service and its Deployment; only that cluster's outputs depend on it) or global (an endpoint of svc-000, which a VirtualDestination exports from every cluster)")
	fs.Float64Var(&opts.Churn, "churn", opts.Churn, "input changes per second across the fleet")
	fs.DurationVar(&opts.Duration, "duration", opts.Duration, "how long inputs churn")
	fs.IntVar(&opts.PolicyChanges, "policy-changes", opts.PolicyChanges, "edits of the fleet-wide policy after the churn, one at a time")
	fs.StringVar(&opts.Store, "store", opts.Store, "the server's store: memory, or a redis://host:port/db, redis+sentinel:// or redis+cluster:// URL (an empty database); Redis memory is summed over a cluster's primaries")
	fs.IntVar(&opts.Replicas, "replicas", opts.Replicas, "server processes sharing the store (more than 1 needs --store redis://); agents are spread over them round-robin")
	fs.BoolVar(&opts.KillReplica, "kill-replica", opts.KillReplica, "after the churn, SIGKILL replica 0 and measure its agents' move to the others (needs --replicas 2 or more)")
	fs.StringVar(&opts.Plugins, "plugins", opts.Plugins, "directory with the meshrelay-plugin-* binaries (default: beside this binary, else built from the source tree)")
	fs.IntVar(&opts.TrafficEdges, "traffic-edges", opts.TrafficEdges, "after the idle measure, every agent relays this many traffic edges every --traffic-window, --traffic-windows times (0: no traffic phase)")
	fs.IntVar(&opts.TrafficWindows, "traffic-windows", 6, "windows of the traffic phase")
	fs.DurationVar(&opts.TrafficWindow, "traffic-window", 10*time.Second, "length of a traffic window")
	fs.IntVar(&opts.Concurrency, "concurrency", opts.Concurrency, "agents registering and connecting at once")
	fs.DurationVar(&opts.Timeout, "timeout", opts.Timeout, "longest wait for the fleet to converge or a policy edit to arrive everywhere (default 2m plus 20ms per agent)")
	fs.StringVar(&opts.WorkDir, "work-dir", opts.WorkDir, "keep the server's data, log and plugins here (default: a temporary directory, removed)")
	fs.DurationVar(&opts.IdleWindow, "idle-window", opts.IdleWindow, "how long the idle cost (heartbeats) is measured before the churn (default: two heartbeats of the slower side, the agents' --heartbeat or the server's, a third of the agents' --server-timeout)")
	fs.StringSliceVar(&opts.ServerArgs, "server-arg", opts.ServerArgs, "extra flag for every server replica, repeatable (e.g. --server-arg=--debounce=20ms)")
	fs.BoolVar(&opts.Chaos, "chaos", false, "run the chaos soak: replicas on a redis-server of its own, faults, and the checker (see above)")
	fs.Uint64Var(&opts.Seed, "seed", 1, "--chaos: draws the faults, their targets and the input changes")
	fs.DurationVar(&opts.FaultEvery, "fault-every", 20*time.Second, "--chaos: time between two faults")
	fs.StringSliceVar(&opts.Faults, "faults", nil, "--chaos: the kinds of fault drawn from (default: all): "+strings.Join(bench.FaultKinds, ", ")+"; with --redis-sentinel: "+strings.Join(bench.SentinelFaultKinds, ", ")+"; with --redis-cluster: "+strings.Join(bench.ClusterFaultKinds, ", "))
	fs.DurationVar(&opts.CheckEvery, "check-every", 5*time.Minute, "--chaos: time between two quiescent checks (and one at the end)")
	fs.DurationVar(&opts.PolicyEvery, "policy-every", 30*time.Second, "--chaos: time between two policy edits")
	fs.StringVar(&opts.RedisServer, "redis-server", "redis-server", "--chaos: the redis-server binary")
	fs.BoolVar(&opts.ChaosRollout, "chaos-rollout", false, "--chaos: stage the policy edits through a RolloutStrategy (3 stages by a wave label, the last behind an approval gate), act as an operator (approve, pause, resume, undo), and judge each cluster under the revision its stage is on (see above)")
	fs.BoolVar(&opts.RedisSentinel, "redis-sentinel", false, "--chaos: run Redis as a Sentinel set (a primary, two replicas, three Sentinels) and inject redis-failover (SIGKILL the primary) instead of redis-restart and cut-replica")
	fs.BoolVar(&opts.RedisCluster, "redis-cluster", false, "--chaos: run Redis as a Redis Cluster (three primaries, each with a replica) and inject redis-reshard (move the store's slot to another primary) and redis-cluster-kill (SIGKILL the primary holding it) instead of redis-restart and cut-replica")
	fs.BoolVar(&opts.Rollout, "rollout", false, "measure a staged rollout of the policy edit (see above; defaults: 1,000 agents of 5 services, --churn 2 during each window, --duration 0, --policy-changes 0)")
	fs.DurationVar(&opts.RolloutWindow, "rollout-window", 20*time.Second, "--rollout: how long each steady state (one revision, two, one again) is measured, and how long the fleet settles after the rollout completes")
	fs.BoolVar(&opts.ColdStart, "cold-start", false, "measure a server's cold start from Redis instead (see above): --agents clusters of --services services written into the store (a redis-server of its own unless --store redis://…), no agents")
	fs.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the benchmark process (the agents) to this file")
	fs.BoolVarP(&quiet, "quiet", "q", false, "do not print progress to stderr")
	outputFlag(cmd, &output)
	return cmd
}

// printBench prints a report as a table.
func printBench(w io.Writer, r *bench.Report) error {
	ms := func(l bench.Latency) string {
		if l.Count == 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f / %.1f / %.1f ms (n=%d)", l.P50, l.P99, l.Max, l.Count)
	}
	mib := func(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
	kib := func(b float64) string { return fmt.Sprintf("%.1f KiB", b/1024) }
	secs := func(s float64) string {
		return (time.Duration(s * float64(time.Second))).Round(time.Millisecond).String()
	}
	t := newTable(w, "MEASURE", "VALUE")
	fleet := fmt.Sprintf("%d agents × %d services (%d input resources each), store %s", r.Agents, r.Services, r.InputResources, r.Store)
	if len(r.Replicas) > 1 {
		fleet += fmt.Sprintf(", %d server replicas", len(r.Replicas))
	}
	t.row("fleet", fleet)
	t.row("scenario", r.Scenario)
	t.row("agents connected", fmt.Sprintf("%d/%d", r.Connected, r.Agents))
	t.row("connect and register all", fmt.Sprintf("%s (%.0f agents/s)", secs(r.ConnectSeconds), r.RegistrationsPerSecond))
	t.row("first outputs at every agent", fmt.Sprintf("%s (%d/%d agents)", secs(r.FirstOutputsSeconds), r.FirstOutputs, r.Agents))
	t.row("servers quiet after the first outputs", secs(r.SettleSeconds))
	// A run without a churn phase or policy edits (--rollout, the
	// traffic phase alone) has no figures for them.
	if r.InputChanges > 0 {
		t.row("input changes", fmt.Sprintf("%d in %s (%.1f/s); %d coalesced, %d not received", r.InputChanges, secs(r.ChurnSeconds), r.Churn, r.InputCoalesced, r.InputLost))
		t.row("input change → its agent p50/p99/max", ms(r.InputLatency))
		t.row("bytes per input change (wire / payload)", kib(r.InputWireBytes)+" / "+kib(r.InputPayloadBytes))
	}
	if r.PolicyChanges > 0 {
		t.row("policy edits", fmt.Sprintf("%d; %d receipts missing", r.PolicyChanges, r.PolicyMissing))
		t.row("policy edit → each agent p50/p99/max", ms(r.PolicyLatency))
		t.row("policy edit → all agents p50/p99/max", ms(r.PolicyAllLatency))
		t.row("bytes per policy edit per agent (wire / payload)", kib(r.PolicyWireBytes)+" / "+kib(r.PolicyPayloadBytes))
	}
	if r.InputChanges > 0 || r.PolicyChanges > 0 {
		t.row("server+plugins CPU per input change / policy edit", fmt.Sprintf("%.3f s / %.3f s", r.InputCPU, r.PolicyCPU))
		t.row("server+plugins CPU per input change, net of idle", fmt.Sprintf("%.3f s", r.InputCPUNet))
	}
	t.row("idle traffic to agents / idle server+plugins CPU", fmt.Sprintf("%.0f B/s / %.3f s/s", r.IdleWireBytesPerS, r.IdleCPUPerS))
	t.row("server CPU", fmt.Sprintf("%.1f s (%.1f s to converge)", r.Server.CPUSeconds, r.ServerCPUConverge))
	t.row("CPU to converge: plugins / the simulated agents", fmt.Sprintf("%.1f s / %.1f s", r.PluginsCPUConverge, r.AgentsCPUConverge))
	t.row("server peak RSS", mib(r.Server.PeakRSSBytes))
	t.row("server RSS per agent", kib(r.ServerRSSPerAgent)+fmt.Sprintf(" (%s before agents, %s converged)", mib(r.ServerRSSBefore), mib(r.ServerRSSConverged)))
	t.row("server live heap per agent", kib(r.ServerHeapPerAgent))
	t.row("plugins CPU / peak RSS", fmt.Sprintf("%.1f s / %s", r.Plugins.CPUSeconds, mib(r.Plugins.PeakRSSBytes)))
	t.row("plugins RSS per agent", kib(r.PluginRSSPerAgent)+fmt.Sprintf(" (%s before agents, %s converged)", mib(r.PluginRSSBefore), mib(r.PluginRSSConverged)))
	if len(r.Replicas) > 1 {
		for _, rr := range r.Replicas {
			t.row("replica "+rr.ID, replicaLine(rr, mib))
		}
	}
	if f := r.Failover; f != nil {
		printFailover(t, f, ms, secs)
	}
	if r.RedisUsedMemory > 0 {
		t.row("redis used_memory", mib(r.RedisUsedMemory))
	}
	if ro := r.Rollout; ro != nil {
		printBenchRollout(t, ro, ms, mib)
	}
	if tr := r.Traffic; tr != nil {
		t.row("traffic", fmt.Sprintf("%d edges per agent every %.0fs, %d windows; %d edges kept by the servers", tr.EdgesPerAgent, tr.WindowSeconds, tr.Windows, tr.EdgesKept))
		t.row("traffic bytes per agent per window (first / steady)", fmt.Sprintf("%.0f B / %.0f B", tr.FirstWindowBytes, tr.SteadyWindowBytes))
		t.row("server CPU per window per 1,000 edges, net of idle", fmt.Sprintf("%.4f s", tr.CPUPer1000Edges))
		t.row("server RSS per 1,000 edges (measured / estimated)", kib(tr.RSSPer1000Edges)+" / "+kib(tr.MemoryPerEdge*1000))
	}
	t.row("machine load average (1m) at the end", fmt.Sprintf("%.1f", r.LoadAverage))
	t.row("bench process CPU / peak RSS", fmt.Sprintf("%.1f s / %s", r.Client.CPUSeconds, mib(r.Client.PeakRSSBytes)))
	return t.flush()
}

// replicaLine describes one replica's share of a run.
func replicaLine(rr bench.ReplicaReport, mib func(int64) string) string {
	agents := fmt.Sprintf("%d agents assigned, %d served", rr.Agents, rr.Served)
	if rr.Served < 0 {
		agents = fmt.Sprintf("%d agents assigned, served unknown", rr.Agents)
	}
	if rr.Killed {
		agents += ", killed"
	} else if rr.ServedAfterKill > 0 {
		agents += fmt.Sprintf(", %d after the kill", rr.ServedAfterKill)
	}
	return fmt.Sprintf("%s; server CPU %.1f s, peak RSS %s; plugins CPU %.1f s, peak RSS %s",
		agents, rr.Server.CPUSeconds, mib(rr.Server.PeakRSSBytes), rr.Plugins.CPUSeconds, mib(rr.Plugins.PeakRSSBytes))
}

// printFailover prints the --kill-replica phase.
func printFailover(t *table, f *bench.FailoverReport, ms func(bench.Latency) string, secs func(float64) string) {
	t.row("killed replica", fmt.Sprintf("%s: %d moved agents, %d reconnected", f.Killed, f.MovedAgents, f.Reconnected))
	t.row("moved agent reconnect p50/p99/max", ms(f.Reconnect))
	settled := "not within the timeout"
	if f.SettledSeconds > 0 {
		settled = secs(f.SettledSeconds) + " after the kill"
	}
	t.row("moved agents hold their new replica's outputs", settled)
	t.row("output churn (moved agents)", fmt.Sprintf("%d output set changes: %d resources deleted (%d re-created), %d modified, %d added",
		f.Churn.Changes, f.Churn.Deleted, f.Churn.Recreated, f.Churn.Modified, f.Churn.Added))
	t.row("full input resends (moved agents)", fmt.Sprintf("%d", f.FullResends))
}

// runChaos runs the soak with the chaos defaults for the flags not given,
// prints its report and fails with exit code 1 when it failed.
func runChaos(cmd *cobra.Command, opts bench.Options, output string) error {
	def := bench.DefaultChaosOptions()
	defaultUnset(cmd, map[string]func(){
		"agents":   func() { opts.Agents = def.Agents },
		"services": func() { opts.Services = def.Services },
		"churn":    func() { opts.Churn = def.Churn },
		"duration": func() { opts.Duration = def.Duration },
		"replicas": func() { opts.Replicas = def.Replicas },
	})
	rep, err := bench.RunChaos(cmd.Context(), opts)
	if err != nil {
		return err
	}
	if output != "table" {
		err = printData(cmd.OutOrStdout(), output, rep)
	} else {
		err = printChaos(cmd.OutOrStdout(), rep)
	}
	if err != nil {
		return err
	}
	if !rep.Passed {
		return &exitError{code: 1, err: fmt.Errorf("the chaos soak failed: %s", strings.Join(rep.Failures, "; "))}
	}
	return nil
}

// printChaos prints a soak's report as a table.
func printChaos(w io.Writer, r *bench.ChaosReport) error {
	t := newTable(w, "MEASURE", "VALUE")
	t.row("soak", fmt.Sprintf("seed %d, %d replicas, %d agents × %d services, %s scenario, %.0fs, a fault every %.0fs",
		r.Seed, r.Replicas, r.Agents, r.Services, r.Scenario, r.DurationSeconds, r.FaultEverySeconds))
	t.row("input changes / policy edits", fmt.Sprintf("%d / %d", r.InputChanges, r.PolicyEdits))
	for _, f := range r.Faults {
		line := fmt.Sprintf("%s on %s, healed after %.1fs", f.Kind, f.Target, f.Seconds)
		if f.Note != "" {
			line += "; " + f.Note
		}
		if f.Error != "" {
			line += "; ERROR " + f.Error
		}
		t.row(fmt.Sprintf("fault at %.1fs (%s)", f.At, f.Time.Format("15:04:05")), line)
	}
	for _, c := range r.Checks {
		line := fmt.Sprintf("converged after %.1fs; %d pruned, %d wrongly; %d backwards", c.ConvergedSeconds, c.Deletions, c.WrongfulPruneCount, c.BackwardsCount)
		if c.ConvergedSeconds < 0 {
			line = fmt.Sprintf("NOT CONVERGED: %d clusters differ (first: %+v); %d pruned, %d wrongly; %d backwards",
				c.DifferentClusters, firstDifference(c.Differences), c.Deletions, c.WrongfulPruneCount, c.BackwardsCount)
		}
		if c.Rollout != "" {
			line += "; " + c.Rollout
		}
		t.row(fmt.Sprintf("check %q at %.1fs", c.Label, c.At), line)
	}
	if ro := r.Rollouts; ro != nil {
		t.row("staged rollouts", fmt.Sprintf("%d started, %d undone; %d approvals, %d pauses, %d resumes; the last finished %.1fs after the faults, on revision %s",
			ro.Started, ro.Undone, ro.Approvals, ro.Pauses, ro.Resumes, ro.FinalSeconds, ro.FinalRevision))
		for _, why := range ro.ResumedAfter {
			t.row("resumed after", why)
		}
		for _, lost := range ro.Lost {
			t.row("rollout record LOST", lost)
		}
		for _, u := range ro.Unreleased {
			t.row("UNRELEASED without an undo", u)
		}
	}
	for _, s := range r.Storms {
		t.row("reconnect storm at the "+s.When, fmt.Sprintf("%s killed with %d agents: peak %.0f registrations/s, %.0f resyncs/s; all back after %.1fs, converged after %.1fs",
			s.Killed, s.MovedAgents, s.PeakConnectsPerSecond, s.PeakResyncsPerSecond, s.ReconnectedSeconds, s.ConvergedSeconds))
	}
	for _, g := range r.Memory {
		unit := func(v float64) string {
			if g.Unit == "bytes" {
				return fmt.Sprintf("%.1f MiB", v/(1<<20))
			}
			return fmt.Sprintf("%.1f", v)
		}
		t.row(g.Name, fmt.Sprintf("%s → %s over %.1f min (max %s, %d lives); growth %s/h",
			unit(g.First), unit(g.Last), g.Minutes, unit(g.Max), g.Incarnations, unit(g.PerHour)))
	}
	t.row("machine load average (1m) at the end", fmt.Sprintf("%.1f", r.LoadAverage))
	t.row("result", map[bool]string{true: "PASSED", false: "FAILED: " + strings.Join(r.Failures, "; ")}[r.Passed])
	return t.flush()
}

func firstDifference(ds []bench.Difference) any {
	if len(ds) == 0 {
		return "-"
	}
	return ds[0]
}

// rolloutDefaults applies the --rollout defaults to the flags not given.
func rolloutDefaults(cmd *cobra.Command, opts bench.Options) bench.Options {
	def := bench.DefaultRolloutOptions()
	defaultUnset(cmd, map[string]func(){
		"agents":         func() { opts.Agents = def.Agents },
		"services":       func() { opts.Services = def.Services },
		"churn":          func() { opts.Churn = def.Churn },
		"duration":       func() { opts.Duration = def.Duration },
		"policy-changes": func() { opts.PolicyChanges = def.PolicyChanges },
	})
	return opts
}

// defaultUnset calls, for each flag of cmd that was not given, the function
// that sets its mode's default.
func defaultUnset(cmd *cobra.Command, set map[string]func()) {
	fs := cmd.Flags()
	for flag, apply := range set {
		if !fs.Changed(flag) {
			apply()
		}
	}
}

// printBenchRollout prints the --rollout phase.
func printBenchRollout(t *table, ro *bench.RolloutReport, ms func(bench.Latency) string, mib func(int64) string) {
	window := func(w bench.RolloutWindow) string {
		return fmt.Sprintf("server %s (live heap %s) + plugins %s RSS; %.3f CPU s/s; input change p50/p99/max %s",
			mib(w.ServerRSS), mib(w.ServerHeap), mib(w.PluginsRSS), w.CPUPerSecond, ms(w.InputLatency))
	}
	t.row("rollout", fmt.Sprintf("%d stages (%s), %.0fs windows at %.1f input changes/s; %s after %.1fs from the first approval",
		ro.Stages, ro.Gate, ro.WindowSeconds, ro.ChurnPerSecond, ro.Phase, ro.CompletedSeconds))
	t.row("rollout: one revision", window(ro.One))
	t.row("rollout: two revisions (s1 released)", window(ro.Two))
	t.row("rollout: one revision after completion", window(ro.After))
	goal := "met"
	if ro.MemoryRatio > 1.5 {
		goal = "NOT met"
	}
	t.row("rollout: memory two / one (goal ≤ 1.5)", fmt.Sprintf("%.2f (%s); peak %.2f (%s)", ro.MemoryRatio, goal, ro.PeakMemoryRatio, mib(ro.PeakRSSBytes)))
	t.row("rollout: memory after / one", fmt.Sprintf("%.2f; server live heap two / one %.2f, after / one %.2f", ro.AfterMemoryRatio, ro.HeapRatio, ro.AfterHeapRatio))
	t.row("rollout: CPU two / one", fmt.Sprintf("%.2f", ro.CPURatio))
	t.row("rollout: clusters released early", fmt.Sprintf("%d", ro.EarlyReceipts))
	for _, s := range ro.StageReports {
		t.row("rollout: approve "+s.Name+" → its clusters hold the new outputs",
			fmt.Sprintf("%d/%d clusters, all after %.3fs (p50/p99/max %s); stage done after %.3fs, %.1f CPU s",
				s.Held, s.Clusters, s.AllHeldSeconds, ms(s.HeldLatency), s.DoneSeconds, s.CPUSeconds))
	}
}

// runColdStart runs --cold-start and prints its report.
func runColdStart(cmd *cobra.Command, opts bench.Options, output string) error {
	rep, err := bench.RunColdStart(cmd.Context(), opts)
	if err != nil {
		return err
	}
	if output != "table" {
		return printData(cmd.OutOrStdout(), output, rep)
	}
	mib := func(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
	secs := func(s float64) string { return fmt.Sprintf("%.2fs", s) }
	t := newTable(cmd.OutOrStdout(), "MEASURE", "VALUE")
	t.row("fleet", fmt.Sprintf("%d clusters × %d services, store %s", rep.Clusters, rep.Services, rep.Store))
	t.row("fill", secs(rep.FillSeconds))
	t.row("redis used_memory", fmt.Sprintf("%s (%.1f KiB per cluster)", mib(rep.RedisBytes), float64(rep.RedisBytes)/1024/float64(rep.Clusters)))
	t.row("store loaded", fmt.Sprintf("%s (Load %s, %d outputs)", secs(rep.StoreLoaded), secs(rep.LoadSeconds), rep.LoadedOutputs))
	t.row("fleet in the engine", secs(rep.FleetLoaded))
	t.row("serving", fmt.Sprintf("%s (safe mode %v)", secs(rep.Serving), rep.SafeMode))
	t.row("server CPU / RSS", fmt.Sprintf("%.2fs / %s", rep.Server.CPUSeconds, mib(rep.Server.RSSBytes)))
	t.row("plugins CPU / RSS", fmt.Sprintf("%.2fs / %s", rep.Plugins.CPUSeconds, mib(rep.Plugins.RSSBytes)))
	t.row("load average", fmt.Sprintf("%.2f", rep.LoadAverage))
	return t.flush()
}
