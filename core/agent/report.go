package agent

import (
	"maps"
	"slices"

	"github.com/meshrelay/meshrelay/api/snapshot"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
)

// Report sends per-resource results the agent learned after an apply: a
// drift correction, a CRD that appeared, a proxy that refused a resource.
// They are acked against the backend's current output version. Without a
// stream, the report is dropped: the next apply reports again.
func (a *Agent) Report(backend string, results map[snapshot.ID]error) {
	a.mu.Lock()
	cur, ok := a.received[backend]
	queue := a.queue
	a.mu.Unlock()
	if !ok || queue == nil {
		return
	}
	ack := &relayv1.Ack{Subject: relayv1.Ack_SUBJECT_OUTPUT, Backend: backend, Version: cur.Version()}
	for _, id := range slices.SortedFunc(maps.Keys(results), snapshot.ID.Compare) {
		if err := results[id]; err != nil {
			ack.Results = append(ack.Results, &relayv1.ResourceResult{Id: snapshot.IDToProto(id), Error: err.Error()})
		}
	}
	select {
	case queue <- &relayv1.AgentMessage{Msg: &relayv1.AgentMessage_Ack{Ack: ack}}:
	default:
	}
}
