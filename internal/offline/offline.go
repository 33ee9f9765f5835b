package offline

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"

	"github.com/meshrelay/meshrelay/api/meta"
	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/agent/discovery"
	"github.com/meshrelay/meshrelay/core/engine"
	"github.com/meshrelay/meshrelay/core/pluginhost"
)

// Options say what to translate.
type Options struct {
	// ClustersDir holds one subdirectory of YAML per cluster, named after it.
	ClustersDir string
	// PoliciesDir holds policies as YAML; empty for none besides those in clusters.
	PoliciesDir string
	Translators []pluginhost.Translator
	Logger      *slog.Logger
}

// Result is what translation produced.
type Result struct {
	// Outputs are keyed by cluster and backend.
	Outputs     map[engine.OutputKey]*snapshot.Snapshot
	Diagnostics []meta.Diagnostic
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
	m := NewModel(opts.Translators, logger)
	for _, ent := range entries {
		if !ent.IsDir() {
			continue
		}
		s, err := discovery.NewDir(filepath.Join(opts.ClustersDir, ent.Name()), discovery.DirOptions{Logger: logger}).Snapshot()
		if err != nil {
			return nil, fmt.Errorf("read cluster %s: %w", ent.Name(), err)
		}
		m.SetInput(ent.Name(), s)
	}
	if len(m.clusters) == 0 {
		return nil, fmt.Errorf("no cluster directories in %s", opts.ClustersDir)
	}
	if opts.PoliciesDir != "" {
		s, err := discovery.NewDir(opts.PoliciesDir, discovery.DirOptions{Logger: logger}).Snapshot()
		if err != nil {
			return nil, fmt.Errorf("read policies: %w", err)
		}
		if err := m.SetPolicies(s.Resources()); err != nil {
			return nil, err
		}
	}
	return m.Translate(ctx), nil
}

// Model keeps a fleet's inputs and policies and translates them with an
// engine of its own, as a server would, but with no server, store or
// agent: what every cluster's outputs must be. Translate after each change
// translates what changed since the last one. A Model is not safe for
// concurrent use.
type Model struct {
	e        *engine.Engine
	clusters map[string]bool
	version  uint64
}

// NewModel returns an empty model translating with translators.
func NewModel(translators []pluginhost.Translator, logger *slog.Logger) *Model {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Model{e: engine.New(translators, engine.Options{Logger: logger}), clusters: map[string]bool{}}
}

// SetInput makes s the inputs of cluster.
func (m *Model) SetInput(cluster string, s *snapshot.Snapshot) {
	m.version++
	m.e.SetInput(cluster, s.WithVersion(m.version))
	m.clusters[cluster] = true
}

// RemoveCluster forgets a cluster, as a deregistration does.
func (m *Model) RemoveCluster(cluster string) {
	m.e.RemoveCluster(cluster)
	delete(m.clusters, cluster)
}

// SetPolicies makes the policies among resources (the policy API group;
// the rest is ignored) the fleet's policies.
func (m *Model) SetPolicies(resources []snapshot.Resource) error {
	var rs []snapshot.Resource
	for _, r := range resources {
		if r.ID.Group == policyv1alpha1.GroupName {
			rs = append(rs, r)
		}
	}
	m.version++
	p, err := snapshot.New(m.version, rs)
	if err != nil {
		return fmt.Errorf("policies: %w", err)
	}
	m.e.SetPolicies(p)
	return nil
}

// Translate runs the translators over the current inputs and policies and
// returns every cluster's outputs.
func (m *Model) Translate(ctx context.Context) *Result {
	m.e.Cycle(ctx)
	res := &Result{Outputs: map[engine.OutputKey]*snapshot.Snapshot{}, Diagnostics: m.e.Diagnostics()}
	for name := range m.clusters {
		for backend, o := range m.e.Outputs(name) {
			res.Outputs[engine.OutputKey{Cluster: name, Backend: backend}] = o.Snapshot
		}
	}
	for _, ps := range m.e.Status() {
		if !ps.Healthy {
			res.Failed = append(res.Failed, ps)
		}
	}
	return res
}

// Keys returns the result's output keys in order.
func (r *Result) Keys() []engine.OutputKey {
	keys := make([]engine.OutputKey, 0, len(r.Outputs))
	for k := range r.Outputs {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b engine.OutputKey) int {
		return cmp.Or(cmp.Compare(a.Cluster, b.Cluster), cmp.Compare(a.Backend, b.Backend))
	})
	return keys
}
