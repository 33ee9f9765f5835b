package pluginhost

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	translatorv1 "github.com/meshrelay/meshrelay/proto/translator/v1"
	"github.com/meshrelay/meshrelay/sdk"
	"github.com/meshrelay/meshrelay/sdk/protocol/host"
)

// Linked is a translator linked into the host process, called through the
// same protocol as a plugin process (over an in-memory connection), so
// both behave alike. Calls are serialized.
type Linked struct {
	name     string
	backends []string
	decl     declared
	client   translatorv1.TranslatorClient
	stop     func()
	logger   *slog.Logger

	mu sync.Mutex
	// sessions are the Translate sessions by name ("" is Translate's):
	// each opened by its first call, and dropped after it broke.
	sessions map[string]*host.Session
	closed   bool
}

var (
	_ Sessions = (*Linked)(nil)
	_ Sessions = (*Plugin)(nil)
)

// InProcess serves t in process and returns it as a Translator. A nil
// logger discards the translator's logs.
func InProcess(t sdk.Translator, logger *slog.Logger) (*Linked, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	d := t.Describe()
	conn, stop, err := sdk.ServeInProcess(t)
	if err != nil {
		return nil, fmt.Errorf("in-process translator %q: %w", d.Name, err)
	}
	backends := slices.Clone(d.Backends)
	slices.Sort(backends)
	l := &Linked{
		name: d.Name, backends: backends, client: translatorv1.NewTranslatorClient(conn), stop: stop,
		logger: logger.With("plugin", d.Name, "version", d.Version),
	}
	l.decl.set(d.Meshes, d.InputKinds, d.OutputKinds)
	return l, nil
}

// Name returns the translator's name.
func (l *Linked) Name() string { return l.name }

// Backends returns the translator's backends.
func (l *Linked) Backends() []string { return slices.Clone(l.backends) }

// Meshes returns the backends the translator declares need their mesh.
func (l *Linked) Meshes() []string { m, _, _ := l.decl.get(); return m }

// InputKinds returns the kinds the translator declares it reads.
func (l *Linked) InputKinds() []string { _, k, _ := l.decl.get(); return k }

// OutputKinds returns the kinds the translator declares it emits.
func (l *Linked) OutputKinds() []string { _, _, k := l.decl.get(); return k }

// Translate brings the translator to the view v; see [Translator].
func (l *Linked) Translate(ctx context.Context, v View) (Result, error) {
	return l.translate(ctx, "", v)
}

func (l *Linked) translate(ctx context.Context, name string, v View) (Result, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return Result{}, fmt.Errorf("translator %q is closed", l.name)
	}
	sess := l.sessions[name]
	if sess == nil {
		s, err := host.Open(l.client, l.name, l.backends, DefaultOptions().MaxOutputBytes)
		if err != nil {
			return Result{}, fmt.Errorf("translator %q: %w", l.name, err)
		}
		if l.sessions == nil {
			l.sessions = map[string]*host.Session{}
		}
		l.sessions[name], sess = s, s
	}
	res, err := sess.Translate(ctx, v)
	if err != nil {
		if !errors.Is(err, ErrPluginFailed) {
			sess.Close()
			delete(l.sessions, name)
		}
		return Result{}, fmt.Errorf("translator %q: %w", l.name, err)
	}
	return res, nil
}

// Session returns the translator on the session named name, beside
// Translate's (""); see [Sessions].
func (l *Linked) Session(name string) Translator {
	if name == "" {
		return l
	}
	return &namedSession{t: l, name: name, translate: l.translate}
}

// CloseSession ends the session named name; see [Sessions].
func (l *Linked) CloseSession(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s := l.sessions[name]; s != nil {
		s.Close()
		delete(l.sessions, name)
	}
}

// Close stops the translator's server.
func (l *Linked) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.closed = true
	for name, s := range l.sessions {
		s.Close()
		delete(l.sessions, name)
	}
	l.stop()
}
