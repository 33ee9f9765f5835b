package ui

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
)

// Bounds of an event stream's writes and the keep-alive comment's period.
const (
	eventWriteTimeout = 10 * time.Second
	keepAlive         = 15 * time.Second
)

// events streams the fleet's status as server-sent events: one "status"
// event at once and another whenever it changes. The caller's token is
// checked when the stream opens (the admin token does not change while the
// server runs), and a stream opened with a session ends when the session
// does; the stream ends after Options.StreamLife and the browser
// reconnects. However many streams are open, the status is computed at
// most twice per Options.Poll (statusCache).
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	ctx := adminContext(r.Context(), s.token(r))
	live := func() bool { return true }
	if !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") {
		id := sessionID(r)
		live = func() bool { return s.sessions.token(id) != "" }
	}
	if err := s.authorize(ctx); err != nil {
		s.writeCallError(w, err)
		return
	}
	// The first status is the streams' shared one: a page opened needs
	// no status of its own.
	version, data, err := s.status.get(ctx, s.admin, s.opts.Poll/2, "")
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
	if err := s.streamStatus(ctx, version, data, live, send); err != nil {
		s.log.Debug("event stream ended", "error", err)
	}
}

// streamStatus sends the status of version as JSON (data), then polls the
// status and sends it when its version (relayv1.Status.Version) changed, until the stream's life ends,
// a write fails, the token is refused or live says the session ended. An
// unchanged status is neither serialised nor sent.
func (s *Server) streamStatus(ctx context.Context, version string, data []byte, live func() bool, send func(string, ...any) error) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.StreamLife)
	defer cancel()
	if err := send("retry: 2000\n\n"); err != nil {
		return err
	}
	if err := send("event: status\ndata: %s\n\n", data); err != nil {
		return err
	}
	sent := version
	poll := time.NewTicker(s.opts.Poll)
	defer poll.Stop()
	ping := time.NewTicker(keepAlive)
	defer ping.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ping.C:
			if err := send(": keep-alive\n\n"); err != nil {
				return err
			}
		case <-poll.C:
			if !live() {
				_ = send("event: failed\ndata: %q\n\n", "logged out")
				return nil
			}
			version, data, err := s.status.get(ctx, s.admin, s.opts.Poll/2, sent)
			if err != nil {
				_ = send("event: failed\ndata: %q\n\n", err.Error())
				return err
			}
			if version == sent {
				continue
			}
			if err := send("event: status\ndata: %s\n\n", data); err != nil {
				return err
			}
			sent = version
		}
	}
}

// statusCache shares the fleet's status among the event streams: it asks
// the admin API at most once per max age, whatever the number of streams,
// and serialises each version of the status at most once for all of them.
type statusCache struct {
	mu      sync.Mutex
	at      time.Time
	st      *relayv1.Status
	version string
	data    []byte // st as JSON, once a stream asked for it
}

// get returns the version of a status no older than maxAge, and the
// status as JSON unless its version is known, the one the caller sent
// last. It asks the admin API with ctx's token when the cached status is
// older. Callers hold an authorized stream; a refused token is still
// refused here when the cache is stale.
func (c *statusCache) get(ctx context.Context, admin relayv1.AdminServer, maxAge time.Duration, known string) (version string, data []byte, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.refresh(ctx, admin, maxAge); err != nil {
		return "", nil, err
	}
	if c.version == known {
		return c.version, nil, nil
	}
	if c.data == nil {
		if c.data, err = jsonOptions.Marshal(c.st); err != nil {
			return "", nil, err
		}
	}
	return c.version, c.data, nil
}

// status returns a status no older than maxAge, as get does. The caller
// must not change it.
func (c *statusCache) status(ctx context.Context, admin relayv1.AdminServer, maxAge time.Duration) (*relayv1.Status, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.refresh(ctx, admin, maxAge); err != nil {
		return nil, err
	}
	return c.st, nil
}

// refresh asks the admin API for the status when the one held is older
// than maxAge. Callers hold c.mu.
func (c *statusCache) refresh(ctx context.Context, admin relayv1.AdminServer, maxAge time.Duration) error {
	if c.st != nil && time.Since(c.at) < maxAge {
		return nil
	}
	st, err := admin.GetStatus(ctx, &relayv1.GetStatusRequest{})
	if err != nil {
		return err
	}
	if c.st == nil || st.GetVersion() != c.version {
		c.st, c.version, c.data = st, st.GetVersion(), nil
	}
	c.at = time.Now()
	return nil
}
