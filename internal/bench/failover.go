package bench

import (
	"context"
	"maps"
	"time"

	"github.com/meshrelay/meshrelay/api/snapshot"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
)

// OutputChurn counts changes to agents' outputs during a phase in which no
// input and no policy changed, so that every change is churn: the outputs
// should have stayed as they were.
type OutputChurn struct {
	// Changes counts the output sets (one agent's, one backend's) whose
	// content changed, each time it changed: the churn.
	Changes int `json:"output_set_changes"`
	// Added, Modified and Deleted count resources; Recreated counts the
	// deleted resources that came back (each is also in Deleted).
	Added     int `json:"resources_added"`
	Modified  int `json:"resources_modified"`
	Deleted   int `json:"resources_deleted"`
	Recreated int `json:"resources_recreated"`
}

func (c OutputChurn) plus(o OutputChurn) OutputChurn {
	return OutputChurn{
		Changes: c.Changes + o.Changes, Added: c.Added + o.Added, Modified: c.Modified + o.Modified,
		Deleted: c.Deleted + o.Deleted, Recreated: c.Recreated + o.Recreated,
	}
}

// churnWatch counts the churn of one agent's outputs from the deltas its
// sink computes. It is not safe for concurrent use (the sim's lock guards
// it).
type churnWatch struct {
	deleted map[churnKey]bool // resources deleted during the phase, not back yet
	OutputChurn
}

type churnKey struct {
	backend string
	id      snapshot.ID
}

func newChurnWatch() *churnWatch { return &churnWatch{deleted: map[churnKey]bool{}} }

// observe counts the delta d, from prev to the new output of backend.
func (w *churnWatch) observe(backend string, prev *snapshot.Snapshot, d snapshot.Delta) {
	if len(d.Upserts) == 0 && len(d.Deletes) == 0 {
		return
	}
	w.Changes++
	for _, id := range d.Deletes {
		w.Deleted++
		w.deleted[churnKey{backend, id}] = true
	}
	for _, r := range d.Upserts {
		k := churnKey{backend, r.ID}
		switch _, had := prev.Get(r.ID); {
		case had:
			w.Modified++
		case w.deleted[k]:
			w.Recreated++
			delete(w.deleted, k)
		default:
			w.Added++
		}
	}
}

// FailoverReport is what the --kill-replica phase measured: replica 0 is
// killed, and its agents move to the next replica of their server lists.
type FailoverReport struct {
	Killed string `json:"killed_replica"`
	// MovedAgents are the agents of the killed replica; Reconnected of
	// them connected again, each after Reconnect (from the kill, polled
	// every 5 ms).
	MovedAgents int     `json:"moved_agents"`
	Reconnected int     `json:"reconnected_agents"`
	Reconnect   Latency `json:"reconnect_latency"`
	// SettledSeconds is when, after the kill, every moved agent held the
	// outputs its new replica computed for it (the replicas' admin APIs are
	// asked every 500 ms); 0 when that did not happen within the timeout.
	SettledSeconds float64 `json:"settled_seconds"`
	// FullResends counts the moved agents' full input resends (a resume
	// needs none).
	FullResends int64 `json:"full_input_resends"`
	// Churn is what changed in the moved agents' outputs from the kill
	// until 2s after they settled; 0 when replicas agree.
	Churn OutputChurn `json:"output_churn"`
}

// settleGrace is how long churn is still counted after the moved agents
// settled, for late changes.
const settleGrace = 2 * time.Second

// killReplica runs the failover phase: it kills replica 0 and measures how
// its agents come back on the others; see [FailoverReport].
func (r *run) killReplica(ctx context.Context) error {
	victim := r.servers[0]
	var moved []*sim
	for _, s := range r.sims {
		if s.replica == victim.index && s.agent != nil {
			moved = append(moved, s)
		}
	}
	connects, fulls := make([]int64, len(moved)), make([]int64, len(moved))
	watches := make([]*churnWatch, len(moved))
	for i, s := range moved {
		watches[i] = newChurnWatch()
		s.watchChurn(watches[i])
		connects[i], fulls[i] = s.agent.Stats.Connects.Load(), s.agent.Stats.FullInputs.Load()
	}
	f := &FailoverReport{Killed: victim.id, MovedAgents: len(moved)}
	r.rep.Failover = f
	r.say("killing replica %s (pid %d), which serves %d agents", victim.id, victim.pid(), len(moved))
	victim.kill()
	at := time.Now()
	deadline := at.Add(r.opts.Timeout)

	lat, err := waitReconnected(ctx, moved, connects, at, deadline)
	if err != nil {
		return err
	}
	f.Reconnected, f.Reconnect = len(lat), summarize(lat)
	r.say("%d/%d moved agents reconnected; p50 %.1fms p99 %.1fms max %.1fms",
		f.Reconnected, f.MovedAgents, f.Reconnect.P50, f.Reconnect.P99, f.Reconnect.Max)
	settled, err := r.waitSettled(ctx, moved, deadline)
	if err != nil {
		return err
	}
	if settled {
		f.SettledSeconds = time.Since(at).Seconds()
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(settleGrace):
	}
	for i, s := range moved {
		s.watchChurn(nil)
		f.Churn = f.Churn.plus(watches[i].OutputChurn)
		f.FullResends += s.agent.Stats.FullInputs.Load() - fulls[i]
	}
	r.say("moved agents settled after %.3fs; %d output set changes, %d full input resends",
		f.SettledSeconds, f.Churn.Changes, f.FullResends)
	return nil
}

// waitReconnected waits until every agent in moved connected again (its
// connects counter passed before's), and returns how long after since
// each did.
func waitReconnected(ctx context.Context, moved []*sim, before []int64, since, deadline time.Time) ([]time.Duration, error) {
	back := make([]time.Duration, len(moved)) // 0 until reconnected
	left := len(moved)
	for left > 0 && time.Now().Before(deadline) {
		for i, s := range moved {
			if back[i] == 0 && s.agent.Stats.Connects.Load() > before[i] {
				back[i] = max(time.Since(since), 1)
				left--
			}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	var out []time.Duration
	for _, d := range back {
		if d != 0 {
			out = append(out, d)
		}
	}
	return out, nil
}

// waitSettled waits until every agent in moved holds, for each backend,
// the output the replica now serving it computed (as the replicas' admin
// APIs report it), and reports whether that happened before deadline.
func (r *run) waitSettled(ctx context.Context, moved []*sim, deadline time.Time) (bool, error) {
	for {
		computed, err := r.servers.servedOutputs()
		if err != nil {
			r.opts.Logger.Warn("read the replicas' outputs", "error", err)
		}
		done := err == nil
		for _, s := range moved {
			if !done {
				break
			}
			got, ok := computed[s.cluster.Name]
			done = ok && maps.Equal(got, s.held())
		}
		if done {
			return true, nil
		}
		if time.Now().After(deadline) {
			return false, nil
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// servedOutputs returns, for every cluster connected to a live replica,
// the short hashes of the non-empty outputs that replica computed for it,
// by backend.
func (rs replicaSet) servedOutputs() (map[string]map[string]string, error) {
	out := map[string]map[string]string{}
	for _, p := range rs {
		if p.isKilled() {
			continue
		}
		st, err := p.admin.ListClusters(p.adminCtx, &relayv1.ListClustersRequest{})
		if err != nil {
			return nil, err
		}
		for _, c := range st.GetClusters() {
			if !c.GetConnected() || c.GetReplica() != p.id {
				continue
			}
			hashes := map[string]string{}
			for _, o := range c.GetOutputs() {
				if o.GetResources() > 0 {
					hashes[o.GetBackend()] = o.GetHash()
				}
			}
			out[c.GetName()] = hashes
		}
	}
	return out, nil
}
