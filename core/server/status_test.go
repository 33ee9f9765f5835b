package server

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshrelay/meshrelay/api/meta"
	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/api/snapshot"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"google.golang.org/protobuf/types/known/timestamppb"
	"sigs.k8s.io/yaml"
)

const (
	validAccess = `apiVersion: policy.meshrelay.io/v1alpha1
kind: AccessPolicy
metadata: {name: ratings, namespace: bookinfo, generation: 3}
spec:
  destinationSelectors: [{names: [ratings]}]
  from: [{serviceAccounts: [{namespace: bookinfo, name: reviews}]}]
  ports: [9080]
`
	invalidAccess = `apiVersion: policy.meshrelay.io/v1alpha1
kind: AccessPolicy
metadata: {name: ratings, namespace: bookinfo}
spec:
  destinationSelectors: [{names: [ratings]}]
  action: Maybe
`
)

// policySourceOf is the AccessPolicy bookinfo/ratings of body as cluster's
// source holds it (body as it is: its generation is kept).
func policySourceOf(t *testing.T, cluster, body string) policySource {
	t.Helper()
	j, err := yaml.YAMLToJSON([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	id := snapshot.ID{Group: policyv1alpha1.GroupName, Version: "v1alpha1", Kind: "AccessPolicy", Namespace: "bookinfo", Name: "ratings"}
	r, err := snapshot.NewResource(id, j)
	if err != nil {
		t.Fatal(err)
	}
	return policySource{cluster: cluster, res: r}
}

// outputSet is an output set of one ConfigMap per name, each naming the
// policy ratings as its parent.
func outputSet(t *testing.T, names ...string) *snapshot.Snapshot {
	t.Helper()
	var rs []snapshot.Resource
	for _, n := range names {
		r, err := snapshot.NewResource(snapshot.ID{Version: "v1", Kind: "ConfigMap", Namespace: "bookinfo", Name: n},
			[]byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"`+n+`","namespace":"bookinfo","annotations":{"`+meta.PoliciesAnnotation+`":"AccessPolicy/bookinfo/ratings"}}}`))
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	s, err := snapshot.New(1, rs)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// testOutput is one output set of ConfigMaps (names) the agent of cluster
// acked (current) or not, with apply errors by name.
type testOutput struct {
	cluster string
	names   []string
	current bool
	failed  map[string]string
}

// Folding one policy: validation, diagnostics, reach and state, each step
// on its own inputs.
func TestFoldPolicyStatus(t *testing.T) {
	ref := meta.PolicyRef{Kind: "AccessPolicy", Namespace: "bookinfo", Name: "ratings"}
	warn := meta.Diagnostic{Severity: meta.SeverityWarning, Summary: "no sidecar", Path: "spec.ports[0]", Policy: ref, Plugin: "istio", Cluster: "east"}
	fail := meta.Diagnostic{Severity: meta.SeverityError, Summary: "cannot express", Policy: ref}
	tests := map[string]struct {
		body    string
		cluster string
		outputs []testOutput
		diags   []meta.Diagnostic
		// want
		state              policyv1alpha1.PolicyState
		targets, applied   []string
		errors, warnings   []string
		statusDiagnostics  int
		observedGeneration int64
	}{
		"applied everywhere": {
			body:    validAccess,
			outputs: []testOutput{{cluster: "east", names: []string{"a"}, current: true}, {cluster: "west", names: []string{"a"}, current: true}},
			state:   policyv1alpha1.StateAccepted, targets: []string{"east", "west"}, applied: []string{"east", "west"}, observedGeneration: 3,
		},
		"not acked in one cluster": {
			body:    validAccess,
			outputs: []testOutput{{cluster: "west", names: []string{"a"}}, {cluster: "east", names: []string{"a"}, current: true}},
			state:   policyv1alpha1.StatePending, targets: []string{"east", "west"}, applied: []string{"east"}, observedGeneration: 3,
		},
		"apply errors": {
			body:    validAccess,
			outputs: []testOutput{{cluster: "east", names: []string{"a", "b"}, current: true, failed: map[string]string{"b": "denied"}}},
			state:   policyv1alpha1.StateFailed, targets: []string{"east"},
			errors: []string{"east: apply ConfigMap bookinfo/b: denied"}, observedGeneration: 3,
		},
		"diagnostics once each, warnings apart": {
			body:  validAccess,
			diags: []meta.Diagnostic{warn, fail, warn, {Severity: meta.SeverityError, Summary: "other cluster's policy", Policy: meta.PolicyRef{Kind: "AccessPolicy", Namespace: "bookinfo", Name: "ratings", Cluster: "east"}}},
			state: policyv1alpha1.StateFailed, errors: []string{"cannot express (engine)"}, warnings: []string{"spec.ports[0]: no sidecar (istio)"},
			statusDiagnostics: 3, observedGeneration: 3,
		},
		"invalid": {
			body: invalidAccess, diags: []meta.Diagnostic{warn},
			state: policyv1alpha1.StateInvalid, warnings: []string{"spec.ports[0]: no sidecar (istio)"}, statusDiagnostics: 2,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			in := &statusInputs{reaches: reaches{}, diags: diagnosticsByPolicy(tc.diags)}
			for _, o := range tc.outputs {
				errs := map[snapshot.ID]string{}
				for name, msg := range o.failed {
					errs[snapshot.ID{Version: "v1", Kind: "ConfigMap", Namespace: "bookinfo", Name: name}] = msg
				}
				in.reaches.addOutput(o.cluster, indexOutput(outputSet(t, o.names...), nil), o.current, errs)
			}
			ps := in.fold(policySourceOf(t, tc.cluster, tc.body))
			if ps.ref != ref {
				t.Errorf("ref = %v, want %v", ps.ref, ref)
			}
			if ps.state != tc.state || ps.status.State != tc.state {
				t.Errorf("state = %q (status %q), want %q", ps.state, ps.status.State, tc.state)
			}
			if !slices.Equal(ps.targets, tc.targets) || !slices.Equal(ps.applied, tc.applied) {
				t.Errorf("targets, applied = %v, %v, want %v, %v", ps.targets, ps.applied, tc.targets, tc.applied)
			}
			if tc.state == policyv1alpha1.StateInvalid {
				if len(ps.errors) == 0 || !strings.Contains(ps.errors[0], "spec.action") {
					t.Errorf("errors = %q, want the validation error on spec.action first", ps.errors)
				}
			} else if !slices.Equal(ps.errors, tc.errors) {
				t.Errorf("errors = %q, want %q", ps.errors, tc.errors)
			}
			if !slices.Equal(ps.warnings, tc.warnings) {
				t.Errorf("warnings = %q, want %q", ps.warnings, tc.warnings)
			}
			if len(ps.status.Diagnostics) != tc.statusDiagnostics {
				t.Errorf("status diagnostics = %+v, want %d", ps.status.Diagnostics, tc.statusDiagnostics)
			}
			if ps.status.ObservedGeneration != tc.observedGeneration || len(ps.status.Clusters) != len(tc.targets) {
				t.Errorf("status = %+v, want generation %d and a row per target %v", ps.status, tc.observedGeneration, tc.targets)
			}
		})
	}
}

// A management MeshTrust's targets come from the trust manager; a
// workload cluster's MeshTrust has none.
func TestFoldMeshTrustReach(t *testing.T) {
	body := `{"apiVersion":"policy.meshrelay.io/v1alpha1","kind":"MeshTrust","metadata":{"name":"fleet","namespace":"meshrelay"},"spec":{"clusters":["east","west"]}}`
	r, err := snapshot.NewResource(snapshot.ID{Group: policyv1alpha1.GroupName, Version: "v1alpha1", Kind: policyv1alpha1.KindMeshTrust, Namespace: "meshrelay", Name: "fleet"}, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	in := &statusInputs{trustReach: func(ref meta.PolicyRef) ([]string, []string) {
		return []string{"east", "west"}, []string{"west"}
	}}
	ps := in.fold(policySource{res: r})
	if !slices.Equal(ps.targets, []string{"east", "west"}) || !slices.Equal(ps.applied, []string{"west"}) || ps.state != policyv1alpha1.StatePending {
		t.Errorf("management MeshTrust: targets %v, applied %v, state %q; want east,west, west, Pending", ps.targets, ps.applied, ps.state)
	}
	ps = in.fold(policySource{cluster: "east", res: r})
	if len(ps.targets) != 0 {
		t.Errorf("workload cluster's MeshTrust: targets %v, want none", ps.targets)
	}
}

func TestDecideState(t *testing.T) {
	two := []string{"east", "west"}
	for name, tc := range map[string]struct {
		invalid                bool
		errs, targets, applied []string
		want                   policyv1alpha1.PolicyState
	}{
		"invalid wins":     {invalid: true, errs: []string{"x"}, targets: two, want: policyv1alpha1.StateInvalid},
		"errors":           {errs: []string{"x"}, targets: two, applied: two, want: policyv1alpha1.StateFailed},
		"pending":          {targets: two, applied: two[:1], want: policyv1alpha1.StatePending},
		"applied":          {targets: two, applied: two, want: policyv1alpha1.StateAccepted},
		"nothing to apply": {want: policyv1alpha1.StateAccepted},
	} {
		if got := decideState(tc.invalid, tc.errs, tc.targets, tc.applied); got != tc.want {
			t.Errorf("%s: decideState = %q, want %q", name, got, tc.want)
		}
	}
}

func TestSortPolicyStatuses(t *testing.T) {
	refs := []meta.PolicyRef{
		{Kind: "TrafficPolicy", Namespace: "a", Name: "x", Cluster: "west"},
		{Kind: "TrafficPolicy", Namespace: "a", Name: "x"},
		{Kind: "AccessPolicy", Namespace: "b", Name: "y"},
		{Kind: "TrafficPolicy", Namespace: "a", Name: "w"},
	}
	var out []policyStatus
	for _, r := range refs {
		out = append(out, policyStatus{ref: r})
	}
	sortPolicyStatuses(out)
	var got []string
	for _, ps := range out {
		got = append(got, ps.ref.String())
	}
	want := []string{"AccessPolicy/b/y", "TrafficPolicy/a/w", "TrafficPolicy/a/x", "TrafficPolicy/a/x@west"}
	if !slices.Equal(got, want) {
		t.Errorf("order = %q, want %q", got, want)
	}
}

// A status's version ignores the heartbeat times and sees everything
// else, and hashing it leaves the status as it was.
func TestStatusVersion(t *testing.T) {
	seen := timestamppb.Now()
	st := &relayv1.Status{Clusters: []*relayv1.ClusterStatus{{Name: "east", Connected: true, LastSeen: seen}}}
	base := statusVersion(st)
	if base == "" || st.Clusters[0].LastSeen != seen {
		t.Fatalf("statusVersion = %q, last seen %v after; want a version, the time kept", base, st.Clusters[0].LastSeen)
	}
	st.Clusters[0].LastSeen = timestamppb.New(seen.AsTime().Add(time.Minute))
	if statusVersion(st) != base {
		t.Error("a new last-seen time changed the version")
	}
	st.Clusters[0].Stale = true
	if statusVersion(st) == base {
		t.Error("a cluster turning stale left the version as it was")
	}
}
