package preview

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/meshrelay/meshrelay/api/meta"
	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/engine"
	"github.com/meshrelay/meshrelay/core/pluginhost"
	"github.com/pmezard/go-difflib/difflib"
	"sigs.k8s.io/yaml"
)

// ErrChange is wrapped by the errors of a change that cannot be
// previewed: not policies, invalid, too large, or deleting a policy the
// fleet does not have.
var ErrChange = errors.New("invalid change")

// MaxChange bounds a change: at most this many policies added, changed or
// deleted.
const MaxChange = 1000

// Fleet is what a preview translates.
type Fleet struct {
	// Inputs are every cluster's input, by cluster.
	Inputs map[string]*snapshot.Snapshot
	// Labels are the clusters' registry labels, by cluster.
	Labels map[string]map[string]string
	// Policies are the management source's policies as they are; nil is
	// none.
	Policies *snapshot.Snapshot
}

// Change is a proposed change of the management source's policies.
type Change struct {
	// Upserts are policies added or changed.
	Upserts []snapshot.Resource
	// Deletes name policies removed; each must exist.
	Deletes []snapshot.ID
}

// Report is what a change would do.
type Report struct {
	// Outputs are the (cluster, backend) outputs that would change,
	// sorted.
	Outputs []OutputDiff `json:"outputs,omitempty"`
	// DiagnosticsAdded and DiagnosticsCleared are the diagnostics the
	// change would add and clear, sorted.
	DiagnosticsAdded   []Diagnostic `json:"diagnosticsAdded,omitempty"`
	DiagnosticsCleared []Diagnostic `json:"diagnosticsCleared,omitempty"`
}

// OutputDiff is what would change in one cluster's output of one backend.
type OutputDiff struct {
	Cluster string         `json:"cluster"`
	Backend string         `json:"backend"`
	Created []ResourceDiff `json:"created,omitempty"`
	Changed []ResourceDiff `json:"changed,omitempty"`
	Deleted []ResourceDiff `json:"deleted,omitempty"`
}

// ResourceDiff is one resource that would be created, changed or deleted.
type ResourceDiff struct {
	// Resource is "Kind namespace/name" (or "Kind name"), with the group
	// when it has one: "VirtualService.networking.istio.io default/reviews".
	Resource string `json:"resource"`
	// Diff is, for a change, the unified diff of its YAML; for a creation
	// or deletion, the whole YAML.
	Diff string `json:"diff"`
}

// Diagnostic is a diagnostic a change would add or clear.
type Diagnostic struct {
	Severity string `json:"severity"`
	Policy   string `json:"policy"`
	Cluster  string `json:"cluster,omitempty"`
	Plugin   string `json:"plugin,omitempty"`
	Path     string `json:"path,omitempty"`
	Summary  string `json:"summary"`
}

// Empty reports whether the change would change nothing.
func (r *Report) Empty() bool {
	return len(r.Outputs)+len(r.DiagnosticsAdded)+len(r.DiagnosticsCleared) == 0
}

// Run previews change over fleet with translators, which it calls on their
// own (use pluginhost scratch sessions for translators an engine drives).
func Run(ctx context.Context, translators []pluginhost.Translator, fleet Fleet, change Change) (*Report, error) {
	current := withoutTrust(fleet.Policies)
	proposed, err := apply(current, change)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrChange, err)
	}
	view := engine.NewMemView()
	for name, in := range fleet.Inputs {
		view.SetInput(name, in)
		view.SetLabels(name, fleet.Labels[name])
	}
	e := engine.New(translators, engine.Options{View: view})
	translate := func(policies *snapshot.Snapshot) (map[engine.OutputKey]*snapshot.Snapshot, []meta.Diagnostic, error) {
		e.SetPolicies(policies)
		r := e.Step(ctx)
		if len(r.Stats.Failed) > 0 {
			var why []string
			for _, ps := range e.Status() {
				if !ps.Healthy {
					why = append(why, fmt.Sprintf("%s: %s", ps.Name, ps.Error))
				}
			}
			return nil, nil, fmt.Errorf("translators failed: %s", strings.Join(why, "; "))
		}
		e.Advance(view.Deliver(r))
		outs := map[engine.OutputKey]*snapshot.Snapshot{}
		for name := range fleet.Inputs {
			for backend, o := range view.Outputs(name) {
				outs[engine.OutputKey{Cluster: name, Backend: backend}] = o
			}
		}
		return outs, e.Diagnostics(), nil
	}
	beforeOuts, beforeDiags, err := translate(current)
	if err != nil {
		return nil, fmt.Errorf("translate the policies as they are: %w", err)
	}
	afterOuts, afterDiags, err := translate(proposed)
	if err != nil {
		return nil, fmt.Errorf("translate the proposed policies: %w", err)
	}
	rep := &Report{}
	keys := slices.SortedFunc(maps.Keys(union(beforeOuts, afterOuts)), func(a, b engine.OutputKey) int {
		return cmp.Or(cmp.Compare(a.Cluster, b.Cluster), cmp.Compare(a.Backend, b.Backend))
	})
	for _, k := range keys {
		d, err := diffOutput(k, beforeOuts[k], afterOuts[k])
		if err != nil {
			return nil, err
		}
		if len(d.Created)+len(d.Changed)+len(d.Deleted) > 0 {
			rep.Outputs = append(rep.Outputs, d)
		}
	}
	rep.DiagnosticsAdded, rep.DiagnosticsCleared = diffDiagnostics(beforeDiags, afterDiags)
	return rep, nil
}

// apply returns the policies with the change made, refusing what is not a
// valid policy, too large a change, and a delete of a policy that is not
// there.
func apply(current *snapshot.Snapshot, c Change) (*snapshot.Snapshot, error) {
	if n := len(c.Upserts) + len(c.Deletes); n > MaxChange {
		return nil, fmt.Errorf("the change has %d policies, more than %d", n, MaxChange)
	}
	byID := map[snapshot.ID]snapshot.Resource{}
	for r := range current.All() {
		byID[r.ID] = r
	}
	for _, r := range c.Upserts {
		if r.ID.Group != policyv1alpha1.GroupName {
			return nil, fmt.Errorf("%s: not a policy (group %s)", r.ID, policyv1alpha1.GroupName)
		}
		if err := r.ValidateObject(); err != nil {
			return nil, err
		}
		byID[r.ID] = r
	}
	for _, id := range c.Deletes {
		if _, ok := byID[id]; !ok {
			return nil, fmt.Errorf("%s: cannot delete a policy the fleet does not have", id)
		}
		delete(byID, id)
	}
	s, err := snapshot.New(current.Version()+1, slices.Collect(maps.Values(byID)))
	if err != nil {
		return nil, fmt.Errorf("proposed policies: %w", err)
	}
	return withoutTrust(s), nil
}

// withoutTrust returns the policies without MeshTrusts, which the
// server's trust manager acts on and translators never see.
func withoutTrust(s *snapshot.Snapshot) *snapshot.Snapshot {
	if s == nil {
		return snapshot.Empty
	}
	var rs []snapshot.Resource
	for r := range s.All() {
		if r.ID.Kind != "MeshTrust" {
			rs = append(rs, r)
		}
	}
	if len(rs) == s.Len() {
		return s
	}
	out, _ := snapshot.New(s.Version(), rs) // a subset of a valid snapshot
	return out
}

func union[K comparable, V any](a, b map[K]V) map[K]bool {
	out := make(map[K]bool, len(a)+len(b))
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

// diffOutput compares one output before and after; either may be nil.
func diffOutput(k engine.OutputKey, before, after *snapshot.Snapshot) (OutputDiff, error) {
	d := OutputDiff{Cluster: k.Cluster, Backend: k.Backend}
	if before == nil {
		before = snapshot.Empty
	}
	if after == nil {
		after = snapshot.Empty
	}
	delta := snapshot.Diff(before, after)
	for _, r := range delta.Upserts {
		y, err := yaml.JSONToYAML(r.Body)
		if err != nil {
			return d, fmt.Errorf("%s in %s: %w", r.ID, k, err)
		}
		old, had := before.Get(r.ID)
		if !had {
			d.Created = append(d.Created, ResourceDiff{Resource: name(r.ID), Diff: string(y)})
			continue
		}
		oy, err := yaml.JSONToYAML(old.Body)
		if err != nil {
			return d, fmt.Errorf("%s in %s: %w", r.ID, k, err)
		}
		u, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
			A: difflib.SplitLines(string(oy)), B: difflib.SplitLines(string(y)),
			FromFile: "current", ToFile: "proposed", Context: 3,
		})
		if err != nil {
			return d, err
		}
		d.Changed = append(d.Changed, ResourceDiff{Resource: name(r.ID), Diff: u})
	}
	for _, id := range delta.Deletes {
		old, _ := before.Get(id)
		y, err := yaml.JSONToYAML(old.Body)
		if err != nil {
			return d, fmt.Errorf("%s in %s: %w", id, k, err)
		}
		d.Deleted = append(d.Deleted, ResourceDiff{Resource: name(id), Diff: string(y)})
	}
	return d, nil
}

// name returns an ID as "Kind.group namespace/name".
func name(id snapshot.ID) string {
	kind := id.Kind
	if id.Group != "" {
		kind += "." + id.Group
	}
	if id.Namespace == "" {
		return kind + " " + id.Name
	}
	return kind + " " + id.Namespace + "/" + id.Name
}

// diffDiagnostics returns the diagnostics in after and not before, and
// those in before and not after.
func diffDiagnostics(before, after []meta.Diagnostic) (added, cleared []Diagnostic) {
	in := func(ds []meta.Diagnostic) map[Diagnostic]bool {
		m := map[Diagnostic]bool{}
		for _, d := range ds {
			m[diagnostic(d)] = true
		}
		return m
	}
	b, a := in(before), in(after)
	for d := range a {
		if !b[d] {
			added = append(added, d)
		}
	}
	for d := range b {
		if !a[d] {
			cleared = append(cleared, d)
		}
	}
	order := func(x, y Diagnostic) int {
		return cmp.Or(cmp.Compare(x.Policy, y.Policy), cmp.Compare(x.Cluster, y.Cluster), cmp.Compare(x.Plugin, y.Plugin),
			cmp.Compare(x.Severity, y.Severity), cmp.Compare(x.Path, y.Path), cmp.Compare(x.Summary, y.Summary))
	}
	slices.SortFunc(added, order)
	slices.SortFunc(cleared, order)
	return added, cleared
}

func diagnostic(d meta.Diagnostic) Diagnostic {
	p := d.Policy.Kind + " " + d.Policy.Namespace + "/" + d.Policy.Name
	if d.Policy.Cluster != "" {
		p += "@" + d.Policy.Cluster
	}
	return Diagnostic{Severity: d.Severity.String(), Policy: p, Cluster: d.Cluster, Plugin: d.Plugin, Path: d.Path, Summary: d.Summary}
}
