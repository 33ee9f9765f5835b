package pluginhost

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// Host runs the plugins installed in a plugin directory.
type Host struct {
	dir     string
	opts    Options
	plugins []*Plugin
	once    sync.Once
}

// New returns a host for the plugins in dir's lock file. Nothing starts
// until a plugin is called or Start is. A nil logger discards the plugins'
// logs.
func New(dir string, logger *slog.Logger, opts Options) (*Host, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("plugin host options: %w", err)
	}
	entries, err := List(dir)
	if err != nil {
		return nil, err
	}
	h := &Host{dir: dir, opts: opts}
	for _, e := range entries {
		h.plugins = append(h.plugins, newPlugin(dir, e, opts, logger))
	}
	return h, nil
}

// Plugins returns every installed plugin, sorted by name.
func (h *Host) Plugins() []*Plugin { return slices.Clone(h.plugins) }

// Plugin returns the named plugin.
func (h *Host) Plugin(name string) (*Plugin, bool) {
	for _, p := range h.plugins {
		if p.Name() == name {
			return p, true
		}
	}
	return nil, false
}

// Start starts every plugin and returns the errors of those that did not
// start; the others run.
func (h *Host) Start(ctx context.Context) error {
	var errs []error
	for _, p := range h.plugins {
		p.mu.Lock()
		if p.proc == nil && !p.closed {
			if err := p.start(ctx); err != nil {
				errs = append(errs, err)
			}
		}
		p.mu.Unlock()
	}
	return errors.Join(errs...)
}

// Check health-checks every running plugin.
func (h *Host) Check(ctx context.Context) error {
	var errs []error
	for _, p := range h.plugins {
		errs = append(errs, p.Check(ctx))
	}
	return errors.Join(errs...)
}

// Watch checks every running plugin's health each Options.HealthInterval
// until ctx ends, and kills one that does not answer within
// Options.HealthTimeout: a plugin that stops or freezes is replaced
// within seconds, whether or not a translation is calling it. A plugin
// that answers its health check but not a call is left to
// Options.CallTimeout.
func (h *Host) Watch(ctx context.Context) {
	t := time.NewTicker(h.opts.HealthInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, p := range h.plugins {
			_ = p.probe(ctx) // the plugin logs what it found
		}
	}
}

// Close kills every plugin process.
func (h *Host) Close() error {
	h.once.Do(func() {
		for _, p := range h.plugins {
			p.Close()
		}
	})
	return nil
}
