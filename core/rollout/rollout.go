package rollout

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Phase is where a rollout is.
type Phase string

// The phases of a rollout.
const (
	// Progressing: stages are released as they stay healthy.
	Progressing Phase = "Progressing"
	// Paused: nothing more is released until Resume (a failure beyond
	// the budget, a missed deadline, or an administrator).
	Paused Phase = "Paused"
	// Completed: every cluster holds the new revision.
	Completed Phase = "Completed"
	// Undone: every cluster holds the previous revision again.
	Undone Phase = "Undone"
)

// ClusterPhase is where one cluster of a rollout is.
type ClusterPhase string

// The phases of a cluster in a rollout.
const (
	// Pending: not released; the cluster holds the previous revision.
	Pending ClusterPhase = "Pending"
	// Releasing: released, not yet healthy for its stage's MinHealthy.
	Releasing ClusterPhase = "Progressing"
	// Succeeded: released and healthy for MinHealthy.
	Succeeded ClusterPhase = "Succeeded"
	// Failed: released, and its agent reported apply errors, or the
	// revision added an error diagnostic for it.
	Failed ClusterPhase = "Failed"
)

// Stage is one stage of a rollout, its counts resolved against its
// clusters when the rollout was planned.
type Stage struct {
	Name             string
	MaxConcurrent    int
	MaxFailures      int
	MinHealthy       time.Duration
	ProgressDeadline time.Duration
	Approval         bool
}

// Cluster is one cluster of a rollout.
type Cluster struct {
	// Stage is the index of the cluster's stage.
	Stage  int
	Phase  ClusterPhase
	Reason string `json:",omitempty"`
	// Released is when the cluster moved to the new revision.
	Released time.Time `json:",omitzero"`
	// HealthySince is when the cluster was last seen becoming healthy;
	// zero while it is not.
	HealthySince time.Time `json:",omitzero"`
}

// Rollout moves the fleet from one revision to another, stage by stage.
type Rollout struct {
	// ID numbers the fleet's rollouts from 1.
	ID uint64
	// From and To are the revisions, by hash.
	From, To string
	Phase    Phase
	// Reason says why the rollout is paused, or what it waits for.
	Reason string `json:",omitempty"`
	// Stage is the index of the current stage; len(Stages) once every
	// stage is done.
	Stage int
	// StageStarted is when the current stage started (or was approved,
	// or resumed): its ProgressDeadline counts from then.
	StageStarted time.Time
	Stages       []Stage
	// Strategy is the strategy the rollout was planned with, pinned: an
	// edit of the strategy counts from the next rollout on.
	Strategy *policyv1alpha1.RolloutStrategySpec
	// Approved are the names of the gated stages an administrator approved.
	Approved []string `json:",omitempty"`
	Clusters map[string]*Cluster
	Started  time.Time
	Ended    time.Time `json:",omitzero"`
}

// Plan returns a rollout numbered id from revision from to revision to
// over the clusters, staged by spec: each cluster in the first stage
// that selects it, those no stage selects in a last stage of their own.
func Plan(id uint64, from, to string, spec *policyv1alpha1.RolloutStrategySpec, clusters []policyv1alpha1.ClusterMeta, now time.Time) *Rollout {
	r := &Rollout{ID: id, From: from, To: to, Phase: Progressing, StageStarted: now, Started: now, Clusters: map[string]*Cluster{}, Strategy: spec.DeepCopy()}
	counts := make([]int, len(spec.Stages)+1)
	for _, c := range clusters {
		i := stageOf(spec, c)
		counts[i]++
		r.Clusters[c.Name] = &Cluster{Stage: i, Phase: Pending}
	}
	defaults := policyv1alpha1.RolloutStage{MinHealthy: spec.MinHealthy, MaxFailures: spec.MaxFailures, ProgressDeadline: spec.ProgressDeadline}
	stages := slices.Clone(spec.Stages)
	if counts[len(spec.Stages)] > 0 {
		defaults.Name = "rest"
		for _, s := range stages {
			if s.Name == defaults.Name {
				defaults.Name = "" // stage-N
			}
		}
		stages = append(stages, defaults)
	}
	for i, s := range stages {
		r.Stages = append(r.Stages, Stage{
			Name:             s.StageName(i),
			MaxConcurrent:    max(1, policyv1alpha1.Scaled(s.MaxConcurrent, counts[i], counts[i], true)),
			MaxFailures:      policyv1alpha1.Scaled(cmp.Or(s.MaxFailures, spec.MaxFailures), counts[i], 0, false),
			MinHealthy:       duration(cmp.Or(s.MinHealthy, spec.MinHealthy), policyv1alpha1.DefaultMinHealthy),
			ProgressDeadline: duration(cmp.Or(s.ProgressDeadline, spec.ProgressDeadline), policyv1alpha1.DefaultProgressDeadline),
			Approval:         s.Approval,
		})
	}
	return r
}

func stageOf(spec *policyv1alpha1.RolloutStrategySpec, c policyv1alpha1.ClusterMeta) int {
	for i := range spec.Stages {
		if spec.Stages[i].SelectsCluster(c) {
			return i
		}
	}
	return len(spec.Stages)
}

func duration(d *metav1.Duration, def time.Duration) time.Duration {
	if d == nil {
		return def
	}
	return d.Duration
}

// Health is what the owner observed of a released cluster.
type Health struct {
	// Healthy: the agent is connected, every output of the new revision
	// is acked without errors, and the revision added no error
	// diagnostic for the cluster.
	Healthy bool
	// Failed: a definite failure (apply errors, an error diagnostic the
	// revision added), as opposed to not healthy yet (outputs not yet
	// acked, the agent away).
	Failed bool
	Reason string
}

// Active reports whether the rollout still runs (Progressing or Paused).
func (r *Rollout) Active() bool { return r.Phase == Progressing || r.Phase == Paused }

// Observe records a cluster's health as seen at now. Only released
// clusters of an active rollout are judged; a cluster that succeeded in
// a stage already done stays so.
func (r *Rollout) Observe(name string, h Health, now time.Time) {
	c, ok := r.Clusters[name]
	if !ok || !r.Active() || c.Phase == Pending || (c.Phase == Succeeded && c.Stage < r.Stage) {
		return
	}
	switch {
	case h.Failed:
		c.Phase, c.Reason, c.HealthySince = Failed, h.Reason, time.Time{}
	case !h.Healthy:
		c.Phase, c.Reason, c.HealthySince = Releasing, h.Reason, time.Time{}
	default:
		if c.HealthySince.IsZero() {
			c.HealthySince = now
		}
		if c.Phase == Failed {
			c.Phase = Releasing
		}
		c.Reason = ""
	}
}

// Advance moves the rollout on at now: clusters healthy for their
// stage's MinHealthy succeed, a stage whose clusters all succeeded gives
// way to the next, a stage over its failure budget or past its deadline
// pauses the rollout, and the current stage releases clusters up to its
// MaxConcurrent. It reports whether anything changed.
func (r *Rollout) Advance(now time.Time) bool {
	if r.Phase != Progressing {
		return false
	}
	changed := false
	set := func(f func()) { f(); changed = true }
	for r.Stage < len(r.Stages) {
		st := r.Stages[r.Stage]
		for s := 0; s <= r.Stage; s++ {
			if failed := r.failed(s); len(failed) > r.Stages[s].MaxFailures {
				set(func() {
					r.Phase = Paused
					r.Reason = fmt.Sprintf("%d of stage %s's clusters failed, more than its budget of %d: %s", len(failed), r.Stages[s].Name, r.Stages[s].MaxFailures, strings.Join(failed, ", "))
				})
				return true
			}
		}
		if st.Approval && !slices.Contains(r.Approved, st.Name) {
			if want := "stage " + st.Name + " waits for approval"; r.Reason != want {
				set(func() { r.Reason = want })
			}
			return changed
		}
		inFlight, pending, done := 0, []string(nil), true
		for _, name := range slices.Sorted(maps.Keys(r.Clusters)) {
			c := r.Clusters[name]
			if c.Stage != r.Stage {
				continue
			}
			if c.Phase == Releasing && !c.HealthySince.IsZero() && now.Sub(c.HealthySince) >= st.MinHealthy {
				set(func() { c.Phase = Succeeded })
			}
			switch c.Phase {
			case Pending:
				pending = append(pending, name)
			case Releasing, Failed:
				inFlight++
			}
			done = done && c.Phase == Succeeded
		}
		if done {
			set(func() { r.Stage++; r.StageStarted = now; r.Reason = "" })
			continue
		}
		if now.Sub(r.StageStarted) > st.ProgressDeadline {
			set(func() {
				r.Phase = Paused
				r.Reason = fmt.Sprintf("stage %s did not become healthy within its progress deadline of %s", st.Name, st.ProgressDeadline)
			})
			return true
		}
		for _, name := range pending[:min(len(pending), max(0, st.MaxConcurrent-inFlight))] {
			c := r.Clusters[name]
			set(func() { c.Phase, c.Released, c.Reason = Releasing, now, "" })
		}
		if r.Reason != "" {
			set(func() { r.Reason = "" })
		}
		return changed
	}
	set(func() { r.Phase, r.Ended, r.Reason = Completed, now, "" })
	return true
}

// failed returns the failed clusters of stage s, sorted, with reasons.
func (r *Rollout) failed(s int) []string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(r.Clusters)) {
		if c := r.Clusters[name]; c.Stage == s && c.Phase == Failed {
			out = append(out, name+" ("+c.Reason+")")
		}
	}
	return out
}

// Errors of the administrator's actions.
var (
	ErrNotActive   = errors.New("no rollout is in progress")
	ErrNoSuchStage = errors.New("no such stage")
)

// Pause holds the rollout: nothing more is released until Resume.
func (r *Rollout) Pause(reason string) error {
	if !r.Active() {
		return ErrNotActive
	}
	r.Phase, r.Reason = Paused, cmp.Or(reason, "paused by an administrator")
	return nil
}

// Resume lets a paused rollout go on at now: the current stage's
// deadline counts again from now, and failed clusters are judged again
// (a failure that persists pauses the rollout again).
func (r *Rollout) Resume(now time.Time) error {
	if !r.Active() {
		return ErrNotActive
	}
	r.Phase, r.Reason, r.StageStarted = Progressing, "", now
	for _, c := range r.Clusters {
		if c.Phase == Failed {
			c.Phase = Releasing
		}
	}
	return nil
}

// Approve approves a gated stage, by name; "" approves the current one.
// Approving the current stage restarts its deadline at now.
func (r *Rollout) Approve(stage string, now time.Time) error {
	if !r.Active() {
		return ErrNotActive
	}
	i := slices.IndexFunc(r.Stages, func(s Stage) bool { return s.Name == stage })
	if stage == "" && r.Stage < len(r.Stages) {
		i = r.Stage
	}
	if i < 0 {
		return fmt.Errorf("approve %q: %w", stage, ErrNoSuchStage)
	}
	name := r.Stages[i].Name
	if !slices.Contains(r.Approved, name) {
		r.Approved = append(r.Approved, name)
	}
	if i == r.Stage {
		r.StageStarted = now
	}
	return nil
}

// OnPrevious returns the clusters that hold the previous revision
// (From), sorted: those not released, or all after an undo.
func (r *Rollout) OnPrevious() []string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(r.Clusters)) {
		if r.Phase == Undone || r.Clusters[name].Phase == Pending {
			out = append(out, name)
		}
	}
	if r.Phase == Completed {
		return nil
	}
	return out
}

// Join adds a cluster that joined the fleet during the rollout to the
// stage that selects it: released at once when that stage is done. It
// reports whether the cluster is new to the rollout.
func (r *Rollout) Join(c policyv1alpha1.ClusterMeta, now time.Time) bool {
	if _, ok := r.Clusters[c.Name]; ok || !r.Active() || len(r.Stages) == 0 {
		return false
	}
	i := len(r.Stages) - 1
	if r.Strategy != nil {
		i = min(stageOf(r.Strategy, c), i)
	}
	cl := &Cluster{Stage: i, Phase: Pending}
	if i < r.Stage {
		cl.Phase, cl.Released = Releasing, now
	}
	r.Clusters[c.Name] = cl
	return true
}

// Leave forgets a cluster that left the fleet (deregistered).
func (r *Rollout) Leave(name string) { delete(r.Clusters, name) }

// Counts are a rollout's clusters by what they are doing.
type Counts struct {
	Total, Released, Healthy, Failed, Pending int
}

// Counts counts the rollout's clusters: released are those on the new
// revision, healthy those released and healthy now.
func (r *Rollout) Counts() Counts {
	var n Counts
	for _, c := range r.Clusters {
		n.Total++
		switch {
		case r.Phase == Undone || c.Phase == Pending:
			n.Pending++
			continue
		case c.Phase == Failed:
			n.Failed++
		case c.Phase == Succeeded || !c.HealthySince.IsZero():
			n.Healthy++
		}
		n.Released++
	}
	return n
}
