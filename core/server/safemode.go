package server

import (
	"maps"
	"slices"
	"time"

	"github.com/meshrelay/meshrelay/core/engine"
	"github.com/meshrelay/meshrelay/core/store"
)

// safeMode forbids pruning until every registered cluster's input is known
// to be fresh. A cluster's input is fresh when its agent has sent a full
// snapshot or resumed with a matching hash since this server started, or
// when the store shows another replica saw the agent within the last
// freshness window.
type safeMode struct {
	on       bool
	waiting  map[string]bool
	deadline time.Time // zero: wait for all
}

// freshWindow is how recently another replica must have seen a cluster for
// its stored input to count as fresh at start.
const freshWindowHeartbeats = 3

func newSafeMode(registered map[string]store.Cluster, inputs map[string]*store.Encoded, opts Options, now time.Time) safeMode {
	sm := safeMode{waiting: map[string]bool{}}
	window := freshWindowHeartbeats * opts.Heartbeat
	for name, c := range registered {
		_, hasInput := inputs[name]
		seenElsewhere := c.Replica != "" && c.Replica != opts.ServerID && now.Sub(c.LastSeen) < window
		if !hasInput || !seenElsewhere {
			sm.waiting[name] = true
		}
	}
	sm.on = len(sm.waiting) > 0
	if sm.on && opts.SafeStartWindow > 0 {
		sm.deadline = now.Add(opts.SafeStartWindow)
	}
	return sm
}

// fresh records that a cluster's input is fresh. It reports whether safe
// mode ended.
func (sm *safeMode) fresh(cluster string) bool {
	if !sm.on {
		return false
	}
	delete(sm.waiting, cluster)
	if len(sm.waiting) == 0 {
		sm.on = false
		return true
	}
	return false
}

// expire ends safe mode when its deadline passed. It reports whether safe
// mode ended.
func (sm *safeMode) expire(now time.Time) bool {
	if !sm.on || sm.deadline.IsZero() || now.Before(sm.deadline) {
		return false
	}
	sm.on = false
	sm.waiting = map[string]bool{}
	return true
}

// forget drops a cluster that was deregistered. It reports whether safe mode ended.
func (sm *safeMode) forget(cluster string) bool { return sm.fresh(cluster) }

func (sm *safeMode) waitingList() []string {
	return slices.Sorted(maps.Keys(sm.waiting))
}

// waitingShown is how many waiting clusters a log line or /readyz names:
// a cold start of 10,000 clusters would otherwise write 150 KB into one
// line. GetStatus lists them all.
const waitingShown = 20

// waitingFirst returns the first waitingShown clusters waited for, in
// order of name.
func (sm *safeMode) waitingFirst() []string {
	names := sm.waitingList()
	return names[:min(len(names), waitingShown)]
}

// checkSafeDeadline ends safe mode at its deadline and lets agents prune.
func (s *Server) checkSafeDeadline(now time.Time) {
	s.mu.Lock()
	ended := s.safe.expire(now)
	s.mu.Unlock()
	if ended {
		s.log.Warn("safe-start window ended before every cluster reported; pruning allowed")
		s.safeModeEnded()
	}
}

// markFresh records a fresh input from cluster and ends safe mode when it
// was the last one waited for.
func (s *Server) markFresh(cluster string) {
	s.mu.Lock()
	ended := s.safe.fresh(cluster)
	s.mu.Unlock()
	if ended {
		s.log.Info("every registered cluster reported; safe mode ended")
		s.safeModeEnded()
	}
}

// safeModeEnded arranges for pruning to be allowed once the engine has
// translated a view holding every input that ended safe mode: outputs
// computed before that may still lack the last cluster's resources, and
// pruning them would delete what is about to come back.
func (s *Server) safeModeEnded() {
	s.m.safeMode.Set(0)
	s.mu.Lock()
	s.pruneAfter = s.engine.Generation()
	s.mu.Unlock()
	s.engine.Refresh()
}

// cycleDone records a finished engine cycle and, when it is the first to
// see the view after safe mode ended, tells every agent it may prune now.
func (s *Server) cycleDone(c engine.CycleStats) {
	s.m.observeCycle(c)
	s.kickDiscovery()
	s.mu.Lock()
	wasAllowed := s.pruneAllowedLocked()
	s.lastCycle = c.Generation
	nowAllowed := s.pruneAllowedLocked()
	var streams []*stream
	if nowAllowed && !wasAllowed {
		for _, st := range s.streams {
			streams = append(streams, st)
		}
	}
	s.mu.Unlock()
	for _, st := range streams {
		st.notifyAll()
	}
}

// pruneAllowed reports whether outputs may prune now: not in safe mode, and
// the outputs come from a cycle that started after safe mode ended.
func (s *Server) pruneAllowed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pruneAllowedLocked()
}

func (s *Server) pruneAllowedLocked() bool {
	return !s.safe.on && s.lastCycle > s.pruneAfter
}
