package agent

import (
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"google.golang.org/protobuf/proto"
)

// SendTraffic queues a window of the cluster's traffic (core/agent/traffic)
// on the current stream. build gets the stream's number, which changes
// with every new stream, and returns the message, or nil for none. It
// reports whether the message was queued: without a stream, or with the
// stream's queue full, the window is dropped.
func (a *Agent) SendTraffic(build func(stream uint64) *relayv1.TrafficWindow) bool {
	a.mu.Lock()
	queue := a.queue
	a.mu.Unlock()
	if queue == nil {
		return false
	}
	// Connects grows before the stream's queue is set.
	w := build(uint64(a.Stats.Connects.Load()))
	if w == nil {
		return true
	}
	select {
	case queue <- &relayv1.AgentMessage{Msg: &relayv1.AgentMessage_Traffic{Traffic: w}}:
		a.Stats.TrafficBytes.Add(int64(proto.Size(w)))
		return true
	default:
		return false
	}
}
