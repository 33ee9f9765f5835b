package bench

import (
	"bytes"
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/agent"
	"google.golang.org/protobuf/proto"
)

// source is a simulated cluster's discovery: it publishes the snapshots it
// is handed. Its Run is the agent's own source goroutine; an agent that
// restarts runs it again, and it starts from the last snapshot handed.
type source struct {
	mu   sync.Mutex
	last *snapshot.Snapshot
	ch   chan *snapshot.Snapshot
}

func newSource(first *snapshot.Snapshot) *source {
	return &source{last: first, ch: make(chan *snapshot.Snapshot, 4)}
}

func (s *source) Run(ctx context.Context, publish func(*snapshot.Snapshot)) error {
	// What is queued is older than last: an agent that restarted must
	// not publish it after last.
	s.mu.Lock()
	last := s.last
	for len(s.ch) > 0 {
		<-s.ch
	}
	s.mu.Unlock()
	publish(last)
	for {
		select {
		case <-ctx.Done():
			return nil
		case snap := <-s.ch:
			publish(snap)
		}
	}
}

// set publishes snap, replacing a snapshot still waiting to be published.
func (s *source) set(snap *snapshot.Snapshot) {
	s.mu.Lock()
	s.last = snap
	s.mu.Unlock()
	for {
		select {
		case s.ch <- snap:
			return
		default:
		}
		select {
		case <-s.ch:
		default:
		}
	}
}

// pending is a change the agent has not received yet.
type pending struct {
	service int
	quoted  []byte // the marker as it appears in JSON
	at      time.Time
}

// sim is one simulated agent: its agent, its inputs, and a sink that
// discards outputs after noting which changes they carry.
type sim struct {
	index   int
	replica int // the replica the agent dials first
	cluster *Cluster
	src     *source
	agent   *agent.Agent
	policy  *policyWatch

	// payload counts the protobuf bytes of the output deltas received.
	payload atomic.Int64
	applies atomic.Int64
	first   atomic.Int64 // unix nanoseconds of the first output, 0 before

	// stop ends the running agent; stopped is closed once it returned.
	stop    context.CancelFunc
	stopped chan struct{}

	mu sync.Mutex
	// prev is what the sink holds, by backend: the desired outputs, plus,
	// when pruning was not allowed, what it held before and they lack.
	prev     map[string]*snapshot.Snapshot
	waiting  []pending
	inputLat []time.Duration
	missed   int          // changes superseded before they were seen
	churn    *churnWatch  // set while output churn is counted
	audit    *outputAudit // set in the chaos soak
}

var _ agent.Sink = (*sim)(nil)

// Apply notes what changed and discards the outputs. Like a real sink, it
// deletes what desired lacks only when prune is allowed.
func (s *sim) Apply(_ context.Context, backend string, desired *snapshot.Snapshot, prune bool) (map[snapshot.ID]error, error) {
	now := time.Now()
	s.first.CompareAndSwap(0, now.UnixNano())
	s.applies.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.prev == nil {
		s.prev = map[string]*snapshot.Snapshot{}
	}
	prev := s.prev[backend]
	if prev == nil {
		prev = snapshot.Empty
	}
	next := desired
	if !prune {
		next = keepAbsent(prev, desired)
	}
	d := snapshot.Diff(prev, next)
	s.prev[backend] = next
	if s.churn != nil {
		s.churn.observe(backend, prev, d)
	}
	if s.audit != nil {
		s.audit.observe(backend, d, now)
	}
	s.payload.Add(int64(proto.Size(snapshot.DeltaToProto(d, false))))
	if len(s.waiting) > 0 {
		s.matchInputs(d.Upserts, now)
	}
	s.policy.match(s.index, d.Upserts, now)
	return nil, nil
}

// matchInputs records the changes whose marker arrived; older changes of
// the same service count as arrived with it (their outputs were coalesced).
func (s *sim) matchInputs(upserts []snapshot.Resource, now time.Time) {
	kept := s.waiting[:0]
	seen := map[int]int{} // service → index of the newest change seen
	for i, p := range s.waiting {
		for _, r := range upserts {
			if bytes.Contains(r.Body, p.quoted) {
				seen[p.service] = i
				break
			}
		}
	}
	for i, p := range s.waiting {
		newest, ok := seen[p.service]
		switch {
		case ok && i == newest:
			s.inputLat = append(s.inputLat, now.Sub(p.at))
		case ok && i < newest:
			s.missed++
		default:
			kept = append(kept, p)
		}
	}
	s.waiting = kept
}

// expect records a change made to the cluster's inputs.
func (s *sim) expect(service int, marker string, at time.Time) {
	s.mu.Lock()
	s.waiting = append(s.waiting, pending{service: service, quoted: []byte(`"` + marker + `"`), at: at})
	s.mu.Unlock()
}

// outstanding returns how many changes the agent has yet to receive.
func (s *sim) outstanding() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.waiting)
}

// watchChurn starts counting the changes to the agent's outputs in w.
func (s *sim) watchChurn(w *churnWatch) {
	s.mu.Lock()
	s.churn = w
	s.mu.Unlock()
}

// keepAbsent returns desired plus the resources of prev it lacks: what a
// sink holds after applying desired without pruning.
func keepAbsent(prev, desired *snapshot.Snapshot) *snapshot.Snapshot {
	var kept []snapshot.Resource
	for r := range prev.All() {
		if _, ok := desired.Get(r.ID); !ok {
			kept = append(kept, r)
		}
	}
	if len(kept) == 0 {
		return desired
	}
	out, err := snapshot.New(desired.Version(), append(desired.Resources(), kept...))
	if err != nil {
		return desired // unreachable: the IDs are distinct
	}
	return out
}

// holding returns the outputs the sink holds, by backend; empty ones are
// left out.
func (s *sim) holding() map[string]*snapshot.Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]*snapshot.Snapshot{}
	for b, snap := range s.prev {
		if snap.Len() > 0 {
			out[b] = snap
		}
	}
	return out
}

// held returns the short hashes of the outputs the agent holds, by
// backend; empty outputs are left out.
func (s *sim) held() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]string{}
	for b, snap := range s.prev {
		if snap.Len() > 0 {
			out[b] = snap.Hash().Short()
		}
	}
	return out
}

// policyWatch tracks the current policy edit across the fleet.
type policyWatch struct {
	mu       sync.Mutex
	quoted   []byte
	at       time.Time
	received []time.Duration // by agent index; 0 until received
	count    int
}

func newPolicyWatch(agents int) *policyWatch {
	return &policyWatch{received: make([]time.Duration, agents)}
}

// start begins tracking an edit whose marker appears in outputs as quoted.
func (w *policyWatch) start(quoted string, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.quoted, w.at, w.count = []byte(quoted), at, 0
	clear(w.received)
}

func (w *policyWatch) match(agent int, upserts []snapshot.Resource, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.quoted == nil || w.received[agent] != 0 {
		return
	}
	for _, r := range upserts {
		if bytes.Contains(r.Body, w.quoted) {
			w.received[agent] = max(now.Sub(w.at), 1)
			w.count++
			return
		}
	}
}

// done returns how many agents received the edit and their latencies.
func (w *policyWatch) done() (int, []time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []time.Duration
	for _, d := range w.received {
		if d != 0 {
			out = append(out, d)
		}
	}
	return w.count, out
}

// stop ends tracking.
func (w *policyWatch) stop() {
	w.mu.Lock()
	w.quoted = nil
	w.mu.Unlock()
}
