package pluginhost

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshrelay/meshrelay/sdk/protocol/host"
)

// Plugin is one installed plugin, started from its lock file entry on the
// first call and restarted, with exponential backoff, after it crashes or
// hangs. Calls are serialized.
type Plugin struct {
	entry  Entry
	path   string
	opts   Options
	logger *slog.Logger
	decl   declared

	mu     sync.Mutex
	closed bool
	proc   *process
	// running is proc, readable without mu by the health watch while a
	// call holds mu.
	running atomic.Pointer[process]
	// sessions are the Translate sessions of proc by name ("" is the
	// engine's own; see Session): each opened by its first call, and
	// dropped when the process or the session broke.
	sessions map[string]*host.Session
	// silence measures the progress of the sessions' calls (see
	// Options.CallTimeout), which are serialized.
	silence  *silence
	failures int
	retryAt  time.Time
	starts   int
}

var _ Translator = (*Plugin)(nil)

func newPlugin(dir string, e Entry, opts Options, logger *slog.Logger) *Plugin {
	path := e.Path
	if !filepath.IsAbs(path) {
		path = filepath.Join(dir, path)
	}
	p := &Plugin{entry: e, path: path, opts: opts, logger: logger.With("plugin", e.Name, "version", e.Version), silence: newSilence()}
	p.decl.set(e.Meshes, e.InputKinds, e.OutputKinds)
	return p
}

// Name returns the plugin's name from the lock file.
func (p *Plugin) Name() string { return p.entry.Name }

// Backends returns the plugin's backends from the lock file.
func (p *Plugin) Backends() []string { return slices.Clone(p.entry.Backends) }

// Meshes returns the backends the plugin declares need their mesh: from
// the lock file until the plugin starts, then from its Describe answer.
// It never waits for a call in flight.
func (p *Plugin) Meshes() []string { m, _, _ := p.decl.get(); return m }

// InputKinds returns the kinds the plugin declares it reads, from the lock
// file until the plugin starts, then from its Describe answer. It never
// waits for a call in flight.
func (p *Plugin) InputKinds() []string { _, k, _ := p.decl.get(); return k }

// OutputKinds returns the kinds the plugin declares it emits, from the
// lock file until the plugin starts, then from its Describe answer. It
// never waits for a call in flight.
func (p *Plugin) OutputKinds() []string { _, _, k := p.decl.get(); return k }

// declared holds what a plugin declares beside its backends, behind its
// own lock so that reading it never waits for a translation.
type declared struct {
	mu                      sync.Mutex
	meshes, inputs, outputs []string
}

func (d *declared) set(meshes, inputKinds, outputKinds []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.meshes, d.inputs, d.outputs = sortedSet(meshes), sortedSet(inputKinds), sortedSet(outputKinds)
}

func (d *declared) get() (meshes, inputKinds, outputKinds []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.meshes), slices.Clone(d.inputs), slices.Clone(d.outputs)
}

// Entry returns the plugin's lock file entry.
func (p *Plugin) Entry() Entry { return p.entry }

// Starts returns how many times the plugin process was started.
func (p *Plugin) Starts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.starts
}

// Pid returns the running process's id, or 0 when none runs.
func (p *Plugin) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.proc == nil || p.proc.exited() {
		return 0
	}
	if rc := p.proc.client.ReattachConfig(); rc != nil {
		return rc.Pid
	}
	return 0
}

// Translate brings the plugin to the view v; see [Translator]. It starts
// the plugin when none runs, waiting out the restart backoff within ctx,
// and checks the plugin's sha256 before every start. A call that makes no
// progress for Options.CallTimeout (the plugin takes no part of the update
// and sends no part of its answer) kills the plugin; one that progresses
// runs as long as the view needs.
func (p *Plugin) Translate(ctx context.Context, v View) (Result, error) {
	return p.translate(ctx, "", v)
}

// translate brings the session named name to the view v.
func (p *Plugin) translate(ctx context.Context, name string, v View) (Result, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return Result{}, fmt.Errorf("plugin %q: host is closed", p.entry.Name)
	}
	if p.proc != nil && p.proc.exited() {
		p.crashed("plugin process exited")
	}
	if p.proc == nil {
		if err := p.start(ctx); err != nil {
			return Result{}, err
		}
	}
	sess := p.sessions[name]
	if sess == nil {
		s, err := host.Open(p.silence.watch(p.proc.proto.Translator), p.entry.Name, p.proc.backends(), p.opts.MaxOutputBytes)
		if err != nil {
			p.crashed(err.Error())
			return Result{}, fmt.Errorf("plugin %q: %w", p.entry.Name, err)
		}
		if p.sessions == nil {
			p.sessions = map[string]*host.Session{}
		}
		p.sessions[name], sess = s, s
	}
	callCtx, cancel := p.silence.bound(ctx, p.opts.CallTimeout, errCallTimeout)
	defer cancel()
	res, err := sess.Translate(callCtx, v)
	switch {
	case err == nil:
		p.failures = 0
		return res, nil
	case errors.Is(err, ErrPluginFailed):
		return Result{}, err
	case errors.Is(context.Cause(callCtx), errCallTimeout) && ctx.Err() == nil:
		p.logger.Error("plugin made no progress in time; killing it", "timeout", p.opts.CallTimeout)
		p.crashed("hung")
		return Result{}, fmt.Errorf("plugin %q: no progress for %s (it took no part of the update and sent no part of its answer); killed it, it restarts on the next call: %w: %w", p.entry.Name, p.opts.CallTimeout, errCallTimeout, err)
	case errors.Is(err, host.ErrProtocol):
		// The plugin runs but its session's idea of what was sent is wrong.
		p.closeSession(name)
		p.logger.Error("refused the plugin's answer", "error", err)
		return Result{}, fmt.Errorf("plugin %q: %w", p.entry.Name, err)
	default:
		if ctx.Err() != nil {
			p.closeSession(name)
			return Result{}, fmt.Errorf("plugin %q: %w", p.entry.Name, err)
		}
		proc := p.proc
		p.crashed(err.Error()) // kills the process and waits for its output
		if proc.unhealthy.Load() {
			return Result{}, fmt.Errorf("plugin %q failed its health check during the call (no answer within %s); killed it, it restarts on the next call: %w", p.entry.Name, p.opts.HealthTimeout, err)
		}
		if out := lastLines(proc.stderr.String(), 10); out != "" {
			return Result{}, fmt.Errorf("plugin %q crashed: %w; its stderr ends with:\n%s", p.entry.Name, err, out)
		}
		return Result{}, fmt.Errorf("plugin %q crashed: %w", p.entry.Name, err)
	}
}

// errCallTimeout is the cause of a call's context when it made no
// progress for CallTimeout.
var errCallTimeout = fmt.Errorf("plugin call timed out: %w", context.DeadlineExceeded)

// lastLines returns the last n lines of a plugin's stderr, or, when it
// panicked, n lines from the panic on.
func lastLines(s string, n int) string {
	if i := strings.LastIndex(s, "panic: "); i >= 0 {
		lines := strings.Split(s[i:], "\n")
		return strings.Join(lines[:min(n, len(lines))], "\n")
	}
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// start waits out the backoff and starts the process.
func (p *Plugin) start(ctx context.Context) error {
	if wait := time.Until(p.retryAt); wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("plugin %q: waiting %s to restart: %w", p.entry.Name, wait.Round(time.Millisecond), ctx.Err())
		}
	}
	p.starts++
	proc, err := launch(ctx, p.entry.Name, p.path, p.entry.SHA256, p.opts, p.logger)
	if err != nil {
		p.failed()
		p.logger.Error("plugin did not start", "error", err, "retry_in", p.opts.backoff(p.failures))
		return err
	}
	if proc.desc.GetName() != p.entry.Name {
		proc.kill()
		p.failed()
		return fmt.Errorf("plugin %q: the binary describes itself as %q", p.entry.Name, proc.desc.GetName())
	}
	p.logger.Info("plugin started", "protocol", proc.version)
	p.decl.set(proc.desc.GetMeshes(), proc.desc.GetInputKinds(), proc.desc.GetOutputKinds())
	p.setProc(proc)
	return nil
}

func (p *Plugin) failed() {
	p.failures++
	p.retryAt = time.Now().Add(p.opts.backoff(p.failures))
}

// crashed kills and forgets the process; the next start waits out the backoff.
func (p *Plugin) crashed(why string) {
	p.resetSession()
	if p.proc != nil {
		p.logger.Warn("plugin stopped", "reason", why)
		p.proc.forceKill()
		p.setProc(nil)
	}
	p.failed()
}

// resetSession ends every session: the process broke or stops.
func (p *Plugin) resetSession() {
	for name := range p.sessions {
		p.closeSession(name)
	}
}

func (p *Plugin) closeSession(name string) {
	if s := p.sessions[name]; s != nil {
		s.Close()
		delete(p.sessions, name)
	}
}

// Session returns the plugin as a Translator on the session named name,
// beside the one Translate uses (""), in the same process: the plugin
// holds one view per session. Calls on every session are serialized.
func (p *Plugin) Session(name string) Translator {
	if name == "" {
		return p
	}
	return &namedSession{t: p, name: name, translate: p.translate}
}

// CloseSession ends the session named name: the plugin forgets its view.
// A later call on it opens it again and sends it the whole view.
func (p *Plugin) CloseSession(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closeSession(name)
}

// Check pings a running plugin's health service, within
// Options.HealthTimeout, and kills a plugin that does not answer in time,
// has exited or is not serving. It returns nil when no process runs (the
// next call starts one). It waits for a call in flight to end.
func (p *Plugin) Check(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.checkLocked(ctx)
}

func (p *Plugin) setProc(proc *process) {
	p.proc = proc
	p.running.Store(proc)
}

// probe checks the plugin's health. A plugin busy with a call answers
// its health service all the same (gRPC serves it beside the call); one
// that does not (stopped, frozen) is killed, which ends the call with an
// error, and the call cleans up. A healthy plugin whose call makes no
// progress is left to Options.CallTimeout.
func (p *Plugin) probe(ctx context.Context) error {
	if p.mu.TryLock() {
		defer p.mu.Unlock()
		return p.checkLocked(ctx)
	}
	proc := p.running.Load()
	if proc == nil {
		return nil
	}
	pingCtx, cancel := context.WithTimeout(ctx, p.opts.HealthTimeout)
	defer cancel()
	err := proc.ping(pingCtx)
	if err == nil || ctx.Err() != nil {
		return nil
	}
	p.logger.Error("plugin failed its health check during a call; killing it", "error", err)
	proc.unhealthy.Store(true)
	proc.signalKill()
	return fmt.Errorf("plugin %q: health check during a call: %w", p.entry.Name, err)
}

func (p *Plugin) checkLocked(ctx context.Context) error {
	if p.proc == nil || p.closed {
		return nil
	}
	if p.proc.exited() {
		p.crashed("plugin process exited")
		return fmt.Errorf("plugin %q exited", p.entry.Name)
	}
	pingCtx, cancel := context.WithTimeout(ctx, p.opts.HealthTimeout)
	defer cancel()
	err := p.proc.ping(pingCtx)
	if err != nil && ctx.Err() != nil {
		return nil // the host is stopping, not the plugin
	}
	if err != nil {
		p.logger.Error("plugin failed its health check; killing it", "error", err)
		p.crashed("health check failed")
		return fmt.Errorf("plugin %q: health check: %w", p.entry.Name, err)
	}
	return nil
}

// Close kills the plugin's process. Later calls fail.
func (p *Plugin) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	p.resetSession()
	if p.proc != nil {
		p.proc.kill()
		p.setProc(nil)
	}
}
