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
	// sess is the Translate session; nil until the first call opens one,
	// and after it broke.
	sess   *host.Session
	closed bool
}

var _ Translator = (*Linked)(nil)

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
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return Result{}, fmt.Errorf("translator %q is closed", l.name)
	}
	if l.sess == nil {
		s, err := host.Open(l.client, l.name, l.backends, DefaultOptions().MaxOutputBytes)
		if err != nil {
			return Result{}, fmt.Errorf("translator %q: %w", l.name, err)
		}
		l.sess = s
	}
	res, err := l.sess.Translate(ctx, v)
	if err != nil {
		if !errors.Is(err, ErrPluginFailed) {
			l.sess.Close()
			l.sess = nil
		}
		return Result{}, fmt.Errorf("translator %q: %w", l.name, err)
	}
	return res, nil
}

// Close stops the translator's server.
func (l *Linked) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.closed = true
	if l.sess != nil {
		l.sess.Close()
		l.sess = nil
	}
	l.stop()
}
