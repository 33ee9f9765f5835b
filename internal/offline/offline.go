package offline

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/meshrelay/meshrelay/api/meta"
	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/agent/discovery"
	"github.com/meshrelay/meshrelay/core/engine"
	"github.com/meshrelay/meshrelay/core/pluginhost"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"
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
	fleet, err := ReadFleet(opts.ClustersDir, opts.PoliciesDir, logger)
	if err != nil {
		return nil, err
	}
	m := NewModel(opts.Translators, logger)
	for name, in := range fleet.Inputs {
		m.SetInput(name, in)
		m.SetLabels(name, fleet.Labels[name])
	}
	if err := m.SetPolicies(fleet.Policies.Resources()); err != nil {
		return nil, err
	}
	return m.Translate(ctx), nil
}

// Fleet is a fleet read from directories.
type Fleet struct {
	// Inputs are the clusters' inputs, by cluster.
	Inputs map[string]*snapshot.Snapshot
	// Policies are the policies of the policies directory (the policy API
	// group; the rest is left out), never nil.
	Policies *snapshot.Snapshot
	// Labels are the clusters' registry labels, by cluster, from the
	// clusters directory's LabelsFile; nil without one.
	Labels map[string]map[string]string
}

// LabelsFile is the file of a clusters directory that gives the clusters'
// registry labels, which clusterSelectors match, as a server's registry
// would: a YAML map of cluster name to its labels, such as
//
//	east: {region: us-east, tier: gold}
//	west: {region: us-west}
//
// A cluster it does not list has no labels.
const LabelsFile = "labels.yaml"

// ReadFleet reads every subdirectory of clustersDir as a cluster's input,
// discovered as an agent's dir source discovers it, the clusters' labels
// from its LabelsFile (none when absent), and the policies of policiesDir
// (none when empty).
func ReadFleet(clustersDir, policiesDir string, logger *slog.Logger) (*Fleet, error) {
	entries, err := os.ReadDir(clustersDir)
	if err != nil {
		return nil, fmt.Errorf("read clusters: %w", err)
	}
	f := &Fleet{Inputs: map[string]*snapshot.Snapshot{}, Policies: snapshot.Empty}
	for _, ent := range entries {
		if !ent.IsDir() {
			continue
		}
		s, err := discovery.NewDir(filepath.Join(clustersDir, ent.Name()), discovery.DirOptions{Logger: logger}).Snapshot()
		if err != nil {
			return nil, fmt.Errorf("read cluster %s: %w", ent.Name(), err)
		}
		f.Inputs[ent.Name()] = s
	}
	if len(f.Inputs) == 0 {
		return nil, fmt.Errorf("no cluster directories in %s", clustersDir)
	}
	if f.Labels, err = readLabels(filepath.Join(clustersDir, LabelsFile), f.Inputs); err != nil {
		return nil, err
	}
	if policiesDir != "" {
		s, err := discovery.NewDir(policiesDir, discovery.DirOptions{Logger: logger}).Snapshot()
		if err != nil {
			return nil, fmt.Errorf("read policies: %w", err)
		}
		if f.Policies, err = policiesOf(1, s.Resources()); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// readLabels reads a LabelsFile, if there is one; every cluster it lists
// must be one of clusters, and every label valid.
func readLabels(path string, clusters map[string]*snapshot.Snapshot) (map[string]map[string]string, error) {
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read cluster labels: %w", err)
	}
	var labels map[string]map[string]string
	if err := yaml.UnmarshalStrict(raw, &labels); err != nil {
		return nil, fmt.Errorf("read cluster labels %s: %w", path, err)
	}
	for _, name := range slices.Sorted(maps.Keys(labels)) {
		if _, ok := clusters[name]; !ok {
			return nil, fmt.Errorf("cluster labels %s: no cluster directory %q", path, name)
		}
		if errs := metav1validation.ValidateLabels(labels[name], field.NewPath(name)); len(errs) > 0 {
			return nil, fmt.Errorf("cluster labels %s: %w", path, errs.ToAggregate())
		}
	}
	return labels, nil
}

// policiesOf returns the resources of the policy API group among
// resources, as a snapshot at version.
func policiesOf(version uint64, resources []snapshot.Resource) (*snapshot.Snapshot, error) {
	var rs []snapshot.Resource
	for _, r := range resources {
		if r.ID.Group == policyv1alpha1.GroupName {
			rs = append(rs, r)
		}
	}
	p, err := snapshot.New(version, rs)
	if err != nil {
		return nil, fmt.Errorf("policies: %w", err)
	}
	return p, nil
}

// Model keeps a fleet's inputs and policies and translates them with an
// engine of its own, as a server would, but with no server, store or
// agent: what every cluster's outputs must be. Translate after each change
// translates what changed since the last one. A Model is not safe for
// concurrent use.
type Model struct {
	e        *engine.Engine
	view     *engine.MemView
	clusters map[string]bool
	version  uint64
}

// NewModel returns an empty model translating with translators.
func NewModel(translators []pluginhost.Translator, logger *slog.Logger) *Model {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	view := engine.NewMemView()
	return &Model{e: engine.New(translators, engine.Options{View: view, Logger: logger}), view: view, clusters: map[string]bool{}}
}

// SetInput makes s the inputs of cluster.
func (m *Model) SetInput(cluster string, s *snapshot.Snapshot) {
	m.version++
	m.view.SetInput(cluster, s.WithVersion(m.version))
	m.clusters[cluster] = true
}

// SetLabels makes labels the registry labels of cluster, which
// clusterSelectors match; the cluster must have an input.
func (m *Model) SetLabels(cluster string, labels map[string]string) {
	m.view.SetLabels(cluster, labels)
}

// RemoveCluster forgets a cluster, as a deregistration does.
func (m *Model) RemoveCluster(cluster string) {
	m.view.RemoveCluster(cluster)
	delete(m.clusters, cluster)
}

// SetPolicies makes the policies among resources (the policy API group;
// the rest is ignored) the fleet's policies.
func (m *Model) SetPolicies(resources []snapshot.Resource) error {
	m.version++
	p, err := policiesOf(m.version, resources)
	if err != nil {
		return err
	}
	m.e.SetPolicies(p)
	return nil
}

// Translate runs the translators over the current inputs and policies and
// returns every cluster's outputs.
func (m *Model) Translate(ctx context.Context) *Result {
	m.e.Advance(m.view.Deliver(m.e.Step(ctx)))
	res := &Result{Outputs: map[engine.OutputKey]*snapshot.Snapshot{}, Diagnostics: m.e.Diagnostics()}
	for name := range m.clusters {
		for backend, o := range m.view.Outputs(name) {
			res.Outputs[engine.OutputKey{Cluster: name, Backend: backend}] = o
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
