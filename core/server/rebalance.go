package server

import (
	"context"
	"fmt"
	"github.com/meshrelay/meshrelay/core/store"
	"math/rand/v2"
	"time"

	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
)

// Replicas divide the agents evenly. An agent stays on the replica it
// reached until its stream ends, so after a replica died and came back
// (or a rolling restart) the fleet would sit on the replicas that stayed
// up. Every RebalanceInterval each replica announces in the store how
// many agents it serves (store.Presence) and reads what the others
// announced; a replica above its fair share asks a few of its agents to
// move: a goodbye with REASON_REBALANCING, after which the agent dials
// the next server address it knows. Moving costs no output churn: the
// replica the agent reaches computes the same outputs, which the agent
// holds, and sends nothing (the failover path, docs/architecture.md).
// The announcement also carries the replica's --advertise-addr, which
// its peers ask for its share of the fleet's traffic (peers.go).

// presenceIntervals is how many rebalance intervals an announcement
// lasts: a replica that stopped announcing drops out of the fair share
// after that long.
const presenceIntervals = 5

// settleIntervals is how many rebalance intervals an agent stays on a
// replica before it may be asked to move again, so that agents that just
// arrived (and replicas' announcements, which lag by an interval) settle.
const settleIntervals = 10

// rebalance announces this replica and moves agents above its fair share,
// every RebalanceInterval (jittered), until ctx ends.
func (s *Server) rebalance(ctx context.Context) error {
	every := s.opts.RebalanceInterval
	if every <= 0 {
		return nil
	}
	t := time.NewTimer(jitter(every))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		s.rebalanceOnce(ctx, time.Now())
		t.Reset(jitter(every))
	}
}

// jitter returns a wait between 0.8 and 1.2 times d.
func jitter(d time.Duration) time.Duration {
	return d*4/5 + rand.N(d*2/5+1)
}

// rebalanceOnce announces this replica's agents and asks those above its
// fair share to move. In safe mode, or when the store cannot be read, it
// moves nobody.
func (s *Server) rebalanceOnce(ctx context.Context, now time.Time) {
	every := s.opts.RebalanceInterval
	s.mu.Lock()
	streams := make([]*stream, 0, len(s.streams))
	for _, st := range s.streams {
		streams = append(streams, st)
	}
	safe := s.safe.on
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, storeReadTimeout)
	defer cancel()
	me := store.Replica{Agents: len(streams), Address: s.opts.AdvertiseAddr}
	if err := s.deps.Store.Announce(ctx, s.opts.ServerID, me, presenceIntervals*every); err != nil {
		s.log.Debug("announce this replica", "error", err)
		return
	}
	replicas, err := s.deps.Store.Replicas(ctx)
	if err != nil {
		s.log.Debug("read the replicas", "error", err)
		return
	}
	replicas[s.opts.ServerID] = me
	s.peers.set(replicas)
	agents := make(map[string]int, len(replicas))
	for name, r := range replicas {
		agents[name] = r.Agents
	}
	n, fair := shedCount(agents, s.opts.ServerID)
	if n == 0 || safe {
		return
	}
	settled := movable(streams, now, settleIntervals*every, s.rollouts.soaking())
	rand.Shuffle(len(settled), func(i, j int) { settled[i], settled[j] = settled[j], settled[i] })
	settled = settled[:min(n, len(settled))]
	if len(settled) == 0 {
		return
	}
	why := fmt.Sprintf("this replica serves %d agents, above the fair share of %d over %d replicas", len(streams), fair, len(agents))
	s.log.Info("moving agents to other replicas", "agents", len(settled), "reason", why)
	for _, st := range settled {
		st.goodbye(relayv1.Goodbye_REASON_REBALANCING, why)
	}
	s.m.rebalanced.Add(float64(len(settled)))
}

// movable returns the streams rebalancing may move: those older than
// settle, but for the clusters soaking in a staged rollout. A move counts
// as the agent being away, which starts its soak again (see
// rollouts.health); those clusters move once their stage is done.
func movable(streams []*stream, now time.Time, settle time.Duration, soaking map[string]bool) []*stream {
	out := make([]*stream, 0, len(streams))
	for _, st := range streams {
		if now.Sub(st.started) >= settle && !soaking[st.cluster] {
			out = append(out, st)
		}
	}
	return out
}

// shedCount returns how many of its agents replica self asks to move now,
// and the fair share: the agents of all replicas divided evenly, rounded
// up. A replica sheds when it is above the fair share by more than a
// tenth of it (at least one agent), or above it at all while another
// replica is below it by that much, so that every replica ends within a
// tenth of even. It sheds down to the fair share, at most a twentieth of
// its agents (at least one) per round, so that a replica that comes back
// fills up over seconds rather than in one storm.
func shedCount(agents map[string]int, self string) (n, fair int) {
	total, least := 0, -1
	for _, a := range agents {
		total += a
		if least < 0 || a < least {
			least = a
		}
	}
	if len(agents) == 0 {
		return 0, 0
	}
	fair = (total + len(agents) - 1) / len(agents)
	slack := max(1, fair/10)
	mine := agents[self]
	if mine <= fair || (mine <= fair+slack && least >= fair-slack) {
		return 0, fair
	}
	return min(mine-fair, max(1, mine/20)), fair
}
