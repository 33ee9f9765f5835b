package pluginhost

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/meshrelay/meshrelay/sdk/protocol/host"
)

// Scratch is a translate session of its own with a running translator,
// beside the session the engine drives: a preview (`meshrelay diff`)
// translates a proposed fleet on it without touching what the engine's
// session holds. The plugin keeps the scratch session's view until Close.
// It is a [Translator]; calls must not overlap.
type Scratch struct {
	name     string
	backends []string
	meshes   []string
	inputs   []string
	outputs  []string
	sess     *host.Session
	silence  *silence
	timeout  time.Duration
}

var _ Translator = (*Scratch)(nil)

// Scratch opens a scratch session with the plugin, starting its process
// when none runs. A call on it ends when it makes no progress for
// Options.CallTimeout, as the engine's do; a call that fails leaves the
// plugin's process alone (the host's health watch looks after it).
func (p *Plugin) Scratch(ctx context.Context) (*Scratch, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, fmt.Errorf("plugin %q: host is closed", p.entry.Name)
	}
	if p.proc != nil && p.proc.exited() {
		p.crashed("plugin process exited")
	}
	if p.proc == nil {
		if err := p.start(ctx); err != nil {
			return nil, err
		}
	}
	quiet := newSilence()
	sess, err := host.Open(quiet.watch(p.proc.proto.Translator), p.entry.Name, p.proc.backends(), p.opts.MaxOutputBytes)
	if err != nil {
		return nil, fmt.Errorf("plugin %q: %w", p.entry.Name, err)
	}
	meshes, inputs, outputs := p.decl.get()
	return &Scratch{name: p.entry.Name, backends: p.proc.backends(), meshes: meshes, inputs: inputs, outputs: outputs, sess: sess, silence: quiet, timeout: p.opts.CallTimeout}, nil
}

// Scratch opens a scratch session with the in-process translator.
func (l *Linked) Scratch(context.Context) (*Scratch, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, fmt.Errorf("translator %q is closed", l.name)
	}
	quiet := newSilence()
	sess, err := host.Open(quiet.watch(l.client), l.name, l.backends, DefaultOptions().MaxOutputBytes)
	if err != nil {
		return nil, fmt.Errorf("translator %q: %w", l.name, err)
	}
	meshes, inputs, outputs := l.decl.get()
	return &Scratch{name: l.name, backends: l.backends, meshes: meshes, inputs: inputs, outputs: outputs, sess: sess, silence: quiet, timeout: DefaultOptions().CallTimeout}, nil
}

// Name returns the translator's name.
func (s *Scratch) Name() string { return s.name }

// Backends returns the translator's backends.
func (s *Scratch) Backends() []string { return slices.Clone(s.backends) }

// Meshes returns the backends the translator declares need their mesh.
func (s *Scratch) Meshes() []string { return s.meshes }

// InputKinds returns the kinds the translator declares it reads.
func (s *Scratch) InputKinds() []string { return s.inputs }

// OutputKinds returns the kinds the translator declares it emits.
func (s *Scratch) OutputKinds() []string { return s.outputs }

// Translate brings the scratch session to the view v; see [Translator].
func (s *Scratch) Translate(ctx context.Context, v View) (Result, error) {
	callCtx, cancel := s.silence.bound(ctx, s.timeout, errCallTimeout)
	defer cancel()
	res, err := s.sess.Translate(callCtx, v)
	switch {
	case err == nil:
		return res, nil
	case errors.Is(context.Cause(callCtx), errCallTimeout) && ctx.Err() == nil:
		return Result{}, fmt.Errorf("plugin %q: no progress for %s: %w: %w", s.name, s.timeout, errCallTimeout, err)
	default:
		return Result{}, fmt.Errorf("plugin %q: %w", s.name, err)
	}
}

// Close ends the session; the plugin forgets its view.
func (s *Scratch) Close() { s.sess.Close() }

// Scratcher is a translator that can open scratch sessions: plugin
// processes and in-process translators.
type Scratcher interface {
	Translator
	Scratch(ctx context.Context) (*Scratch, error)
}
