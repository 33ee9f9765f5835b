package ui

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"time"

	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"google.golang.org/protobuf/proto"
)

// Bounds of an event stream's writes and the keep-alive comment's period.
const (
	eventWriteTimeout = 10 * time.Second
	keepAlive         = 15 * time.Second
)

// events streams the fleet's status as server-sent events: one "status"
// event at once and another whenever it changes. The caller's token is
// checked on every poll, so a stream never outlives its authorization; the
// stream ends after Options.StreamLife and the browser reconnects.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	ctx := adminContext(r.Context(), token(r))
	st, err := s.admin.GetStatus(ctx, &relayv1.GetStatusRequest{})
	if err != nil {
		s.writeCallError(w, err)
		return
	}
	select {
	case s.streams <- struct{}{}:
		defer func() { <-s.streams }()
	default:
		writeError(w, http.StatusServiceUnavailable, errStreamsFull.Error())
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	rc := http.NewResponseController(w)
	send := func(format string, args ...any) error {
		_ = rc.SetWriteDeadline(time.Now().Add(eventWriteTimeout))
		if _, err := fmt.Fprintf(w, format, args...); err != nil {
			return err
		}
		return rc.Flush()
	}
	if err := s.streamStatus(ctx, st, send); err != nil {
		s.log.Debug("event stream ended", "error", err)
	}
}

// streamStatus sends st, then polls the status and sends it when it
// changed, until the stream's life ends, a write fails or the token is
// refused.
func (s *Server) streamStatus(ctx context.Context, st *relayv1.Status, send func(string, ...any) error) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.StreamLife)
	defer cancel()
	if err := send("retry: 2000\n\n"); err != nil {
		return err
	}
	last := [32]byte{}
	poll := time.NewTicker(s.opts.Poll)
	defer poll.Stop()
	ping := time.NewTicker(keepAlive)
	defer ping.Stop()
	for {
		if sum := fingerprint(st); sum != last {
			data, err := jsonOptions.Marshal(st)
			if err != nil {
				return err
			}
			if err := send("event: status\ndata: %s\n\n", data); err != nil {
				return err
			}
			last = sum
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ping.C:
			if err := send(": keep-alive\n\n"); err != nil {
				return err
			}
		case <-poll.C:
			var err error
			if st, err = s.admin.GetStatus(ctx, &relayv1.GetStatusRequest{}); err != nil {
				_ = send("event: failed\ndata: %q\n\n", err.Error())
				return err
			}
		}
	}
}

// fingerprint hashes what a status says, less the heartbeat times that
// change every few seconds without news.
func fingerprint(st *relayv1.Status) [32]byte {
	st = proto.Clone(st).(*relayv1.Status)
	for _, c := range st.GetClusters() {
		c.LastSeen = nil
	}
	data, _ := proto.MarshalOptions{Deterministic: true}.Marshal(st)
	return sha256.Sum256(data)
}
