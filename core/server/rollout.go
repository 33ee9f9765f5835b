package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/meshrelay/meshrelay/api/meta"
	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/engine"
	"github.com/meshrelay/meshrelay/core/rollout"
	"github.com/meshrelay/meshrelay/core/store"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// rolloutRecord names the fleet's rollout state in the store; each
// revision a rollout names is kept beside it, under revisionRecord.
const rolloutRecord = "fleet"

func revisionRecord(h string) string { return "revision/" + h }

// rollouts runs the staged rollout on this replica: it hands the
// management source's policies to the rollout record (core/rollout),
// judges the released clusters whose agents are connected here, advances
// the rollout by compare-and-set in the store, and sets the engine's
// revisions from the record. Every replica does so; the store's
// compare-and-set makes each step happen once.
type rollouts struct {
	s    *Server
	kick chan struct{}

	mu sync.Mutex
	// source is the management source's policy set for the engine and
	// its RolloutStrategy (nil for none); sourceSet says the source
	// published.
	source    *snapshot.Snapshot
	strategy  *policyv1alpha1.RolloutStrategy
	sourceSet bool
	// revisions caches the revisions' policy sets by hash.
	revisions map[string]*snapshot.Snapshot
	// last is the record as this replica last read or wrote it.
	last *rollout.Record
	// applied is what was last handed to the engine.
	applied string
}

func newRollouts(s *Server) *rollouts {
	return &rollouts{s: s, kick: make(chan struct{}, 1), revisions: map[string]*snapshot.Snapshot{}, last: &rollout.Record{}}
}

// setSource records the management source's policies: those the engine
// translates, and the RolloutStrategy among them.
func (r *rollouts) setSource(p *snapshot.Snapshot, strategy *policyv1alpha1.RolloutStrategy) {
	r.mu.Lock()
	r.source, r.strategy, r.sourceSet = p, strategy, true
	r.revisions[p.Hash().String()] = p
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// run judges and advances the rollout every RolloutInterval and after
// each change of the source, until ctx ends.
func (r *rollouts) run(ctx context.Context) error {
	t := time.NewTicker(r.s.opts.RolloutInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.kick:
		case <-t.C:
		}
		if err := r.step(ctx, time.Now()); err != nil && ctx.Err() == nil {
			r.s.log.Warn("staged rollout: step", "error", err)
		}
	}
}

// step is one turn: the record is read, takes the source, the
// observations of this replica's clusters and the time, and is written
// back when it changed; then the engine takes its revisions.
func (r *rollouts) step(ctx context.Context, now time.Time) error {
	r.mu.Lock()
	source, strategy, set := r.source, r.strategy, r.sourceSet
	r.mu.Unlock()
	if !set {
		return nil
	}
	desired := source.Hash().String()
	before := r.lastRecord().Copy()
	rec, err := r.update(ctx, func(rec *rollout.Record) (bool, error) {
		var spec *policyv1alpha1.RolloutStrategySpec
		if strategy != nil {
			spec = &strategy.Spec
		}
		// The registry is listed only when a rollout runs or may start:
		// an idle fleet's step is one record read.
		var clusters []policyv1alpha1.ClusterMeta
		if rec.Active() != nil || (spec != nil && desired != rec.Live && desired != rec.Rejected) {
			var err error
			if clusters, err = r.clusters(ctx); err != nil {
				return false, err
			}
		}
		changed := false
		if ro := rec.Active(); ro != nil {
			changed = r.membership(ro, clusters, now) || changed
		} else if desired != rec.Live && desired != rec.Rejected {
			// About to become live or to start a rollout: every replica,
			// and this one after a restart, must be able to read it.
			if err := r.keepRevision(ctx, source); err != nil {
				return false, err
			}
		}
		// In safe mode a rollout holds: none starts, none advances. A
		// change without a strategy is live at once, as it always was.
		safe := r.s.inSafeMode()
		if !safe || spec == nil || rec.Live == "" {
			changed = rec.Source(desired, spec, clusters, now) || changed
		}
		if ro := rec.Active(); ro != nil && !safe {
			changed = r.observe(ctx, ro, now) || changed
			changed = rec.Advance(now) || changed
		}
		return changed, nil
	})
	if err != nil {
		// A source without a strategy and no rollout this replica knows
		// of: the change applies at once, as when there is no rollout.
		if strategy == nil && r.lastRecord().Active() == nil {
			r.apply(ctx, &rollout.Record{Live: desired})
		}
		return err
	}
	if strategy == nil && rec.Active() == nil && desired != rec.Rejected {
		// Without a strategy and outside a rollout, this replica's source
		// is live here at once, whatever the record names: the record may
		// hold the older source of a replica whose policy watch lags (its
		// write won the compare-and-set), and applying it would take this
		// replica's clusters back to the older policies until the next
		// step. The record's Live stays the bookkeeping a later rollout
		// starts from.
		r.apply(ctx, &rollout.Record{Live: desired})
	} else {
		r.apply(ctx, rec)
	}
	for _, h := range supersededRevisions(before, rec) {
		// No longer live and no rollout's to undo: the store keeps only
		// the revisions a replica may have to translate.
		if err := r.s.deps.Store.DeleteRollout(ctx, revisionRecord(h)); err != nil {
			r.s.log.Warn("staged rollout: forget a superseded revision", "revision", h, "error", err)
		}
	}
	return nil
}

// supersededRevisions returns the revisions the stored record after no
// longer names: live, rejected or in a rollout in before (as this replica
// last read it), none of these in after.
func supersededRevisions(before, after *rollout.Record) []string {
	named := func(rec *rollout.Record) []string {
		out := []string{rec.Live, rec.Rejected}
		if rec.Rollout != nil {
			out = append(out, rec.Rollout.From, rec.Rollout.To)
		}
		return out
	}
	now := named(after)
	var out []string
	for _, h := range named(before) {
		if h != "" && !slices.Contains(now, h) && !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	return out
}

// update reads the record, lets change change it, and writes it back
// with compare-and-set when change says it changed; a conflict means
// another replica took the step: its record is the one returned.
func (r *rollouts) update(ctx context.Context, change func(*rollout.Record) (bool, error)) (*rollout.Record, error) {
	ctx, cancel := context.WithTimeout(ctx, storeReadTimeout)
	defer cancel()
	stored, err := r.s.deps.Store.GetRollout(ctx, rolloutRecord)
	if errors.Is(err, store.ErrNotFound) {
		stored, err = r.restore(ctx, store.RolloutRecord{Name: rolloutRecord})
	}
	if err != nil {
		return nil, fmt.Errorf("read the rollout record: %w", err)
	}
	rec, err := rollout.Decode(stored.Data)
	if err != nil {
		return nil, err
	}
	if rec.Writes < r.lastRecord().Writes {
		// An older copy than this replica's: written back by a replica
		// that had not read the last writes when the store lost the
		// record. Stepping from it would take clusters released since
		// back to the previous revision.
		if stored, err = r.restore(ctx, stored); err != nil {
			return nil, fmt.Errorf("read the rollout record: %w", err)
		}
		if rec, err = rollout.Decode(stored.Data); err != nil {
			return nil, err
		}
	}
	changed, err := change(rec)
	if err != nil {
		return nil, err
	}
	if changed {
		rec.Writes++
		stored.Name, stored.Data = rolloutRecord, rec.Encode()
		if _, err := r.s.deps.Store.CompareAndPutRollout(ctx, stored); err != nil {
			if errors.Is(err, store.ErrConflict) {
				// Another replica took the step; its record is newer
				// unless a write-back of an older copy came between
				// (then the last copy stands, and the next step writes
				// it back).
				if rec, err := r.read(ctx); err != nil || rec.Writes >= r.lastRecord().Writes {
					return rec, err
				}
				return r.lastRecord(), nil
			}
			return nil, fmt.Errorf("write the rollout record: %w", err)
		}
	}
	r.mu.Lock()
	r.last = rec
	r.mu.Unlock()
	return rec, nil
}

// restore writes back the record this replica last read over cur, the
// stored one, when the store holds none or an older copy (fewer writes):
// the store lost it (a Redis restarted empty, a failover that dropped the
// last writes), and without it the next step would make the source's
// revision live at once, every stage skipped, or take the clusters
// released since the older copy back. Each replica writes back its last
// copy with compare-and-set; a copy with more writes replaces one with
// fewer, so the newest any replica knows wins. The revisions the record
// names are kept again. It returns the stored record: cur when this
// replica knows none newer.
func (r *rollouts) restore(ctx context.Context, cur store.RolloutRecord) (store.RolloutRecord, error) {
	last := r.lastRecord()
	if last.Empty() {
		return cur, nil
	}
	hashes, _ := last.Revisions()
	for _, h := range hashes {
		p, err := r.revision(ctx, h)
		if err != nil {
			return store.RolloutRecord{}, fmt.Errorf("write back the lost rollout record: %w", err)
		}
		if err := r.keepRevision(ctx, p); err != nil {
			return store.RolloutRecord{}, fmt.Errorf("write back the lost rollout record: %w", err)
		}
	}
	for {
		written, err := r.s.deps.Store.CompareAndPutRollout(ctx, store.RolloutRecord{Name: rolloutRecord, Data: last.Encode(), Version: cur.Version})
		if err == nil {
			r.s.log.Warn("staged rollout: the store had lost the rollout record; wrote back this replica's last copy", "writes", last.Writes)
			return written, nil
		}
		if !errors.Is(err, store.ErrConflict) {
			return store.RolloutRecord{}, fmt.Errorf("write back the lost rollout record: %w", err)
		}
		if cur, err = r.s.deps.Store.GetRollout(ctx, rolloutRecord); err != nil {
			return store.RolloutRecord{}, err
		}
		other, err := rollout.Decode(cur.Data)
		if err != nil {
			return store.RolloutRecord{}, err
		}
		if other.Writes >= last.Writes {
			return cur, nil
		}
	}
}

// read returns the stored record. A store that holds none leaves this
// replica's last copy as it was: the store may have lost the record, and
// the next step writes that copy back (restore).
func (r *rollouts) read(ctx context.Context) (*rollout.Record, error) {
	stored, err := r.s.deps.Store.GetRollout(ctx, rolloutRecord)
	if errors.Is(err, store.ErrNotFound) {
		return &rollout.Record{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the rollout record: %w", err)
	}
	rec, err := rollout.Decode(stored.Data)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	if r.last == nil || rec.Writes >= r.last.Writes {
		// An older copy leaves the last one for the write-back (update).
		r.last = rec
	}
	r.mu.Unlock()
	return rec, nil
}

func (r *rollouts) lastRecord() *rollout.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// soaking returns the clusters of the rollout in progress, as this
// replica last read it, that are released and have not succeeded yet:
// soaking, or failed.
func (r *rollouts) soaking() map[string]bool {
	ro := r.lastRecord().Active()
	if ro == nil {
		return nil
	}
	out := map[string]bool{}
	for name, c := range ro.Clusters {
		if c.Phase == rollout.Releasing || c.Phase == rollout.Failed {
			out[name] = true
		}
	}
	return out
}

// keepRevision stores a revision's policy set, so that every replica, and
// this one after a restart, can translate it while it is live.
func (r *rollouts) keepRevision(ctx context.Context, p *snapshot.Snapshot) error {
	data, err := snapshot.Marshal(p)
	if err != nil {
		return fmt.Errorf("keep revision: %w", err)
	}
	_, err = r.s.deps.Store.CompareAndPutRollout(ctx, store.RolloutRecord{Name: revisionRecord(p.Hash().String()), Data: data})
	if err != nil && !errors.Is(err, store.ErrConflict) { // conflict: kept already
		return fmt.Errorf("keep revision %s: %w", p.Hash().Short(), err)
	}
	return nil
}

// revision returns a revision's policy set, from the cache or the store.
func (r *rollouts) revision(ctx context.Context, h string) (*snapshot.Snapshot, error) {
	r.mu.Lock()
	p, ok := r.revisions[h]
	r.mu.Unlock()
	if ok {
		return p, nil
	}
	stored, err := r.s.deps.Store.GetRollout(ctx, revisionRecord(h))
	if err != nil {
		return nil, fmt.Errorf("read revision %s: %w", h, err)
	}
	if p, err = snapshot.Unmarshal(stored.Data); err != nil {
		return nil, fmt.Errorf("read revision %s: %w", h, err)
	}
	if p.Hash().String() != h {
		return nil, fmt.Errorf("read revision %s: the stored policies hash to %s", h, p.Hash())
	}
	r.mu.Lock()
	r.revisions[h] = p
	r.mu.Unlock()
	return p, nil
}

// apply hands the record's live revisions to the engine.
func (r *rollouts) apply(ctx context.Context, rec *rollout.Record) {
	hashes, onPrevious := rec.Revisions()
	if len(hashes) == 0 {
		return
	}
	key := strings.Join(hashes, ",") + "|" + strings.Join(onPrevious, ",")
	r.mu.Lock()
	same := key == r.applied
	r.mu.Unlock()
	if same {
		return
	}
	var sets []*snapshot.Snapshot
	for _, h := range hashes {
		p, err := r.revision(ctx, h)
		if err != nil {
			r.s.log.Warn("staged rollout: a live revision cannot be read; keeping the engine's", "error", err)
			return
		}
		sets = append(sets, p)
	}
	r.s.engine.SetRevisions(sets, onPrevious)
	r.mu.Lock()
	r.applied = key
	r.mu.Unlock()
	// Drop the cache of revisions no longer live, but the source's.
	r.mu.Lock()
	for h := range r.revisions {
		if !slices.Contains(hashes, h) && (r.source == nil || h != r.source.Hash().String()) {
			delete(r.revisions, h)
		}
	}
	r.mu.Unlock()
}

// clusters returns the registered clusters with their labels.
func (r *rollouts) clusters(ctx context.Context) ([]policyv1alpha1.ClusterMeta, error) {
	records, err := r.s.deps.Store.ListClusters(ctx)
	if err != nil {
		return nil, fmt.Errorf("list clusters: %w", err)
	}
	var out []policyv1alpha1.ClusterMeta
	for _, c := range records {
		if !c.Revoked {
			out = append(out, policyv1alpha1.ClusterMeta{Name: c.Name, Labels: c.Labels})
		}
	}
	return out, nil
}

// membership adds the clusters registered during the rollout and drops
// those gone; it reports whether it changed the rollout.
func (r *rollouts) membership(ro *rollout.Rollout, clusters []policyv1alpha1.ClusterMeta, now time.Time) bool {
	changed := false
	names := map[string]bool{}
	for _, c := range clusters {
		names[c.Name] = true
		changed = ro.Join(c, now) || changed
	}
	for name := range ro.Clusters {
		if !names[name] {
			ro.Leave(name)
			changed = true
		}
	}
	return changed
}

// observe judges every released cluster this replica can judge (its
// agent is connected here, or to no replica) and reports whether the
// rollout changed.
func (r *rollouts) observe(ctx context.Context, ro *rollout.Rollout, now time.Time) bool {
	before := ro.Clusters
	snap := map[string]rollout.Cluster{}
	for name, c := range before {
		snap[name] = *c
	}
	changedPolicies := r.changedPolicies(ctx, ro)
	toSet, err := r.revision(ctx, ro.To)
	if err != nil {
		r.s.log.Warn("staged rollout: the new revision cannot be read; judging no cluster", "error", err)
		return false
	}
	to := toSet.Hash()
	diags := r.s.engine.RevisionDiagnostics(to)
	acks := r.s.ackStates()
	for _, name := range slices.Sorted(maps.Keys(ro.Clusters)) {
		if ro.Clusters[name].Phase == rollout.Pending {
			continue
		}
		h, judged := r.health(ctx, name, to, acks, diags, changedPolicies)
		if judged {
			ro.Observe(name, h, now)
		}
	}
	for name, c := range ro.Clusters {
		if old, ok := snap[name]; !ok || old.Phase != c.Phase || old.Reason != c.Reason || !old.HealthySince.Equal(c.HealthySince) {
			return true
		}
	}
	return false
}

// health judges a released cluster: healthy when its agent is connected,
// its outputs were computed under the new revision and every one of them
// is acked without apply errors, and the revision added no error
// diagnostic for it. judged is false for a cluster whose agent is
// connected to another replica, which judges it.
func (r *rollouts) health(ctx context.Context, cluster string, to snapshot.Hash, acks map[engine.OutputKey]ackState, diags []meta.Diagnostic, changed map[meta.PolicyRef]bool) (h rollout.Health, judged bool) {
	s := r.s
	s.mu.Lock()
	_, here := s.streams[cluster]
	s.mu.Unlock()
	if !here {
		c, err := s.deps.Store.GetCluster(ctx, cluster)
		if err == nil && c.Replica != "" && c.Replica != s.opts.ServerID && time.Since(c.LastSeen) < freshWindowHeartbeats*s.opts.Heartbeat {
			return rollout.Health{}, false
		}
		return rollout.Health{Reason: "agent not connected"}, true
	}
	for _, d := range diags {
		if d.Severity.IsError() && d.Cluster == cluster && changed[d.Policy] {
			return rollout.Health{Failed: true, Reason: "the revision adds an error on " + d.Policy.String() + ": " + d.Summary}, true
		}
	}
	if rev, ok := s.engine.Revision(cluster); !ok || rev != to {
		return rollout.Health{Reason: "outputs of the new revision not computed yet"}, true
	}
	marks := s.engine.Marks(cluster)
	for _, b := range slices.Sorted(maps.Keys(marks)) {
		a, ok := acks[engine.OutputKey{Cluster: cluster, Backend: b}]
		switch {
		case !ok || a.hash != marks[b].Hash:
			return rollout.Health{Reason: "output " + b + " not applied yet"}, true
		case len(a.errors) > 0:
			ids := slices.SortedFunc(maps.Keys(a.errors), func(x, y snapshot.ID) int { return cmp.Compare(x.String(), y.String()) })
			return rollout.Health{Failed: true, Reason: fmt.Sprintf("apply errors in output %s: %s: %s", b, ids[0], a.errors[ids[0]])}, true
		}
	}
	return rollout.Health{Healthy: true}, true
}

// changedPolicies returns the policies the rollout's revision adds or
// changes: an error diagnostic on one of them is the revision's doing.
func (r *rollouts) changedPolicies(ctx context.Context, ro *rollout.Rollout) map[meta.PolicyRef]bool {
	from, err1 := r.revision(ctx, ro.From)
	to, err2 := r.revision(ctx, ro.To)
	out := map[meta.PolicyRef]bool{}
	if err1 != nil || err2 != nil {
		return out
	}
	for res := range to.All() {
		if old, ok := from.Get(res.ID); !ok || old.Hash != res.Hash {
			out[meta.PolicyRef{Kind: res.ID.Kind, Namespace: res.ID.Namespace, Name: res.ID.Name}] = true
		}
	}
	return out
}

// carried returns the management policies the rollout in progress adds
// or changes, each with where the rollout is; none outside a rollout.
func (r *rollouts) carried(ctx context.Context) map[meta.PolicyRef]*policyv1alpha1.PolicyRollout {
	ro := r.lastRecord().Active()
	if ro == nil {
		return nil
	}
	n := ro.Counts()
	pr := &policyv1alpha1.PolicyRollout{
		ID: ro.ID, Phase: string(ro.Phase), Reason: ro.Reason,
		Total: int32(n.Total), Released: int32(n.Released), Healthy: int32(n.Healthy), Failed: int32(n.Failed), Pending: int32(n.Pending),
	}
	if ro.Stage < len(ro.Stages) {
		pr.Stage = ro.Stages[ro.Stage].Name
	}
	out := map[meta.PolicyRef]*policyv1alpha1.PolicyRollout{}
	for ref := range r.changedPolicies(ctx, ro) {
		out[ref] = pr
	}
	return out
}

// rolloutText is how status lists a policy's rollout: "rollout 2
// Progressing at stage canary: 3/9 released, 2 healthy, 0 failed".
func rolloutText(pr *policyv1alpha1.PolicyRollout) string {
	if pr == nil {
		return ""
	}
	return fmt.Sprintf("rollout %d %s at stage %s: %d/%d released, %d healthy, %d failed", pr.ID, pr.Phase, pr.Stage, pr.Released, pr.Total, pr.Healthy, pr.Failed)
}

// act applies an administrator's action to the rollout in progress.
func (r *rollouts) act(ctx context.Context, action func(rec *rollout.Record, now time.Time) error) (*rollout.Record, error) {
	var actErr error
	rec, err := r.update(ctx, func(rec *rollout.Record) (bool, error) {
		actErr = action(rec, time.Now())
		return actErr == nil, nil
	})
	if err != nil {
		return nil, err
	}
	if actErr != nil {
		return nil, actErr
	}
	r.apply(ctx, rec)
	select {
	case r.kick <- struct{}{}:
	default:
	}
	return rec, nil
}

// inSafeMode reports whether the replica is in safe mode, where a
// rollout holds: nothing is judged or released until it ends.
func (s *Server) inSafeMode() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.safe.on
}

// refuseStrategy records that a workload cluster's RolloutStrategy is
// refused: rollouts stage the management source's changes only.
func (ps *policyStatus) refuseStrategy() {
	const summary = "a RolloutStrategy is taken from the management source only; this one, in a workload cluster, is refused"
	ps.errors = append(ps.errors, summary)
	ps.status.Diagnostics = append(ps.status.Diagnostics, policyv1alpha1.DiagnosticOf(meta.Diagnostic{
		Severity: meta.SeverityError, Summary: summary, Path: "metadata", Policy: ps.ref, Cluster: ps.ref.Cluster, Plugin: "rollout"}))
}

// strategyOf returns the RolloutStrategy of the management source's
// policies, the first by namespace and name, or nil.
func strategyOf(p *snapshot.Snapshot) *policyv1alpha1.RolloutStrategy {
	for res := range p.All() {
		if res.ID.Group != policyv1alpha1.GroupName || res.ID.Kind != policyv1alpha1.KindRolloutStrategy {
			continue
		}
		ps, err := policyv1alpha1.Decode(res.Body)
		if err != nil || len(ps) != 1 || len(ps[0].Validate()) > 0 {
			continue
		}
		if rs, ok := ps[0].(*policyv1alpha1.RolloutStrategy); ok {
			return rs
		}
	}
	return nil
}

// isRolloutStrategy reports whether a resource is a RolloutStrategy,
// which the rollout takes and the translators never see.
func isRolloutStrategy(r snapshot.Resource) bool {
	return r.ID.Group == policyv1alpha1.GroupName && r.ID.Kind == policyv1alpha1.KindRolloutStrategy
}

// rolloutCollector exports the rollout as this replica last read it.
type rolloutCollector struct{ r *rollouts }

var (
	rolloutPhaseDesc = prometheus.NewDesc("meshrelay_rollout_phase",
		"1 for the phase of the current or last staged rollout (Progressing, Paused, Completed, Undone).", []string{"phase"}, nil)
	rolloutStageDesc = prometheus.NewDesc("meshrelay_rollout_stage",
		"Index of the current stage of the current or last staged rollout, from 0; the number of stages once all are done.", nil, nil)
	rolloutIDDesc = prometheus.NewDesc("meshrelay_rollout_id",
		"Number of the current or last staged rollout.", nil, nil)
	rolloutClustersDesc = prometheus.NewDesc("meshrelay_rollout_clusters",
		"Clusters of the current or last staged rollout, by state: total, released, healthy, failed, pending.", []string{"state"}, nil)
)

func (c rolloutCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- rolloutPhaseDesc
	ch <- rolloutStageDesc
	ch <- rolloutIDDesc
	ch <- rolloutClustersDesc
}

func (c rolloutCollector) Collect(ch chan<- prometheus.Metric) {
	ro := c.r.lastRecord().Rollout
	if ro == nil {
		return
	}
	for _, p := range []rollout.Phase{rollout.Progressing, rollout.Paused, rollout.Completed, rollout.Undone} {
		v := 0.0
		if ro.Phase == p {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(rolloutPhaseDesc, prometheus.GaugeValue, v, string(p))
	}
	ch <- prometheus.MustNewConstMetric(rolloutStageDesc, prometheus.GaugeValue, float64(ro.Stage))
	ch <- prometheus.MustNewConstMetric(rolloutIDDesc, prometheus.GaugeValue, float64(ro.ID))
	n := ro.Counts()
	for state, v := range map[string]int{"total": n.Total, "released": n.Released, "healthy": n.Healthy, "failed": n.Failed, "pending": n.Pending} {
		ch <- prometheus.MustNewConstMetric(rolloutClustersDesc, prometheus.GaugeValue, float64(v), state)
	}
}

// GetRollout returns the rollout in progress, or the last one.
func (a *admin) GetRollout(ctx context.Context, _ *relayv1.GetRolloutRequest) (*relayv1.RolloutStatus, error) {
	if err := a.authorize(ctx); err != nil {
		return nil, err
	}
	rec, err := a.s.rollouts.read(ctx)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "rollout: %v", err)
	}
	if rec.Rollout == nil {
		return nil, status.Error(codes.NotFound, "no rollout yet: the fleet has no RolloutStrategy, or its policies did not change since it has one")
	}
	return a.s.rollouts.status(rec), nil
}

// ActOnRollout pauses, resumes, approves or undoes the rollout in
// progress; undo takes back a completed rollout too while its revision is
// live.
func (a *admin) ActOnRollout(ctx context.Context, req *relayv1.RolloutActionRequest) (*relayv1.RolloutStatus, error) {
	if err := a.authorize(ctx); err != nil {
		return nil, err
	}
	var action func(rec *rollout.Record, now time.Time) error
	switch req.GetAction() {
	case relayv1.RolloutActionRequest_ACTION_PAUSE:
		action = func(rec *rollout.Record, _ time.Time) error { return activeOr(rec).Pause("") }
	case relayv1.RolloutActionRequest_ACTION_RESUME:
		action = func(rec *rollout.Record, now time.Time) error { return activeOr(rec).Resume(now) }
	case relayv1.RolloutActionRequest_ACTION_APPROVE:
		action = func(rec *rollout.Record, now time.Time) error { return activeOr(rec).Approve(req.GetStage(), now) }
	case relayv1.RolloutActionRequest_ACTION_UNDO:
		action = func(rec *rollout.Record, now time.Time) error { return rec.Undo(now) }
	default:
		return nil, status.Errorf(codes.InvalidArgument, "rollout: unknown action %v", req.GetAction())
	}
	rec, err := a.s.rollouts.act(ctx, action)
	switch {
	case errors.Is(err, rollout.ErrNotActive) && req.GetAction() == relayv1.RolloutActionRequest_ACTION_UNDO:
		return nil, status.Error(codes.FailedPrecondition, "rollout: nothing to undo: no rollout is in progress, and the last one's revision is no longer live")
	case errors.Is(err, rollout.ErrNotActive):
		return nil, status.Error(codes.FailedPrecondition, "rollout: no rollout is in progress")
	case errors.Is(err, rollout.ErrNoSuchStage):
		return nil, status.Errorf(codes.NotFound, "rollout: %v", err)
	case err != nil:
		return nil, status.Errorf(codes.Unavailable, "rollout: %v", err)
	}
	a.s.log.Info("rollout action", "action", req.GetAction().String(), "stage", req.GetStage(), "rollout", rec.Rollout.ID, "phase", rec.Rollout.Phase)
	return a.s.rollouts.status(rec), nil
}

// activeOr returns the rollout in progress, or an inactive one whose
// actions fail with rollout.ErrNotActive.
func activeOr(rec *rollout.Record) *rollout.Rollout {
	if ro := rec.Active(); ro != nil {
		return ro
	}
	return &rollout.Rollout{Phase: rollout.Completed}
}

// status is the admin API's view of the record's rollout.
func (r *rollouts) status(rec *rollout.Record) *relayv1.RolloutStatus {
	ro := rec.Rollout
	n := ro.Counts()
	st := &relayv1.RolloutStatus{
		Id: ro.ID, Phase: string(ro.Phase), Reason: ro.Reason, FromRevision: ro.From, ToRevision: ro.To, LiveRevision: rec.Live,
		Stage: int32(ro.Stage), Total: int32(n.Total), Released: int32(n.Released), Healthy: int32(n.Healthy), Failed: int32(n.Failed), Pending: int32(n.Pending),
		Started: timestamppb.New(ro.Started),
	}
	if !ro.Ended.IsZero() {
		st.Ended = timestamppb.New(ro.Ended)
	}
	counts := make([]int32, len(ro.Stages))
	for _, c := range ro.Clusters {
		if c.Stage < len(counts) {
			counts[c.Stage]++
		}
	}
	for i, s := range ro.Stages {
		st.Stages = append(st.Stages, &relayv1.RolloutStage{
			Name: s.Name, Clusters: counts[i], MaxConcurrent: int32(s.MaxConcurrent), MaxFailures: int32(s.MaxFailures),
			MinHealthy: durationpb.New(s.MinHealthy), ProgressDeadline: durationpb.New(s.ProgressDeadline),
			Approval: s.Approval, Approved: slices.Contains(ro.Approved, s.Name),
		})
	}
	for _, name := range slices.Sorted(maps.Keys(ro.Clusters)) {
		c := ro.Clusters[name]
		rc := &relayv1.RolloutCluster{Name: name, State: string(c.Phase), Reason: c.Reason}
		if ro.Phase == rollout.Undone {
			rc.State = string(rollout.Pending)
		}
		if c.Stage < len(ro.Stages) {
			rc.Stage = ro.Stages[c.Stage].Name
		}
		if !c.Released.IsZero() {
			rc.Released = timestamppb.New(c.Released)
		}
		if !c.HealthySince.IsZero() {
			rc.HealthySince = timestamppb.New(c.HealthySince)
		}
		st.Clusters = append(st.Clusters, rc)
	}
	r.mu.Lock()
	st.Queued = ro.Active() && r.source != nil && r.source.Hash().String() != ro.To
	r.mu.Unlock()
	return st
}
