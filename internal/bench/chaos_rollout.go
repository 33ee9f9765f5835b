package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/meshrelay/meshrelay/core/rollout"
	"github.com/meshrelay/meshrelay/internal/adminclient"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// waveLabel is the cluster label the soak's RolloutStrategy stages by.
const waveLabel = "bench.meshrelay.io/wave"

// The soak's rollout timing: an operator turn every operatorEvery, a
// gated stage approved once it waited approveAfter, a pause of the
// soak's own held operatorPause.
const (
	operatorEvery = 2 * time.Second
	approveAfter  = 4 * time.Second
	operatorPause = 10 * time.Second
	adminTimeout  = 3 * time.Second
)

// ChaosStrategyYAML returns the soak's RolloutStrategy: three stages by
// the wave label (canary, early, then late behind an approval gate), 3s
// of health each, and a 60s progress deadline.
func ChaosStrategyYAML() []byte {
	return fmt.Appendf(nil, `apiVersion: policy.meshrelay.io/v1alpha1
kind: RolloutStrategy
metadata:
  name: bench-stages
  namespace: %[1]s
spec:
  minHealthy: 3s
  progressDeadline: 60s
  stages:
  - name: canary
    clusterSelector:
      matchLabels: {%[2]s: canary}
  - name: early
    maxConcurrent: 50%%
    clusterSelector:
      matchLabels: {%[2]s: early}
  - name: late
    approval: true
    clusterSelector:
      matchExpressions:
      - {key: %[2]s, operator: In, values: [late]}
`, Namespace, waveLabel)
}

// waveOf returns the wave of cluster i: one in ten is a canary, three in
// ten early, the rest late.
func waveOf(i int) string {
	switch i % 10 {
	case 0:
		return "canary"
	case 1, 2, 3:
		return "early"
	}
	return "late"
}

// ChaosRolloutReport is what the soak's rollouts did (--chaos-rollout).
type ChaosRolloutReport struct {
	// Started counts the rollouts seen; Undone those the soak undid.
	Started int `json:"rollouts_started"`
	Undone  int `json:"rollouts_undone"`
	// Approvals, Pauses and Resumes count the soak's operator actions;
	// ResumedAfter lists why the rollouts it resumed, but for its own
	// pauses, had paused (a failure, a missed deadline).
	Approvals    int      `json:"approvals"`
	Pauses       int      `json:"pauses"`
	Resumes      int      `json:"resumes"`
	ResumedAfter []string `json:"resumed_after,omitempty"`
	// Lost lists the times the rollout record went missing or back to an
	// older rollout while one was in progress.
	Lost []string `json:"lost,omitempty"`
	// Unreleased lists the clusters the record released and then put
	// back on the previous revision, without an undo, as the soak read
	// the record.
	Unreleased []string `json:"unreleased,omitempty"`
	// FinalSeconds is how long driving the last rollouts to completion
	// took after the faults stopped; FinalRevision is the revision the
	// fleet then held.
	FinalSeconds  float64 `json:"final_seconds"`
	FinalRevision string  `json:"final_revision"`
}

// rolloutOps is the soak's rollout operator: it approves gated stages,
// pauses and resumes, undoes some rollouts, and resumes the rollouts a
// failure paused, as an administrator would.
type rolloutOps struct {
	rng *rand.Rand
	rep *ChaosRolloutReport
	// admins are its own admin connections, one per replica, dialled once:
	// a replica's restart (same address, CA and token) does not replace
	// them while the faults run.
	admins []opsAdmin
	// markers are the policy markers of the revisions, by hash.
	markers map[string]int
	// last is the rollout last seen, whether it was active, and its
	// clusters' states.
	last       uint64
	lastActive bool
	states     map[string]string
	// fate is what the operator does to the current rollout once some of
	// its clusters are released: "undo", "pause" or nothing.
	fate        string
	pausedUntil time.Time
	waiting     time.Time // since when a gated stage waits, zero if none
	// undone are the marker pairs (to, from) of the rollouts undone: an
	// output going back from one to the other is the undo.
	undone map[[2]int]bool
}

func newRolloutOps(seed uint64) *rolloutOps {
	return &rolloutOps{
		rng: rand.New(rand.NewPCG(seed, 0x0110)), rep: &ChaosRolloutReport{},
		markers: map[string]int{}, undone: map[[2]int]bool{},
	}
}

// opsAdmin is the operator's admin connection to one replica.
type opsAdmin struct {
	id     string
	client *adminclient.Client
}

// dialAdmins opens the operator's admin connections.
func (o *rolloutOps) dialAdmins(replicas []*serverProcess) error {
	for _, p := range replicas {
		c, err := adminclient.Dial(adminclient.Options{Addr: p.relay, CAFile: p.caBundle, ServerName: "127.0.0.1", TokenFile: p.adminToken})
		if err != nil {
			return fmt.Errorf("rollout operator: admin of %s: %w", p.id, err)
		}
		o.admins = append(o.admins, opsAdmin{id: p.id, client: c})
	}
	return nil
}

func (o *rolloutOps) close() {
	for _, a := range o.admins {
		a.client.Close()
	}
}

// call calls f on each replica in turn, from the first, until one
// answers within adminTimeout: a replica that is down, stopped or cut
// from the store does not.
func (o *rolloutOps) call(ctx context.Context, f func(context.Context, relayv1.AdminClient) error) error {
	var errs []error
	for _, a := range o.admins {
		actx, cancel := context.WithTimeout(a.client.Context(ctx), adminTimeout)
		err := f(actx, a.client)
		cancel()
		if err == nil || status.Code(err) == codes.NotFound || status.Code(err) == codes.FailedPrecondition || ctx.Err() != nil {
			return err
		}
		errs = append(errs, fmt.Errorf("%s: %w", a.id, err))
	}
	return errors.Join(errs...)
}

// rolloutStatus returns the fleet's rollout, as the first replica that
// answers says; nil when there was never one.
func (o *rolloutOps) rolloutStatus(ctx context.Context) (*relayv1.RolloutStatus, error) {
	var st *relayv1.RolloutStatus
	err := o.call(ctx, func(ctx context.Context, a relayv1.AdminClient) (err error) {
		st, err = a.GetRollout(ctx, &relayv1.GetRolloutRequest{})
		return err
	})
	switch {
	case status.Code(err) == codes.NotFound:
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read the rollout: %w", err)
	}
	return st, nil
}

// placementOf returns where a rollout status puts each cluster; a nil
// status (no rollout was ever recorded) puts every cluster on current.
func placementOf(st *relayv1.RolloutStatus, current string) placement {
	if st == nil {
		return placement{live: current}
	}
	p := placement{
		live: st.GetLiveRevision(), from: st.GetFromRevision(), to: st.GetToRevision(),
		active: isActive(st), onPrevious: map[string]bool{},
	}
	for _, c := range st.GetClusters() {
		if c.GetState() == string(rollout.Pending) {
			p.onPrevious[c.GetName()] = true
		}
	}
	return p
}

func isActive(st *relayv1.RolloutStatus) bool {
	return st != nil && (st.GetPhase() == string(rollout.Progressing) || st.GetPhase() == string(rollout.Paused))
}

// describe summarises a rollout status for a check.
func describe(st *relayv1.RolloutStatus) string {
	if st == nil {
		return "no rollout"
	}
	return fmt.Sprintf("rollout %d %s at stage %d/%d: %d/%d released; %s → %s, live %s",
		st.GetId(), st.GetPhase(), st.GetStage(), len(st.GetStages()), st.GetReleased(), st.GetTotal(),
		short(st.GetFromRevision()), short(st.GetToRevision()), short(st.GetLiveRevision()))
}

// gateWaiting returns the name of the current stage when it waits for
// approval.
func gateWaiting(st *relayv1.RolloutStatus) (string, bool) {
	i := int(st.GetStage())
	if st.GetPhase() != string(rollout.Progressing) || i >= len(st.GetStages()) {
		return "", false
	}
	s := st.GetStages()[i]
	return s.GetName(), s.GetApproval() && !s.GetApproved()
}

// labelClusters gives every cluster its wave label.
func (c *chaosRun) labelClusters(ctx context.Context) error {
	for _, s := range c.sims {
		err := c.ops.call(ctx, func(ctx context.Context, a relayv1.AdminClient) error {
			_, err := a.LabelCluster(ctx, &relayv1.LabelClusterRequest{Cluster: s.cluster.Name, Set: map[string]string{waveLabel: waveOf(s.index)}})
			return err
		})
		if err != nil {
			return fmt.Errorf("label %s: %w", s.cluster.Name, err)
		}
	}
	c.say("labelled %d clusters by wave for the staged rollouts", len(c.sims))
	return nil
}

// act applies an operator action.
func (c *chaosRun) act(ctx context.Context, action relayv1.RolloutActionRequest_Action, stage string) error {
	err := c.ops.call(ctx, func(ctx context.Context, a relayv1.AdminClient) error {
		_, err := a.ActOnRollout(ctx, &relayv1.RolloutActionRequest{Action: action, Stage: stage})
		return err
	})
	if err == nil {
		c.say("rollout: %s %s", strings.TrimPrefix(action.String(), "ACTION_"), stage)
	}
	return err
}

// gone reports whether a status says there is no rollout record although
// the soak saw a rollout: the store lost the record, which the replicas
// are to write back.
func (o *rolloutOps) gone(st *relayv1.RolloutStatus) bool { return st == nil && o.last > 0 }

// note records what the rollout status says happened since the last
// one seen: a new rollout, a released cluster back to Pending, or a
// record gone back to an older rollout. A status saying there is no
// record after a rollout was seen changes nothing: the replicas write a
// lost record back.
func (o *rolloutOps) note(st *relayv1.RolloutStatus, at float64) {
	if o.gone(st) {
		return
	}
	id := uint64(0)
	if st != nil {
		id = st.GetId()
	}
	switch {
	case id < o.last:
		o.rep.Lost = append(o.rep.Lost, fmt.Sprintf("at %.1fs: rollout %d (active: %t) gone; the record now says %s", at, o.last, o.lastActive, describe(st)))
	case id == o.last && isActive(st):
		for _, c := range st.GetClusters() {
			if was := o.states[c.GetName()]; was != "" && was != string(rollout.Pending) && c.GetState() == string(rollout.Pending) {
				o.rep.Unreleased = append(o.rep.Unreleased, fmt.Sprintf("at %.1fs: %s of rollout %d, %s before, Pending now; the record says %s", at, c.GetName(), id, was, describe(st)))
			}
		}
	case id > o.last:
		o.rep.Started += int(id - o.last)
		o.fate, o.waiting, o.pausedUntil = "", time.Time{}, time.Time{}
		switch n := o.rng.IntN(6); {
		case n == 0:
			o.fate = "undo"
		case n <= 2:
			o.fate = "pause"
		}
	}
	o.last, o.lastActive = id, isActive(st)
	o.states = map[string]string{}
	for _, c := range st.GetClusters() {
		o.states[c.GetName()] = c.GetState()
	}
}

// operate is one operator turn: approve a stage that waited
// approveAfter, pause and resume or undo the rollout as its fate says
// once some clusters are released, resume one a failure paused. When no
// replica answers, the turn is skipped.
func (c *chaosRun) operate(ctx context.Context) {
	o := c.ops
	st, err := o.rolloutStatus(ctx)
	if err != nil {
		return
	}
	o.note(st, time.Since(c.start).Seconds())
	if !isActive(st) {
		return
	}
	now := time.Now()
	switch {
	case st.GetPhase() == string(rollout.Paused):
		if now.Before(o.pausedUntil) {
			return
		}
		if o.pausedUntil.IsZero() {
			o.rep.ResumedAfter = append(o.rep.ResumedAfter, fmt.Sprintf("rollout %d: %s", st.GetId(), st.GetReason()))
		}
		if c.act(ctx, relayv1.RolloutActionRequest_ACTION_RESUME, "") == nil {
			o.rep.Resumes++
			o.pausedUntil = time.Time{}
		}
	case o.fate == "undo" && st.GetReleased() > 0:
		if c.act(ctx, relayv1.RolloutActionRequest_ACTION_UNDO, "") == nil {
			o.undone[[2]int{o.markers[st.GetToRevision()], o.markers[st.GetFromRevision()]}] = true
			o.rep.Undone++
			o.fate = ""
		}
	case o.fate == "pause" && st.GetReleased() > 0:
		if c.act(ctx, relayv1.RolloutActionRequest_ACTION_PAUSE, "") == nil {
			o.rep.Pauses++
			o.fate, o.pausedUntil = "", now.Add(operatorPause)
		}
	default:
		stage, waits := gateWaiting(st)
		if !waits {
			o.waiting = time.Time{}
			return
		}
		if o.waiting.IsZero() {
			o.waiting = now
		}
		if now.Sub(o.waiting) >= approveAfter && c.act(ctx, relayv1.RolloutActionRequest_ACTION_APPROVE, stage) == nil {
			o.rep.Approvals++
			o.waiting = time.Time{}
		}
	}
}

// excused reports whether an output going backwards is an undo's doing:
// the policy marker going back from an undone rollout's revision to its
// previous one.
func (c *chaosRun) excused(b Backwards) bool {
	return c.ops != nil && b.Marker == "policy" && c.ops.undone[[2]int{b.Had, b.Got}]
}

// finishRollouts drives the rollouts to completion once the faults
// stopped: it resumes, approves, and, when the last revision was undone
// and so waits for a change of the source, edits the policy once more,
// until the fleet holds the last revision written outside a rollout or
// Options.Timeout passes.
func (c *chaosRun) finishRollouts(ctx context.Context) error {
	c.faultMu.Lock()
	defer c.faultMu.Unlock()
	start := time.Now()
	deadline := start.Add(c.opts.Timeout)
	var last string
	for ctx.Err() == nil {
		st, err := c.ops.rolloutStatus(ctx)
		if err == nil {
			c.ops.note(st, time.Since(c.start).Seconds())
			last = describe(st)
			cur := c.checker.currentRevision()
			switch {
			case c.ops.gone(st):
				last = "no rollout record, after rollout " + strconv.FormatUint(c.ops.last, 10)
			case st == nil, !isActive(st) && st.GetLiveRevision() == cur:
				c.ops.rep.FinalSeconds = time.Since(start).Seconds()
				c.ops.rep.FinalRevision = short(cur)
				c.say("rollouts finished after %.1fs: %s", c.ops.rep.FinalSeconds, last)
				return nil
			case !isActive(st) && st.GetPhase() == string(rollout.Undone) && st.GetToRevision() == cur:
				if err := c.editPolicy(); err != nil {
					return err
				}
			case st.GetPhase() == string(rollout.Paused):
				if c.act(ctx, relayv1.RolloutActionRequest_ACTION_RESUME, "") == nil {
					c.ops.rep.Resumes++
				}
			default:
				if stage, waits := gateWaiting(st); waits && c.act(ctx, relayv1.RolloutActionRequest_ACTION_APPROVE, stage) == nil {
					c.ops.rep.Approvals++
				}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the rollouts did not finish within %s: %s", c.opts.Timeout, last)
		}
		sleepCtx(ctx, time.Second)
	}
	return ctx.Err()
}
