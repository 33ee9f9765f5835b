package server

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/meshrelay/meshrelay/core/agent"
	"github.com/meshrelay/meshrelay/core/rollout"
	"github.com/meshrelay/meshrelay/internal/testenv"
	"github.com/meshrelay/meshrelay/internal/testutil"
)

func TestShedCount(t *testing.T) {
	for name, c := range map[string]struct {
		agents  map[string]int
		n, fair int
		self    string
	}{
		"alone":                          {agents: map[string]int{"a": 300}, self: "a", fair: 300},
		"even":                           {agents: map[string]int{"a": 100, "b": 100, "c": 100}, self: "a", fair: 100},
		"within a tenth, nobody starved": {agents: map[string]int{"a": 108, "b": 100, "c": 92}, self: "a", fair: 100},
		"a replica came back empty":      {agents: map[string]int{"a": 150, "b": 150, "c": 0}, self: "a", n: 7, fair: 100},
		"a few above, one starved":       {agents: map[string]int{"a": 108, "b": 107, "c": 85}, self: "a", n: 5, fair: 100},
		"below the fair share":           {agents: map[string]int{"a": 150, "b": 150, "c": 0}, self: "c", fair: 100},
		"small fleet":                    {agents: map[string]int{"a": 3, "b": 0}, self: "a", n: 1, fair: 2},
		"one over in a small fleet":      {agents: map[string]int{"a": 2, "b": 1}, self: "a", fair: 2},
		"no agents":                      {agents: map[string]int{"a": 0, "b": 0}, self: "a"},
	} {
		t.Run(name, func(t *testing.T) {
			n, fair := shedCount(c.agents, c.self)
			if n != c.n || fair != c.fair {
				t.Errorf("shedCount(%v, %q) = %d, fair %d; want %d, fair %d", c.agents, c.self, n, fair, c.n, c.fair)
			}
		})
	}
}

// Replicas divide the agents: twelve agents that all reached one replica
// (as after the others restarted) spread over the three, each within a
// tenth of even (rounded to whole agents), with no output churn and no
// full resend.
func TestRebalanceSpreadsAgents(t *testing.T) {
	r := testenv.StartRedis(t)
	rebalance := func(o *Options) { o.RebalanceInterval = 50 * time.Millisecond }
	replicas := []*testServer{startServer(t, redisStore(t, r, "r1"), "", withID("r1"), rebalance)}
	testutil.Eventually(t, "the CA to reach Redis", func() bool {
		_, _, err := rawRedis(t, r).GetCA(t.Context())
		return err == nil
	})
	for _, id := range []string{"r2", "r3"} {
		replicas = append(replicas, startServer(t, redisStore(t, r, id), "", withID(id), rebalance))
	}
	addrs := make([]string, len(replicas))
	for i, ts := range replicas {
		addrs[i] = ts.Addr()
	}
	const n = 12
	agents := make([]*testAgent, n)
	for i := range agents {
		name := fmt.Sprintf("c%02d", i)
		agents[i] = startAgent(t, replicas[0], name, replicas[0].register(name),
			func(o *agent.Options) { o.Server = strings.Join(addrs, ",") })
		agents[i].src.set(t, "svc-"+name)
	}
	testutil.EventuallyWhy(t, "every agent to hold its outputs with every peer", func() (bool, string) {
		for i, a := range agents {
			if len(a.sink.names()) != 1 || len(a.sink.peers()) != n-1 {
				return false, fmt.Sprintf("c%02d holds %v, peers %v", i, a.sink.names(), a.sink.peers())
			}
		}
		return true, ""
	})
	type counts struct{ creates, deletes, full int64 }
	before := make([]counts, n)
	for i, a := range agents {
		c, d := a.sink.counts()
		before[i] = counts{int64(c), int64(d), a.Stats.FullInputs.Load()}
	}

	served := func() []int {
		out := make([]int, len(replicas))
		for i, ts := range replicas {
			ts.mu.Lock()
			out[i] = len(ts.streams)
			ts.mu.Unlock()
		}
		return out
	}
	testutil.EventuallyWhy(t, "the agents to spread over the replicas", func() (bool, string) {
		got := served()
		for _, k := range got {
			if k < 3 || k > 5 {
				return false, fmt.Sprintf("agents per replica %v, want 3 to 5 each", got)
			}
		}
		return got[0]+got[1]+got[2] == n, fmt.Sprintf("agents per replica %v", got)
	})
	for i, a := range agents {
		c, d := a.sink.counts()
		got := counts{int64(c), int64(d), a.Stats.FullInputs.Load()}
		if got != before[i] {
			t.Errorf("c%02d: creates, deletes and full inputs went from %+v to %+v while agents moved", i, before[i], got)
		}
	}
	var moved dto.Metric
	if err := replicas[0].m.rebalanced.Write(&moved); err != nil || moved.GetCounter().GetValue() == 0 {
		t.Error("replica r1 reports no rebalanced agents")
	}
}

// TestRebalanceLeavesSoakingClusters: rebalancing moves settled agents,
// but not those of clusters released in a staged rollout that have not
// succeeded yet, whose soak a move would start again.
func TestRebalanceLeavesSoakingClusters(t *testing.T) {
	r := newRollouts(&Server{log: slog.New(slog.DiscardHandler)})
	now := time.Now()
	r.last = &rollout.Record{Live: "old", Rollout: &rollout.Rollout{
		ID: 1, From: "old", To: "new", Phase: rollout.Progressing,
		Clusters: map[string]*rollout.Cluster{
			"soaking":   {Phase: rollout.Releasing, HealthySince: now},
			"failed":    {Phase: rollout.Failed},
			"succeeded": {Phase: rollout.Succeeded},
			"pending":   {Phase: rollout.Pending},
		},
	}}
	var streams []*stream
	for _, c := range []string{"soaking", "failed", "succeeded", "pending", "outside", "new"} {
		started := now.Add(-time.Hour)
		if c == "new" {
			started = now
		}
		streams = append(streams, &stream{cluster: c, started: started})
	}
	var got []string
	for _, st := range movable(streams, now, time.Minute, r.soaking()) {
		got = append(got, st.cluster)
	}
	if want := []string{"succeeded", "pending", "outside"}; !slices.Equal(got, want) {
		t.Errorf("movable streams %v, want %v", got, want)
	}
	r.last.Rollout.Phase = rollout.Completed
	if n := len(movable(streams, now, time.Minute, r.soaking())); n != 5 {
		t.Errorf("after the rollout completed, %d streams movable, want every settled one (5)", n)
	}
}
