package server

import (
	"context"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
)

// countingHandler counts the records logged at Warn or above.
type countingHandler struct{ warnings atomic.Int64 }

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		h.warnings.Add(1)
	}
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }

// A peer that makes the server close its connections as fast as it opens
// them is counted every time but logged a bounded number of times.
func TestRefusalsAreCountedAndTheirLogsBounded(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	h := &countingHandler{}
	var refused atomic.Int64
	g := newGate(lis, nil, DefaultOptions(), slog.New(h), func(string) { refused.Add(1) })
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	ic := newInspectedConn(a, g.anonLimits, g.violation)
	const n = 1000
	for range n {
		g.violation(ic, "message_limit", nil)
	}
	if got := refused.Load(); got != n {
		t.Errorf("%d refusals counted, want %d", got, n)
	}
	if got := h.warnings.Load(); got < 1 || got > 20 {
		t.Errorf("%d warnings logged for %d refusals within a second, want between 1 and 20", got, n)
	}
}
