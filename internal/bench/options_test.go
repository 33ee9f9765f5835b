package bench

import (
	"strings"
	"testing"
	"time"

	"github.com/meshrelay/meshrelay/core/agent"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Options)
		want string // a part of the error; "" for none
	}{
		{"defaults", func(*Options) {}, ""},
		{"global", func(o *Options) { o.Scenario = ScenarioGlobal }, ""},
		{"unknown scenario", func(o *Options) { o.Scenario = "regional" }, `--scenario must be local or global, not "regional"`},
		{"no scenario", func(o *Options) { o.Scenario = "" }, "--scenario must be"},
		{"replicas on redis", func(o *Options) { o.Replicas, o.Store = 3, "redis://127.0.0.1:6379/0" }, ""},
		{"replicas on memory", func(o *Options) { o.Replicas = 2 }, "--replicas 2 needs a store the replicas share"},
		{"no replicas", func(o *Options) { o.Replicas = 0 }, "--replicas must be at least 1"},
		{"kill with two replicas", func(o *Options) { o.Replicas, o.Store, o.KillReplica = 2, "redis://r:6379/0", true }, ""},
		{"kill with one replica", func(o *Options) { o.KillReplica = true }, "--kill-replica needs --replicas 2 or more"},
		{"kill with one replica on redis", func(o *Options) { o.Store, o.KillReplica = "redis://r:6379/0", true }, "--kill-replica needs --replicas 2 or more"},
		{"bad store", func(o *Options) { o.Store = "etcd://x" }, "--store must be memory or a redis://"},
		{"rollout", func(o *Options) { *o = DefaultRolloutOptions() }, ""},
		{"rollout with policy edits", func(o *Options) { *o = DefaultRolloutOptions(); o.PolicyChanges = 1 }, "--policy-changes must be 0"},
		{"rollout with fewer agents than stages", func(o *Options) { *o = DefaultRolloutOptions(); o.Agents = 4 }, "--rollout needs --agents 5 or more"},
		{"rollout in the chaos soak", func(o *Options) { *o = DefaultChaosOptions(); o.Rollout = true }, "leave --chaos out"},
		{"chaos on redis cluster", func(o *Options) { *o = DefaultChaosOptions(); o.RedisCluster = true }, ""},
		{"chaos on sentinel and cluster", func(o *Options) { *o = DefaultChaosOptions(); o.RedisSentinel, o.RedisCluster = true, true }, "pass one"},
		{"reshard on one redis", func(o *Options) { *o = DefaultChaosOptions(); o.Faults = []string{FaultRedisReshard} }, `unknown fault "redis-reshard"`},
		{"reshard on redis cluster", func(o *Options) {
			*o = DefaultChaosOptions()
			o.RedisCluster, o.Faults = true, []string{FaultRedisReshard, FaultRedisClusterKill}
		}, ""},
		{"restart on redis cluster", func(o *Options) {
			*o = DefaultChaosOptions()
			o.RedisCluster, o.Faults = true, []string{FaultRedisRestart}
		}, `unknown fault "redis-restart"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := DefaultOptions()
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

func TestRelaysStartWithTheAgentsReplica(t *testing.T) {
	rs := replicaSet{{relay: "a:1"}, {relay: "b:2"}, {relay: "c:3"}}
	for first, want := range []string{"a:1,b:2,c:3", "b:2,c:3,a:1", "c:3,a:1,b:2"} {
		if got := rs.relays(first); got != want {
			t.Errorf("relays(%d) = %q, want %q", first, got, want)
		}
	}
	if got := rs[:1].relays(0); got != "a:1" {
		t.Errorf("one replica: relays(0) = %q, want a:1", got)
	}
}

func TestReplicaNames(t *testing.T) {
	if id, dir := replicaNames(0, 1); id != "bench" || dir != "server" {
		t.Errorf("a lone replica is named %q in %q, want bench in server, as before replicas", id, dir)
	}
	if id, dir := replicaNames(2, 3); id != "bench-2" || dir != "server-2" {
		t.Errorf("replica 2 of 3 is named %q in %q, want bench-2 in server-2", id, dir)
	}
}

// The idle measure spans two heartbeats of the slower side, the agents'
// or their replicas', so that each side's heartbeats are in it.
func TestIdleWindowSpansTwoHeartbeats(t *testing.T) {
	chaos := agent.DefaultOptions()
	chaos.Heartbeat, chaos.ServerTimeout = chaosHeartbeat, chaosServerTimeout
	for name, tc := range map[string]struct {
		agent      agent.Options
		serverArgs []string
		agentBeat  time.Duration
		serverBeat time.Duration
	}{
		"defaults": {agent: agent.DefaultOptions(), serverBeat: 30 * time.Second},
		"a server heartbeat slower than a third of the timeout": {
			agent: agent.DefaultOptions(), serverArgs: []string{"--heartbeat=45s"},
			serverBeat: 45 * time.Second,
		},
		"the chaos soak": {
			agent: chaos, serverArgs: []string{"--heartbeat", chaosHeartbeat.String(), "--debounce=20ms"},
			agentBeat: chaosHeartbeat, serverBeat: chaosServerTimeout / 3,
		},
	} {
		t.Run(name, func(t *testing.T) {
			got := IdleWindow(tc.agent, tc.serverArgs)
			if got < 2*tc.agentBeat || got < 2*tc.serverBeat {
				t.Errorf("IdleWindow = %s, want at least two agent heartbeats (%s) and two server heartbeats (%s)", got, tc.agentBeat, tc.serverBeat)
			}
			if got > 2*max(tc.agentBeat, tc.serverBeat) {
				t.Errorf("IdleWindow = %s, want no more than two heartbeats of the slower side (%s)", got, max(tc.agentBeat, tc.serverBeat))
			}
		})
	}
}
