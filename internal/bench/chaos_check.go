package bench

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/meshrelay/meshrelay/api/snapshot"
)

// maxListed bounds the differences, prunes and backwards outputs a Check
// lists.
const maxListed = 20

// check waits for every fault to heal (none starts meanwhile; churn and
// policy edits are the caller's, which is not making any), then compares
// every agent's outputs with the checker's model until they agree or
// Options.Timeout passes, and records the deletions and backwards outputs
// the agents' audits saw since the last check.
func (c *chaosRun) check(ctx context.Context, label string) {
	c.faultMu.Lock()
	defer c.faultMu.Unlock()
	ck := Check{At: time.Since(c.start).Seconds(), Label: label, ConvergedSeconds: -1}
	defer func() {
		c.crep.Checks = append(c.crep.Checks, ck)
		c.say("check %q at %.1fs: converged after %.1fs, %d clusters differ, %d pruned (%d wrongly), %d backwards, agents per replica %v %s%s",
			label, ck.At, ck.ConvergedSeconds, ck.DifferentClusters, ck.Deletions, ck.WrongfulPruneCount, ck.BackwardsCount, ck.Spread, ck.Rollout, ck.Error)
	}()
	start := time.Now()
	deadline := start.Add(c.opts.Timeout)
	var want map[string]map[string]*snapshot.Snapshot
	for {
		w, where, err := c.want(ctx)
		ck.Rollout, ck.Error = where, ""
		if err != nil {
			ck.Error = err.Error()
			if c.ops == nil {
				return // the model itself is not known
			}
		} else {
			want = w
			diffs := c.differences(want)
			if len(diffs) == 0 {
				ck.ConvergedSeconds = time.Since(start).Seconds()
				break
			}
			ck.DifferentClusters = len(diffs)
			ck.Differences = diffs[:min(len(diffs), maxListed)]
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		sleepCtx(ctx, 500*time.Millisecond)
	}
	if ck.ConvergedSeconds >= 0 {
		ck.DifferentClusters, ck.Differences = 0, nil
	}
	if want == nil {
		return
	}
	c.audit(&ck, want)
	ck.Spread = c.spread()
}

// want returns every cluster's outputs as the model has them: under the
// current policies; with --chaos-rollout, under the revision the fleet's
// rollout record puts each cluster on (where describes the record), and
// under the last revision written once the rollouts were driven to their
// end (final), when the record must say so too.
func (c *chaosRun) want(ctx context.Context) (want map[string]map[string]*snapshot.Snapshot, where string, err error) {
	if c.ops == nil {
		want, err = c.checker.expected(ctx)
		return want, "", err
	}
	st, err := c.ops.rolloutStatus(ctx)
	if err != nil {
		return nil, "", err
	}
	if c.ops.gone(st) {
		return nil, "no rollout record", fmt.Errorf("no rollout record, though rollout %d was seen: lost, and not written back yet", c.ops.last)
	}
	c.ops.note(st, time.Since(c.start).Seconds())
	where = describe(st)
	cur := c.checker.currentRevision()
	p := placementOf(st, cur)
	if c.final && (p.active || p.live != cur) {
		return nil, where, fmt.Errorf("the rollouts were driven to their end, yet the record says %s, not revision %s live", where, short(cur))
	}
	want, err = c.checker.expectedOn(ctx, p)
	return want, where, err
}

// spread returns how many agents each live replica serves.
func (c *chaosRun) spread() map[string]int {
	out := map[string]int{}
	for _, p := range c.servers {
		if !p.isKilled() {
			out[p.id] = len(c.servedBy(p))
		}
	}
	return out
}

// differences compares every agent's outputs with want and returns the
// clusters that differ.
func (c *chaosRun) differences(want map[string]map[string]*snapshot.Snapshot) []Difference {
	var out []Difference
	for _, s := range c.sims {
		if d := compareOutputs(s.cluster.Name, want[s.cluster.Name], s.holding()); !d.Empty() {
			out = append(out, d)
		}
	}
	return out
}

// audit takes what the agents' audits saw since the last check into ck.
func (c *chaosRun) audit(ck *Check, want map[string]map[string]*snapshot.Snapshot) {
	for _, s := range c.sims {
		s.mu.Lock()
		dels, dropped, back := s.audit.take()
		s.mu.Unlock()
		ck.Deletions += len(dels) + dropped
		wrong := wrongfulPrunes(dels, want)
		ck.WrongfulPruneCount += len(wrong)
		back = slices.DeleteFunc(back, c.excused)
		ck.BackwardsCount += len(back)
		ck.WrongfulPrunes = append(ck.WrongfulPrunes, wrong[:min(len(wrong), maxListed-len(ck.WrongfulPrunes))]...)
		ck.Backwards = append(ck.Backwards, back[:min(len(back), maxListed-len(ck.Backwards))]...)
	}
}

// storm kills victim and measures its agents' return: registrations and
// full resends per second from the agents' counters every 100ms, until
// every moved agent reconnected and the live replicas computed the
// model's outputs for every cluster. Then it starts the replica again.
func (c *chaosRun) storm(ctx context.Context, victim *serverProcess, when string) StormReport {
	moved := c.servedBy(victim)
	rep := StormReport{When: when, Killed: victim.id, MovedAgents: len(moved), ReconnectedSeconds: -1, ConvergedSeconds: -1}
	want, _, err := c.want(ctx)
	if err != nil {
		c.say("storm: no model: %v", err)
		return rep
	}
	connects0 := make([]int64, len(moved))
	for i, s := range moved {
		connects0[i] = s.agent.Stats.Connects.Load()
	}
	total := func(f func(*sim) int64) int64 {
		var n int64
		for _, s := range moved {
			n += f(s)
		}
		return n
	}
	connects := func(s *sim) int64 { return s.agent.Stats.Connects.Load() }
	resyncs := func(s *sim) int64 { return s.agent.Stats.FullInputs.Load() }
	c.say("storm: killing replica %s, which serves %d agents", victim.id, len(moved))
	victim.kill()
	at := time.Now()
	var connSeries, resyncSeries []int64
	var why string // why the replicas did not match the model, last time
	for deadline := at.Add(c.opts.Timeout); time.Now().Before(deadline) && ctx.Err() == nil; sleepCtx(ctx, 100*time.Millisecond) {
		connSeries = append(connSeries, total(connects))
		resyncSeries = append(resyncSeries, total(resyncs))
		if rep.ReconnectedSeconds < 0 && allReconnected(moved, connects0) {
			rep.ReconnectedSeconds = time.Since(at).Seconds()
		}
		if rep.ReconnectedSeconds < 0 {
			continue
		}
		if why = c.servedMismatch(want); why == "" {
			rep.ConvergedSeconds = time.Since(at).Seconds()
			break
		}
	}
	if rep.ConvergedSeconds < 0 && why != "" {
		c.say("storm: the replicas still differ from the model: %s", why)
	}
	rep.PeakConnectsPerSecond, rep.PeakResyncsPerSecond = peakPerSecond(connSeries), peakPerSecond(resyncSeries)
	c.say("storm: %d agents back after %.1fs, converged after %.1fs; peak %.0f registrations/s, %.0f resyncs/s",
		len(moved), rep.ReconnectedSeconds, rep.ConvergedSeconds, rep.PeakConnectsPerSecond, rep.PeakResyncsPerSecond)
	if err := victim.restart(context.WithoutCancel(ctx), c.opts.Timeout); err != nil {
		c.crep.Failures = append(c.crep.Failures, "restart after the storm: "+err.Error())
	}
	return rep
}

// busiest returns the replica serving the most agents.
func (c *chaosRun) busiest() *serverProcess {
	best, most := c.servers[0], -1
	for _, p := range c.servers {
		if n := len(c.servedBy(p)); n > most {
			best, most = p, n
		}
	}
	return best
}

// servedBy returns the agents connected to p, as its admin API reports.
func (c *chaosRun) servedBy(p *serverProcess) []*sim {
	served, err := replicaSet{p}.servedOutputs()
	if err != nil {
		return nil
	}
	var out []*sim
	for _, s := range c.sims {
		if _, ok := served[s.cluster.Name]; ok {
			out = append(out, s)
		}
	}
	return out
}

// servedMismatch returns why the live replicas do not serve every cluster
// with the model's outputs, or "" when they do.
func (c *chaosRun) servedMismatch(want map[string]map[string]*snapshot.Snapshot) string {
	served, err := c.servers.servedOutputs()
	if err != nil {
		return "status: " + err.Error()
	}
	for _, s := range c.sims {
		got, ok := served[s.cluster.Name]
		if !ok {
			return fmt.Sprintf("%s is connected to no live replica", s.cluster.Name)
		}
		w := want[s.cluster.Name]
		hashes := map[string]string{}
		for backend, snap := range w {
			hashes[backend] = snap.Hash().Short()
		}
		if !maps.Equal(got, hashes) {
			return fmt.Sprintf("%s: the replica serving it (%s) stores %v, the model has %v", s.cluster.Name, c.servingReplica(s.cluster.Name), got, hashes)
		}
	}
	return ""
}

// servingReplica names the live replicas whose admin API says they serve
// cluster, for a report.
func (c *chaosRun) servingReplica(cluster string) string {
	var ids []string
	for _, p := range c.servers {
		if p.isKilled() {
			continue
		}
		if served, err := (replicaSet{p}).servedOutputs(); err == nil {
			if _, ok := served[cluster]; ok {
				ids = append(ids, p.id)
			}
		}
	}
	return strings.Join(ids, ", ")
}

func allReconnected(moved []*sim, before []int64) bool {
	for i, s := range moved {
		if s.agent.Stats.Connects.Load() <= before[i] {
			return false
		}
	}
	return true
}

// peakPerSecond returns the largest increase over ten consecutive
// 100ms samples of a counter.
func peakPerSecond(series []int64) float64 {
	var peak int64
	for i := range series {
		j := max(i-10, 0)
		peak = max(peak, series[i]-series[j])
	}
	return float64(peak)
}

// finish reads the memory growth, the bench process and the load, and
// decides whether the soak passed.
func (c *chaosRun) finish() {
	rep := c.crep
	rep.Memory = c.sampler.growth(min(max(c.opts.Duration/10, 30*time.Second), 5*time.Minute))
	rep.Client, _ = readProc(os.Getpid())
	rep.LoadAverage = loadAverage()
	for _, f := range rep.Faults {
		if f.Error != "" {
			rep.Failures = append(rep.Failures, fmt.Sprintf("fault %s on %s at %.1fs: %s", f.Kind, f.Target, f.At, f.Error))
		}
	}
	for _, ck := range rep.Checks {
		where := fmt.Sprintf("check %q at %.1fs", ck.Label, ck.At)
		if ck.Error != "" {
			rep.Failures = append(rep.Failures, where+": "+ck.Error)
		} else if ck.ConvergedSeconds < 0 {
			rep.Failures = append(rep.Failures, fmt.Sprintf("%s: %d clusters' outputs differ from the model", where, ck.DifferentClusters))
		}
		if ck.WrongfulPruneCount > 0 {
			rep.Failures = append(rep.Failures, fmt.Sprintf("%s: %d wrongful prunes", where, ck.WrongfulPruneCount))
		}
		if ck.BackwardsCount > 0 {
			var which []string
			for _, b := range ck.Backwards {
				which = append(which, fmt.Sprintf("%s %s %s: %s marker %d after %d at %s", b.Cluster, b.Backend, b.ID, b.Marker, b.Got, b.Had, b.At.Format("15:04:05.000")))
			}
			rep.Failures = append(rep.Failures, fmt.Sprintf("%s: %d outputs went backwards (%s)", where, ck.BackwardsCount, strings.Join(which, "; ")))
		}
	}
	if rep.Rollouts != nil {
		for _, lost := range rep.Rollouts.Lost {
			rep.Failures = append(rep.Failures, "the rollout record was lost "+lost)
		}
		for _, u := range rep.Rollouts.Unreleased {
			rep.Failures = append(rep.Failures, "a released cluster went back to the previous revision "+u)
		}
	}
	for _, s := range rep.Storms {
		if s.ConvergedSeconds < 0 {
			rep.Failures = append(rep.Failures, fmt.Sprintf("the reconnect storm at the %s did not converge", s.When))
		}
	}
	rep.Passed = len(rep.Failures) == 0
}
