package preview

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/meshrelay/meshrelay/api/meta"
	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/pluginhost"
)

// perPolicy is a translator for preview logic tests: every cluster gets a
// ConfigMap per policy, holding the policy's body, and a policy named
// "bad" gets an error diagnostic. It fails while fail is set.
type perPolicy struct{ fail bool }

func (perPolicy) Name() string          { return "per-policy" }
func (perPolicy) Backends() []string    { return []string{"cm"} }
func (perPolicy) Meshes() []string      { return nil }
func (perPolicy) InputKinds() []string  { return nil }
func (perPolicy) OutputKinds() []string { return []string{"/ConfigMap"} }

func (p perPolicy) Translate(_ context.Context, v pluginhost.View) (pluginhost.Result, error) {
	if p.fail {
		return pluginhost.Result{}, errors.New("cannot translate today")
	}
	res := pluginhost.Result{Sent: true}
	for name := range v.Clusters {
		out := pluginhost.ClusterOutput{Cluster: name, Backend: "cm", Resources: []snapshot.Resource{}}
		for r := range v.Policies.All() {
			cm, err := snapshot.FromObject(map[string]any{
				"apiVersion": "v1", "kind": "ConfigMap",
				"metadata": map[string]any{"name": r.ID.Name, "namespace": r.ID.Namespace},
				"data":     map[string]any{"policy": string(r.Body)},
			})
			if err != nil {
				return res, err
			}
			out.Resources = append(out.Resources, cm)
			if r.ID.Name == "bad" {
				res.Diagnostics = append(res.Diagnostics, meta.Diagnostic{Severity: meta.SeverityError, Summary: "bad policy", Cluster: name,
					Policy: meta.PolicyRef{Kind: r.ID.Kind, Namespace: r.ID.Namespace, Name: r.ID.Name}})
			}
		}
		res.Outputs = append(res.Outputs, out)
	}
	return res, nil
}

func policy(t *testing.T, name, weight string) snapshot.Resource {
	t.Helper()
	r, err := snapshot.FromJSON(fmt.Appendf(nil, `{"apiVersion":"policy.meshrelay.io/v1alpha1","kind":"TrafficPolicy","metadata":{"name":%q,"namespace":"ns"},"spec":{"weight":%q}}`, name, weight))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func fleet(t *testing.T, policies ...snapshot.Resource) Fleet {
	t.Helper()
	p, err := snapshot.New(1, policies)
	if err != nil {
		t.Fatal(err)
	}
	return Fleet{Inputs: map[string]*snapshot.Snapshot{"east": snapshot.Empty, "west": snapshot.Empty}, Policies: p}
}

// summary is a report in a form go-cmp compares at a glance.
func summary(rep *Report) []string {
	var out []string
	for _, o := range rep.Outputs {
		for _, r := range o.Created {
			out = append(out, o.Cluster+" + "+r.Resource)
		}
		for _, r := range o.Changed {
			out = append(out, o.Cluster+" ~ "+r.Resource)
		}
		for _, r := range o.Deleted {
			out = append(out, o.Cluster+" - "+r.Resource)
		}
	}
	for _, d := range rep.DiagnosticsAdded {
		out = append(out, "diagnostic + "+d.Policy+" "+d.Cluster)
	}
	for _, d := range rep.DiagnosticsCleared {
		out = append(out, "diagnostic - "+d.Policy+" "+d.Cluster)
	}
	return out
}

func TestRun(t *testing.T) {
	ctx := context.Background()
	a, b, bad := policy(t, "a", "1"), policy(t, "b", "1"), policy(t, "bad", "1")
	tests := map[string]struct {
		fleet  Fleet
		change Change
		want   []string
	}{
		"a policy added": {fleet: fleet(t, a), change: Change{Upserts: []snapshot.Resource{b}},
			want: []string{"east + ConfigMap ns/b", "west + ConfigMap ns/b"}},
		"a policy changed": {fleet: fleet(t, a, b), change: Change{Upserts: []snapshot.Resource{policy(t, "a", "2")}},
			want: []string{"east ~ ConfigMap ns/a", "west ~ ConfigMap ns/a"}},
		"a policy deleted, its diagnostics cleared": {fleet: fleet(t, a, bad), change: Change{Deletes: []snapshot.ID{bad.ID}},
			want: []string{"east - ConfigMap ns/bad", "west - ConfigMap ns/bad", "diagnostic - TrafficPolicy ns/bad east", "diagnostic - TrafficPolicy ns/bad west"}},
		"a bad policy added": {fleet: fleet(t), change: Change{Upserts: []snapshot.Resource{bad}},
			want: []string{"east + ConfigMap ns/bad", "west + ConfigMap ns/bad", "diagnostic + TrafficPolicy ns/bad east", "diagnostic + TrafficPolicy ns/bad west"}},
		"the policy as it is": {fleet: fleet(t, a), change: Change{Upserts: []snapshot.Resource{a}}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			rep, err := Run(ctx, []pluginhost.Translator{perPolicy{}}, tc.fleet, tc.change)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, summary(rep)); diff != "" {
				t.Errorf("report (-want +got):\n%s", diff)
			}
			if rep.Empty() != (len(tc.want) == 0) {
				t.Errorf("Empty() = %v with %d changes", rep.Empty(), len(tc.want))
			}
		})
	}
	rep, err := Run(ctx, []pluginhost.Translator{perPolicy{}}, fleet(t, a), Change{Upserts: []snapshot.Resource{policy(t, "a", "2")}})
	if err != nil {
		t.Fatal(err)
	}
	if d := rep.Outputs[0].Changed[0].Diff; !strings.Contains(d, `-  policy: '{"apiVersion"`) || !strings.Contains(d, "+++ proposed") {
		t.Errorf("the changed ConfigMap's diff is not a unified diff of its YAML:\n%s", d)
	}
}

// A change that cannot be previewed, and a translator that fails, are
// errors, never a report (an empty one would read as "nothing changes").
func TestRunRefuses(t *testing.T) {
	ctx := context.Background()
	a := policy(t, "a", "1")
	cm, err := snapshot.FromJSON([]byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","namespace":"ns"}}`))
	if err != nil {
		t.Fatal(err)
	}
	for name, change := range map[string]Change{
		"not a policy":          {Upserts: []snapshot.Resource{cm}},
		"a delete of no policy": {Deletes: []snapshot.ID{policy(t, "gone", "1").ID}},
		"too large a change":    {Deletes: make([]snapshot.ID, MaxChange+1)},
	} {
		t.Run(name, func(t *testing.T) {
			if rep, err := Run(ctx, []pluginhost.Translator{perPolicy{}}, fleet(t, a), change); !errors.Is(err, ErrChange) {
				t.Errorf("Run = %+v, %v; want an error wrapping ErrChange", rep, err)
			}
		})
	}
	rep, err := Run(ctx, []pluginhost.Translator{perPolicy{fail: true}}, fleet(t, a), Change{Upserts: []snapshot.Resource{policy(t, "b", "1")}})
	if err == nil || !strings.Contains(err.Error(), "cannot translate today") || errors.Is(err, ErrChange) {
		t.Errorf("Run with a failing translator = %+v, %v; want its error", rep, err)
	}
}

// tierOf emits, for every cluster, a ConfigMap carrying the cluster's
// "tier" label and the number of policies: what a translator selecting
// clusters by label reads.
type tierOf struct{ perPolicy }

func (tierOf) Translate(_ context.Context, v pluginhost.View) (pluginhost.Result, error) {
	res := pluginhost.Result{Sent: true}
	for name, c := range v.Clusters {
		cm, err := snapshot.FromObject(map[string]any{
			"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": "tier", "namespace": "ns"},
			"data":     map[string]any{"tier": c.Labels["tier"], "policies": fmt.Sprint(v.Policies.Len())},
		})
		if err != nil {
			return res, err
		}
		res.Outputs = append(res.Outputs, pluginhost.ClusterOutput{Cluster: name, Backend: "cm", Resources: []snapshot.Resource{cm}})
	}
	return res, nil
}

// The fleet's labels reach the translators in both translations, as the
// server's registry gives them to its own sessions.
func TestRunHandsOnLabels(t *testing.T) {
	f := fleet(t)
	f.Labels = map[string]map[string]string{"east": {"tier": "gold"}}
	rep, err := Run(context.Background(), []pluginhost.Translator{tierOf{}}, f, Change{Upserts: []snapshot.Resource{policy(t, "a", "1")}})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range rep.Outputs {
		want := "tier: gold"
		if o.Cluster != "east" {
			want = "tier: \"\""
		}
		if len(o.Changed) != 1 || !strings.Contains(o.Changed[0].Diff, " "+want) {
			t.Errorf("%s's diff does not keep its label (%s):\n%+v", o.Cluster, want, o.Changed)
		}
	}
}
