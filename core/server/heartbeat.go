package server

import (
	"sync"
	"time"

	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// StreamHeartbeat is how often a replica heartbeats on an agent's stream:
// a third of the server timeout the agent announced in its Hello, so that
// two heartbeats may be late before the agent leaves; never more often than
// the replica's own heartbeat (Options.Heartbeat), which an agent that
// announces none (older agents) gets.
func StreamHeartbeat(configured, announced time.Duration) time.Duration {
	return max(configured, announced/3)
}

// heartbeats times the heartbeats of a replica's streams: one ticker for
// all the streams of one interval (StreamHeartbeat; a fleet has one or
// two), rather than a timer a stream. Each tick offers every stream of
// the interval the same message, which the stream's sendLoop sends; a
// stream that has not sent the last one yet skips this one, so a stream
// that does not drain never holds the others up.
//
// The streams of an interval heartbeat together: the replica's timer
// wakes once an interval for all of them, not once a stream.
type heartbeats struct {
	mu     sync.Mutex
	groups map[time.Duration]*beatGroup
}

// beatGroup is the streams of one interval and the goroutine that beats
// them; stop ends it when the last stream leaves.
type beatGroup struct {
	streams map[*stream]struct{}
	stop    chan struct{}
}

func newHeartbeats() *heartbeats {
	return &heartbeats{groups: map[time.Duration]*beatGroup{}}
}

// add starts heartbeating st every st.heartbeat on st.beat, until remove
// is called.
func (h *heartbeats) add(st *stream) (remove func()) {
	every := st.heartbeat
	h.mu.Lock()
	g := h.groups[every]
	if g == nil {
		g = &beatGroup{streams: map[*stream]struct{}{}, stop: make(chan struct{})}
		h.groups[every] = g
		go h.run(every, g)
	}
	g.streams[st] = struct{}{}
	h.mu.Unlock()
	return func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		delete(g.streams, st)
		if len(g.streams) == 0 && h.groups[every] == g {
			delete(h.groups, every)
			close(g.stop)
		}
	}
}

// run beats g's streams every interval until g stops.
func (h *heartbeats) run(every time.Duration, g *beatGroup) {
	t := time.NewTicker(every)
	defer t.Stop()
	var streams []*stream
	for {
		select {
		case <-g.stop:
			return
		case now := <-t.C:
			beat := &relayv1.ServerMessage{Msg: &relayv1.ServerMessage_Heartbeat{Heartbeat: &relayv1.Heartbeat{Time: timestamppb.New(now)}}}
			h.mu.Lock()
			streams = streams[:0]
			for st := range g.streams {
				streams = append(streams, st)
			}
			h.mu.Unlock()
			for _, st := range streams {
				select {
				case st.beat <- beat:
				default:
				}
			}
			clear(streams)
		}
	}
}

// groupCount returns how many intervals have a ticker, for tests.
func (h *heartbeats) groupCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.groups)
}
