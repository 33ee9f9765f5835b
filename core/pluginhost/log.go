package pluginhost

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"
)

// slogSink forwards hclog records, including those go-plugin parses from a
// plugin's stderr, to a *slog.Logger, keeping their levels.
type slogSink struct{ logger *slog.Logger }

// Accept implements hclog.SinkAdapter.
func (s slogSink) Accept(name string, level hclog.Level, msg string, args ...any) {
	var l slog.Level
	switch level {
	case hclog.Trace:
		l = slog.LevelDebug - 4
	case hclog.Debug:
		l = slog.LevelDebug
	case hclog.Info, hclog.NoLevel, hclog.DefaultLevel:
		l = slog.LevelInfo
	case hclog.Warn:
		l = slog.LevelWarn
	default:
		l = slog.LevelError
	}
	ctx := context.Background()
	if !s.logger.Enabled(ctx, l) {
		return
	}
	attrs := make([]any, 0, len(args)+2)
	if name != "" {
		attrs = append(attrs, slog.String("logger", name))
	}
	for i := 0; i+1 < len(args); i += 2 {
		key := fmt.Sprint(args[i])
		if key == "plugin" {
			key = "plugin_path" // go-plugin's own; the logger names the plugin already
		}
		attrs = append(attrs, slog.Any(key, args[i+1]))
	}
	s.logger.Log(ctx, l, msg, attrs...)
}

// hclogFor returns an hclog.Logger that writes only to logger, at every level.
func hclogFor(logger *slog.Logger) hclog.Logger {
	l := hclog.NewInterceptLogger(&hclog.LoggerOptions{Level: hclog.Trace, Output: io.Discard})
	l.RegisterSink(slogSink{logger: logger})
	return l
}

// tail keeps the last bytes written to it, for error messages.
type tail struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = append([]byte(nil), t.buf[len(t.buf)-t.max:]...)
	}
	return len(p), nil
}

// String returns the kept bytes, trimmed.
func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.buf))
}

// lineLogger logs every line written to it at warn level.
type lineLogger struct {
	logger *slog.Logger
	msg    string
	mu     sync.Mutex
	buf    []byte
}

func (w *lineLogger) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.logger.Warn(w.msg, "line", string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
	return len(p), nil
}
