package agent

import (
	"context"
	"sync"

	"github.com/meshrelay/meshrelay/api/snapshot"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
)

// applier applies one backend's outputs in order, latest first: while one
// apply runs, newer outputs replace each other and only the newest is
// applied next.
type applier struct {
	backend string
	a       *Agent
	wake    chan struct{}
	cancel  context.CancelFunc

	mu      sync.Mutex
	pending *work
}

type work struct {
	desired *snapshot.Snapshot
	prune   bool
	queue   chan<- *relayv1.AgentMessage
}

func (a *Agent) newApplier(ctx context.Context, backend string) *applier {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	ap := &applier{backend: backend, a: a, wake: make(chan struct{}, 1), cancel: cancel}
	go ap.run(ctx)
	return ap
}

func (ap *applier) offer(desired *snapshot.Snapshot, prune bool, queue chan<- *relayv1.AgentMessage) {
	ap.mu.Lock()
	ap.pending = &work{desired: desired, prune: prune, queue: queue}
	ap.mu.Unlock()
	select {
	case ap.wake <- struct{}{}:
	default:
	}
}

func (ap *applier) stop() { ap.cancel() }

func (ap *applier) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-ap.wake:
		}
		ap.mu.Lock()
		w := ap.pending
		ap.pending = nil
		ap.mu.Unlock()
		if w == nil {
			continue
		}
		ack := &relayv1.Ack{Subject: relayv1.Ack_SUBJECT_OUTPUT, Backend: ap.backend, Version: w.desired.Version()}
		results, err := ap.a.sinks.Apply(ctx, ap.backend, w.desired, w.prune)
		if err != nil {
			ack.Error = err.Error()
			ap.a.log.Warn("apply failed", "backend", ap.backend, "version", w.desired.Version(), "error", err)
		}
		for id, rerr := range results {
			if rerr != nil {
				ack.Results = append(ack.Results, &relayv1.ResourceResult{Id: snapshot.IDToProto(id), Error: rerr.Error()})
			}
		}
		select {
		case w.queue <- &relayv1.AgentMessage{Msg: &relayv1.AgentMessage_Ack{Ack: ack}}:
		case <-ctx.Done():
			return
		default:
			// The stream is gone or jammed; the next Hello reports what is applied.
		}
	}
}
