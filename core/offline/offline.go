package offline

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"

	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/core/agent/discovery"
	"github.com/meshrelay/meshrelay/core/engine"
	"github.com/meshrelay/meshrelay/core/pluginhost"
	"github.com/meshrelay/meshrelay/core/snapshot"
)

// Options say what to translate.
type Options struct {
	// ClustersDir holds one subdirectory of YAML per cluster, named after it.
	ClustersDir string
	// PoliciesDir holds policies as YAML; empty for none besides those in clusters.
	PoliciesDir string
	Translators []engine.Translator
	Logger      *slog.Logger
}

// Result is what translation produced.
type Result struct {
	// Outputs are keyed by cluster and backend.
	Outputs     map[engine.OutputKey]*snapshot.Snapshot
	Diagnostics []pluginhost.Diagnostic
	// Failed lists translators that failed, with their errors.
	Failed []engine.PluginStatus
}

// Translate reads the clusters and policies and runs every translator once.
func Translate(ctx context.Context, opts Options) (*Result, error) {
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	entries, err := os.ReadDir(opts.ClustersDir)
	if err != nil {
		return nil, fmt.Errorf("read clusters: %w", err)
	}
	e := engine.New(opts.Translators, engine.Options{Logger: logger})
	var names []string
	for _, ent := range entries {
		if !ent.IsDir() {
			continue
		}
		s, err := discovery.NewDir(filepath.Join(opts.ClustersDir, ent.Name()), discovery.DirOptions{Logger: logger}).Snapshot()
		if err != nil {
			return nil, fmt.Errorf("read cluster %s: %w", ent.Name(), err)
		}
		e.SetInput(ent.Name(), s.WithVersion(1))
		names = append(names, ent.Name())
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("no cluster directories in %s", opts.ClustersDir)
	}
	if opts.PoliciesDir != "" {
		s, err := discovery.NewDir(opts.PoliciesDir, discovery.DirOptions{Logger: logger}).Snapshot()
		if err != nil {
			return nil, fmt.Errorf("read policies: %w", err)
		}
		var rs []snapshot.Resource
		for r := range s.All() {
			if r.ID.Group == policyv1alpha1.GroupName {
				rs = append(rs, r)
			}
		}
		p, err := snapshot.New(1, rs)
		if err != nil {
			return nil, err
		}
		e.SetPolicies(p)
	}
	e.Cycle(ctx)
	res := &Result{Outputs: map[engine.OutputKey]*snapshot.Snapshot{}, Diagnostics: e.Diagnostics()}
	for _, name := range names {
		for backend, o := range e.Outputs(name) {
			res.Outputs[engine.OutputKey{Cluster: name, Backend: backend}] = o.Snapshot
		}
	}
	for _, ps := range e.Status() {
		if !ps.Healthy {
			res.Failed = append(res.Failed, ps)
		}
	}
	return res, nil
}

// Keys returns the result's output keys in order.
func (r *Result) Keys() []engine.OutputKey {
	keys := make([]engine.OutputKey, 0, len(r.Outputs))
	for k := range r.Outputs {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b engine.OutputKey) int {
		if a.Cluster != b.Cluster {
			return compare(a.Cluster, b.Cluster)
		}
		return compare(a.Backend, b.Backend)
	})
	return keys
}

func compare(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
