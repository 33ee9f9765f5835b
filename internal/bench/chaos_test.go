package bench

import (
	"log/slog"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshrelay/meshrelay/internal/testenv"
)

// buildBinaries builds meshrelay and the plugins into a temporary
// directory.
func buildBinaries(t *testing.T) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	args := []string{"build", "-o", dir + string(filepath.Separator), "./cmd/meshrelay"}
	for _, p := range Plugins {
		args = append(args, "./cmd/meshrelay-plugin-"+p)
	}
	cmd := exec.CommandContext(t.Context(), "go", args...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return dir
}

// soakOptions are the chaos defaults for a soak in a test: a real
// redis-server, the binaries built from this tree, errors logged to the
// test and its progress written there.
func soakOptions(t *testing.T) Options {
	redis := testenv.RedisServer(t)
	bin := buildBinaries(t)
	opts := DefaultChaosOptions()
	opts.Executable, opts.Plugins, opts.RedisServer = filepath.Join(bin, "meshrelay"), bin, redis
	opts.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelError}))
	opts.Progress = t.Output()
	return opts
}

// TestChaosSoak runs a two-minute soak with a fixed seed — three replicas
// on a real redis-server, real plugin processes, agents over mTLS, a fault
// every 10s of every kind — and requires that it passed: every check
// converged to the checker's model with nothing missing, stale or extra,
// no output went backwards, nothing the model holds was pruned, every
// fault healed, and the reconnect storms converged.
func TestChaosSoak(t *testing.T) {
	opts := soakOptions(t)
	opts.Agents, opts.Services, opts.Churn = 24, 5, 2
	opts.Duration, opts.FaultEvery, opts.CheckEvery, opts.PolicyEvery = 2*time.Minute, 10*time.Second, time.Minute, 20*time.Second
	opts.Seed = 7
	rep, err := RunChaos(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range rep.Failures {
		t.Errorf("soak failure: %s", f)
	}
	if want := int(opts.Duration/opts.FaultEvery) - 3; len(rep.Faults) < want {
		t.Errorf("%d faults in %s, want at least %d", len(rep.Faults), opts.Duration, want)
	}
	kinds := map[string]bool{}
	for _, f := range rep.Faults {
		kinds[f.Kind] = true
	}
	if len(kinds) < 5 {
		t.Errorf("the faults were of %d kinds (%v), want at least 5 of %d", len(kinds), kinds, len(FaultKinds))
	}
	if len(rep.Checks) < 5 {
		t.Errorf("%d checks, want the start, after the first storm, a periodic one, the end and after the last storm", len(rep.Checks))
	}
	if rep.InputChanges == 0 || rep.PolicyEdits == 0 {
		t.Errorf("%d input changes and %d policy edits, want some of each", rep.InputChanges, rep.PolicyEdits)
	}
	if len(rep.Storms) != 2 {
		t.Fatalf("%d reconnect storms, want one at the start and one at the end", len(rep.Storms))
	}
	if s := rep.Storms[0]; s.MovedAgents != opts.Agents/3 || s.PeakConnectsPerSecond == 0 {
		t.Errorf("the first reconnect storm = %+v, want replica 1's %d agents reconnecting", s, opts.Agents/3)
	}
	if len(rep.Memory) == 0 {
		t.Error("no memory samples")
	}
	if !rep.Passed {
		t.Errorf("the soak did not pass")
	}
}

// TestChaosSoakRollout runs a short soak whose policy edits go through
// staged rollouts (three stages by label, the last gated; the soak
// approves, pauses, resumes and undoes as an operator) while replicas
// die, Redis restarts empty and agents restart, and requires that it
// passed: at every check each cluster held exactly the outputs of the
// revision the rollout record puts it on, no rollout record was lost, and
// once the faults stopped the rollouts were driven to their end with
// every cluster on the last revision. Seed 13 draws a Redis restart early,
// during the first rollout.
func TestChaosSoakRollout(t *testing.T) {
	opts := soakOptions(t)
	opts.ChaosRollout = true
	opts.Agents, opts.Services, opts.Churn = 24, 5, 2
	opts.Duration, opts.FaultEvery, opts.CheckEvery, opts.PolicyEvery = 90*time.Second, 10*time.Second, 45*time.Second, 15*time.Second
	opts.Faults = []string{FaultRedisRestart, FaultKillReplica, FaultPauseReplica, FaultRestartAgent, FaultRestartAgentFresh, FaultCutReplica, FaultCrashPlugin}
	opts.Seed = 13
	rep, err := RunChaos(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range rep.Failures {
		t.Errorf("soak failure: %s", f)
	}
	ro := rep.Rollouts
	if ro == nil {
		t.Fatal("no rollout report")
	}
	t.Logf("rollouts: %+v", *ro)
	if ro.Started < 2 || ro.Approvals < 1 {
		t.Errorf("%d rollouts started and %d approvals, want at least 2 and 1", ro.Started, ro.Approvals)
	}
	if ro.FinalRevision == "" {
		t.Error("the rollouts were not driven to their end")
	}
	redis := false
	for _, f := range rep.Faults {
		redis = redis || f.Kind == FaultRedisRestart
	}
	if !redis {
		t.Errorf("no Redis restart among the faults %+v", rep.Faults)
	}
	judged := 0
	for _, ck := range rep.Checks {
		if strings.HasPrefix(ck.Rollout, "rollout ") {
			judged++
		}
	}
	if judged == 0 {
		t.Errorf("no check read a rollout record: %+v", rep.Checks)
	}
	if !rep.Passed {
		t.Errorf("the soak did not pass")
	}
}

// TestChaosSoakSentinel runs a short soak on a real Sentinel set (a
// primary, two replicas, three Sentinels): the primary is killed several
// times while agents churn and replicas die, and the soak must pass with
// the server replicas following each new primary.
func TestChaosSoakSentinel(t *testing.T) {
	done := storeSoak(t, func(o *Options) { o.RedisSentinel = true }, 3,
		FaultRedisFailover, FaultRedisFailover, FaultKillReplica, FaultRestartAgent)
	if done[FaultRedisFailover] == 0 {
		t.Errorf("no Sentinel failover among the faults")
	}
}

// TestChaosSoakRedisCluster runs a short soak on a real Redis Cluster
// (three primaries, each with a replica): the slot holding the store's
// keys moves between primaries and its primary is killed while agents
// churn and replicas die, and the soak must pass: the independent checker
// finds every agent's outputs as its model has them at every check.
func TestChaosSoakRedisCluster(t *testing.T) {
	// Seed 13 draws a migration, then a replica's restart (it loads the
	// fleet from the slot's new primary), then two kills of the slot's
	// primary.
	done := storeSoak(t, func(o *Options) { o.RedisCluster = true }, 13,
		FaultRedisReshard, FaultRedisReshard, FaultRedisClusterKill, FaultKillReplica)
	if done[FaultRedisReshard] == 0 || done[FaultRedisClusterKill] == 0 {
		t.Errorf("%d slot migrations and %d primary kills done, want at least one of each", done[FaultRedisReshard], done[FaultRedisClusterKill])
	}
}

// storeSoak runs a short soak of 12 agents for 50 s on the store setup
// makes, with faults drawn from kinds by seed, and requires it to pass.
// It returns how many faults of each kind were done without error.
func storeSoak(t *testing.T, setup func(*Options), seed uint64, kinds ...string) map[string]int {
	t.Helper()
	opts := soakOptions(t)
	setup(&opts)
	opts.Agents, opts.Services, opts.Churn = 12, 5, 2
	opts.Duration, opts.FaultEvery, opts.CheckEvery, opts.PolicyEvery = 50*time.Second, 8*time.Second, time.Minute, 20*time.Second
	opts.Faults, opts.Seed = kinds, seed
	rep, err := RunChaos(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range rep.Failures {
		t.Errorf("soak failure: %s", f)
	}
	done := map[string]int{}
	for _, f := range rep.Faults {
		t.Logf("%s at %.1fs on %s: %s %s", f.Kind, f.At, f.Target, f.Note, f.Error)
		if f.Error == "" {
			done[f.Kind]++
		}
	}
	if !rep.Passed {
		t.Errorf("the soak did not pass")
	}
	return done
}

// TestChaosHostileAgent runs a short soak whose only fault is a hostile
// agent: one cluster's certificate used against a replica to hold
// connections and streams, Sync streams without a Hello and unfinished
// large messages. It requires that every fault passed its own checks
// (other agents connected, a restarted agent welcomed, a new admin
// connection served, the replica's memory bounded) and that every check
// converged.
func TestChaosHostileAgent(t *testing.T) {
	opts := soakOptions(t)
	opts.Agents, opts.Services, opts.Churn = 12, 5, 2
	opts.Duration, opts.FaultEvery, opts.CheckEvery, opts.PolicyEvery = 40*time.Second, 10*time.Second, time.Minute, 20*time.Second
	opts.Faults = []string{FaultHostileAgent}
	opts.Seed = 11
	rep, err := RunChaos(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Faults) == 0 {
		t.Fatal("no hostile agent fault ran")
	}
	for _, f := range rep.Faults {
		if f.Error != "" {
			t.Errorf("hostile agent %s: %s (%s)", f.Target, f.Error, f.Note)
		}
	}
	for _, f := range rep.Failures {
		t.Errorf("soak failure: %s", f)
	}
	if !rep.Passed {
		t.Errorf("the soak did not pass")
	}
}

func TestValidateChaosRollout(t *testing.T) {
	for name, tc := range map[string]struct {
		edit func(*Options)
		want string // a part of the error; "" for none
	}{
		"with --chaos":      {func(o *Options) {}, ""},
		"without --chaos":   {func(o *Options) { o.Chaos = false }, "--chaos-rollout is a mode of --chaos"},
		"no policy edits":   {func(o *Options) { o.PolicyEvery = 0 }, "--policy-every must be positive"},
		"on Redis Sentinel": {func(o *Options) { o.RedisSentinel = true }, ""},
	} {
		t.Run(name, func(t *testing.T) {
			o := DefaultChaosOptions()
			o.ChaosRollout = true
			tc.edit(&o)
			err := o.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Validate() = %v, want an error with %q", err, tc.want)
			}
		})
	}
}
