package sdk

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"unsafe"

	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/api/snapshot"
	snapshotv1 "github.com/meshrelay/meshrelay/proto/snapshot/v1"
	translatorv1 "github.com/meshrelay/meshrelay/proto/translator/v1"
	"github.com/meshrelay/meshrelay/sdk/protocol"
)

// fake emits one ConfigMap per Service into its Service's cluster, plus
// whatever its hooks add.
type fake struct {
	fail     error
	emitTo   string
	requests []*FleetRequest
	validate func(policyv1alpha1.Policy) []Diagnostic
}

func (f *fake) Describe() Description {
	return Description{Name: "fake", Version: "1", Backends: []string{"b"}, OutputKinds: []string{"/ConfigMap"}}
}

func (f *fake) Translate(_ context.Context, req *FleetRequest, resp *FleetResponse) error {
	f.requests = append(f.requests, req)
	if f.fail != nil {
		return f.fail
	}
	for _, c := range req.Fleet.Clusters() {
		for _, s := range c.Services() {
			resp.Emit(c.Name, map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": s.Name, "namespace": s.Namespace},
				"data": map[string]any{"policies": fmt.Sprint(len(req.Fleet.AccessPolicies()))}})
		}
	}
	if f.emitTo != "" {
		resp.Emit(f.emitTo, map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "x"}})
	}
	return nil
}

type validating struct {
	*fake
}

func (v validating) ValidatePolicy(p policyv1alpha1.Policy) []Diagnostic { return v.validate(p) }

func svcRes(ns, name string, pad int) *snapshotv1.Resource {
	body := fmt.Sprintf(`{"apiVersion":"v1","kind":"Service","metadata":{"namespace":%q,"name":%q,"annotations":{"pad":%q}}}`, ns, name, strings.Repeat("p", pad))
	return &snapshotv1.Resource{Id: &snapshotv1.ResourceID{Version: "v1", Kind: "Service", Namespace: ns, Name: name}, Body: []byte(body)}
}

func policyRes(name, body string) *snapshotv1.Resource {
	return &snapshotv1.Resource{Id: &snapshotv1.ResourceID{Group: policyGroup, Version: "v1alpha1", Kind: "AccessPolicy", Namespace: "ns", Name: name}, Body: []byte(body)}
}

const validPolicy = `{"apiVersion":"policy.meshrelay.io/v1alpha1","kind":"AccessPolicy","metadata":{"name":"%s","namespace":"ns"},
"spec":{"destinationSelectors":[{"namespaces":["ns"]}],"from":[{"namespaces":["ns"]}]}}`

const invalidPolicy = `{"apiVersion":"policy.meshrelay.io/v1alpha1","kind":"AccessPolicy","metadata":{"name":"%s","namespace":"ns"},
"spec":{"destinationSelectors":[],"from":[{"namespaces":["ns"]}]}}`

// answer is what a session sent for one update.
type answer struct {
	outputs map[string][]*snapshotv1.Resource // by cluster
	parts   map[string]int
	// kept are the resources named kept, by cluster.
	kept  map[string][]*snapshotv1.ResourceID
	diags []*translatorv1.Diagnostic
	done  *translatorv1.Done
}

type update struct {
	full        bool
	keptAllowed bool
	sameAllowed bool
	resend      []string
	scoped      bool
	targets     []string
	sameTargets bool
	clusters    []*translatorv1.ClusterInput
	policies    *translatorv1.PolicyChange
}

var gen uint64

func run(t *testing.T, s *session, u update) answer {
	t.Helper()
	return runB(t, s, u)
}

func runB(t testing.TB, s *session, u update) answer {
	t.Helper()
	return runWatched(t, s, u, nil)
}

// runWatched sends one update to s and returns its answer; watch, when
// set, sees every message of the answer as it is sent.
func runWatched(t testing.TB, s *session, u update, watch func(*translatorv1.TranslateResponse)) answer {
	t.Helper()
	gen++
	a := answer{outputs: map[string][]*snapshotv1.Resource{}, parts: map[string]int{}, kept: map[string][]*snapshotv1.ResourceID{}}
	send := func(m *translatorv1.TranslateResponse) error {
		if watch != nil {
			watch(m)
		}
		switch m := m.GetMsg().(type) {
		case *translatorv1.TranslateResponse_Output:
			c := m.Output.GetCluster()
			a.outputs[c] = append(a.outputs[c], m.Output.GetResources()...)
			a.kept[c] = append(a.kept[c], m.Output.GetKept()...)
			if a.outputs[c] == nil {
				a.outputs[c] = []*snapshotv1.Resource{}
			}
			a.parts[c]++
		case *translatorv1.TranslateResponse_Diagnostic:
			a.diags = append(a.diags, m.Diagnostic)
		case *translatorv1.TranslateResponse_Done:
			a.done = m.Done
		}
		return nil
	}
	msgs := []*translatorv1.TranslateRequest{{Msg: &translatorv1.TranslateRequest_Begin{Begin: &translatorv1.Begin{Generation: gen, Full: u.full, KeptAllowed: u.keptAllowed, SameAllowed: u.sameAllowed, Resend: u.resend,
		Scoped: u.scoped, Targets: u.targets, SameTargets: u.sameTargets}}}}
	for _, c := range u.clusters {
		msgs = append(msgs, &translatorv1.TranslateRequest{Msg: &translatorv1.TranslateRequest_Cluster{Cluster: c}})
	}
	if u.policies != nil {
		msgs = append(msgs, &translatorv1.TranslateRequest{Msg: &translatorv1.TranslateRequest_Policies{Policies: u.policies}})
	}
	msgs = append(msgs, &translatorv1.TranslateRequest{Msg: &translatorv1.TranslateRequest_Commit{Commit: &translatorv1.Commit{Generation: gen}}})
	for _, m := range msgs {
		if err := s.handle(context.Background(), m, send); err != nil {
			t.Fatalf("handle: %v", err)
		}
	}
	if a.done == nil || a.done.GetGeneration() != gen {
		t.Fatalf("no Done for generation %d: %+v", gen, a.done)
	}
	return a
}

func TestSessionSendsOnlyChanges(t *testing.T) {
	f := &fake{}
	s := newSession(f, f.Describe())
	a := run(t, s, update{full: true, clusters: []*translatorv1.ClusterInput{
		{Cluster: "east", Upserts: []*snapshotv1.Resource{svcRes("ns", "a", 0)}},
		{Cluster: "west", Upserts: []*snapshotv1.Resource{svcRes("ns", "b", 0)}},
		{Cluster: "empty"},
	}})
	if len(a.outputs) != 3 || len(a.outputs["east"]) != 1 || len(a.outputs["empty"]) != 0 {
		t.Fatalf("full update sent %v, want every cluster", a.outputs)
	}
	east, _ := f.requests[0].Fleet.Cluster("east")
	if east == nil || len(east.Services()) != 1 {
		t.Fatalf("unexpected fleet %v", f.requests[0].Fleet.Clusters())
	}

	// Only west changes: only west is sent, and east's *Cluster is reused.
	a = run(t, s, update{clusters: []*translatorv1.ClusterInput{
		{Cluster: "west", Upserts: []*snapshotv1.Resource{svcRes("ns", "c", 0)}},
	}})
	if len(a.outputs) != 1 || len(a.outputs["west"]) != 2 {
		t.Fatalf("delta sent %v, want west with 2 objects", a.outputs)
	}
	req := f.requests[1]
	if c, _ := req.Fleet.Cluster("east"); c.d != east.d {
		t.Error("east's *Cluster was rebuilt though it did not change")
	}
	if req.Full || len(req.ChangedClusters) != 1 || req.ChangedClusters[0] != "west" || req.PoliciesChanged {
		t.Errorf("request = full %v changed %v policies %v", req.Full, req.ChangedClusters, req.PoliciesChanged)
	}

	// An input change that changes no output sends nothing.
	a = run(t, s, update{clusters: []*translatorv1.ClusterInput{
		{Cluster: "east", Upserts: []*snapshotv1.Resource{{Id: &snapshotv1.ResourceID{Version: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "cm"}, Body: []byte(`{}`)}}},
	}})
	if len(a.outputs) != 0 {
		t.Errorf("unchanged outputs sent: %v", a.outputs)
	}

	// Emptying a set sends it empty; removing a cluster sends nothing for it.
	a = run(t, s, update{clusters: []*translatorv1.ClusterInput{
		{Cluster: "east", Deletes: []*snapshotv1.ResourceID{svcRes("ns", "a", 0).GetId()}},
		{Cluster: "west", Removed: true},
	}})
	if out, ok := a.outputs["east"]; !ok || len(out) != 0 || len(a.outputs) != 1 {
		t.Errorf("emptied output: got %v, want one empty output for east", a.outputs)
	}
	if _, ok := f.requests[3].Fleet.Cluster("west"); ok {
		t.Error("removed cluster still in the fleet")
	}
}

// An object the same in two clusters, each sent in its own message, is
// held once by the session.
func TestSessionHoldsAnObjectOfManyClustersOnce(t *testing.T) {
	f := &fake{}
	s := newSession(f, f.Describe())
	run(t, s, update{full: true, clusters: []*translatorv1.ClusterInput{
		{Cluster: "east", Upserts: []*snapshotv1.Resource{svcRes("ns", "a", 0), svcRes("ns", "b", 0)}},
		{Cluster: "west", Upserts: []*snapshotv1.Resource{svcRes("ns", "a", 0)}},
	}})
	body := func(cluster, name string) []byte {
		for k, b := range s.clusters[cluster].objects {
			if k.Name == name {
				return b
			}
		}
		t.Fatalf("cluster %s holds no object %s", cluster, name)
		return nil
	}
	if a, b := body("east", "a"), body("west", "a"); unsafe.SliceData(a) != unsafe.SliceData(b) {
		t.Error("two clusters' equal objects are held twice")
	}
	if unsafe.SliceData(body("east", "a")) == unsafe.SliceData(body("east", "b")) {
		t.Error("another object shares the first one's body")
	}
}

// names returns the names of resources or identities, sorted.
func names[T interface{ GetName() string }](xs []T) []string {
	var out []string
	for _, x := range xs {
		out = append(out, x.GetName())
	}
	slices.Sort(out)
	return out
}

func resourceIDs(rs []*snapshotv1.Resource) []*snapshotv1.ResourceID {
	var ids []*snapshotv1.ResourceID
	for _, r := range rs {
		ids = append(ids, r.GetId())
	}
	return ids
}

// Where the host allows it, a set sent again names what it sent last
// unchanged as kept and sends the rest; a full update, a host that does
// not allow it, and a cluster the host asks for whole get every body.
// A cluster asked for whole is sent even when nothing changed.
func TestSessionKeepsWhatDidNotChange(t *testing.T) {
	f := &fake{}
	s := newSession(f, f.Describe())
	check := func(what string, a answer, cluster string, wantKept, wantSent []string) {
		t.Helper()
		if got := names(a.kept[cluster]); !slices.Equal(got, wantKept) {
			t.Errorf("%s: kept %v, want %v", what, got, wantKept)
		}
		if got := names(resourceIDs(a.outputs[cluster])); !slices.Equal(got, wantSent) {
			t.Errorf("%s: sent %v, want %v", what, got, wantSent)
		}
	}
	svc := func(names ...string) []*snapshotv1.Resource {
		var rs []*snapshotv1.Resource
		for _, n := range names {
			rs = append(rs, svcRes("ns", n, 0))
		}
		return rs
	}
	a := run(t, s, update{full: true, keptAllowed: true, clusters: []*translatorv1.ClusterInput{{Cluster: "east", Upserts: svc("a", "b")}, {Cluster: "west", Upserts: svc("w")}}})
	check("full update", a, "east", nil, []string{"a", "b"})

	a = run(t, s, update{keptAllowed: true, clusters: []*translatorv1.ClusterInput{{Cluster: "east", Upserts: svc("c")}}})
	check("a Service added", a, "east", []string{"a", "b"}, []string{"c"})
	if _, sent := a.outputs["west"]; sent {
		t.Error("west's set was sent though it did not change")
	}

	a = run(t, s, update{clusters: []*translatorv1.ClusterInput{{Cluster: "east", Upserts: svc("d")}}})
	check("kept not allowed", a, "east", nil, []string{"a", "b", "c", "d"})

	a = run(t, s, update{keptAllowed: true, resend: []string{"west"}})
	check("west asked for whole", a, "west", nil, []string{"w"})
	if _, sent := a.outputs["east"]; sent {
		t.Error("east's set was sent though it did not change nor was asked for")
	}

	// A changed body is sent, not kept: every policy is counted in each body.
	a = run(t, s, update{keptAllowed: true, policies: &translatorv1.PolicyChange{Upserts: []*snapshotv1.Resource{policyRes("p", fmt.Sprintf(validPolicy, "p"))}}})
	check("every body changed", a, "east", nil, []string{"a", "b", "c", "d"})
	a = run(t, s, update{keptAllowed: true, clusters: []*translatorv1.ClusterInput{{Cluster: "east", Deletes: []*snapshotv1.ResourceID{svcRes("ns", "a", 0).GetId()}}}})
	check("a Service deleted", a, "east", []string{"b", "c", "d"}, nil)

	a = run(t, s, update{full: true, keptAllowed: true, clusters: []*translatorv1.ClusterInput{{Cluster: "east", Upserts: svc("b", "c", "d")}, {Cluster: "west", Upserts: svc("w")}}})
	check("full update again", a, "east", nil, []string{"b", "c", "d"})
}

func TestSessionFullUpdateRemovesUnmentionedClusters(t *testing.T) {
	f := &fake{}
	s := newSession(f, f.Describe())
	run(t, s, update{full: true, clusters: []*translatorv1.ClusterInput{{Cluster: "a"}, {Cluster: "b"}}})
	run(t, s, update{full: true, clusters: []*translatorv1.ClusterInput{{Cluster: "b"}}})
	if got := f.requests[1].Fleet.Clusters(); len(got) != 1 || got[0].Name != "b" {
		t.Errorf("clusters after full update = %v, want [b]", got)
	}
	if got := f.requests[1].ChangedClusters; len(got) != 1 || got[0] != "a" {
		t.Errorf("changed clusters = %v, want [a]", got)
	}
}

func TestSessionTranslateErrorSendsOnlyDone(t *testing.T) {
	f := &fake{}
	s := newSession(f, f.Describe())
	run(t, s, update{full: true, clusters: []*translatorv1.ClusterInput{{Cluster: "a", Upserts: []*snapshotv1.Resource{svcRes("ns", "x", 0)}}}})
	tests := map[string]func(){
		"error":          func() { f.fail = errors.New("cannot") },
		"emit error":     func() { f.fail = nil },
		"unknown target": func() { f.fail = nil; f.emitTo = "nowhere" },
	}
	for name, setup := range tests {
		t.Run(name, func(t *testing.T) {
			setup()
			if name == "emit error" {
				// A translator serving two backends must use EmitFor.
				s.desc.Backends = []string{"b", "c"}
				defer func() { s.desc.Backends = []string{"b"} }()
			}
			a := run(t, s, update{clusters: []*translatorv1.ClusterInput{{Cluster: "a", Upserts: []*snapshotv1.Resource{svcRes("ns", "y", 0)}}}})
			if a.done.GetError() == "" || len(a.outputs) != 0 || len(a.diags) != 0 {
				t.Errorf("answer = %+v, want only Done with an error", a)
			}
		})
	}
	f.fail, f.emitTo = nil, ""
	// Once translation works again, the outputs that changed meanwhile are sent.
	a := run(t, s, update{})
	if len(a.outputs["a"]) != 2 {
		t.Errorf("after recovery sent %v, want a's 2 objects", a.outputs)
	}
}

func TestSessionPolicies(t *testing.T) {
	f := &fake{}
	f.validate = func(p policyv1alpha1.Policy) []Diagnostic {
		if p.GetName() == "refused" {
			return []Diagnostic{Errorf(p, "spec.from", "not served")}
		}
		return nil
	}
	s := newSession(validating{f}, f.Describe())
	a := run(t, s, update{
		full: true,
		clusters: []*translatorv1.ClusterInput{{Cluster: "east", Upserts: []*snapshotv1.Resource{
			svcRes("ns", "a", 0), policyRes("local", fmt.Sprintf(validPolicy, "local")),
		}}},
		policies: &translatorv1.PolicyChange{Upserts: []*snapshotv1.Resource{
			policyRes("good", fmt.Sprintf(validPolicy, "good")),
			policyRes("bad", fmt.Sprintf(invalidPolicy, "bad")),
			policyRes("refused", fmt.Sprintf(validPolicy, "refused")),
			policyRes("garbage", `{"apiVersion":"policy.meshrelay.io/v1alpha1","kind":"AccessPolicy","spec":{"nope":1}}`),
		}},
	})
	aps := f.requests[0].Fleet.AccessPolicies()
	if len(aps) != 2 {
		t.Fatalf("valid policies = %d, want 2 (good, local)", len(aps))
	}
	var local *policyv1alpha1.AccessPolicy
	for _, ap := range aps {
		if ap.Name == "local" {
			local = ap
		}
	}
	if local == nil || local.Annotations[SourceClusterAnnotation] != "east" {
		t.Errorf("cluster policy not annotated with its cluster: %+v", local)
	}
	if c, _ := f.requests[0].Fleet.Cluster("east"); len(c.Objects(policyGroup, "AccessPolicy")) != 0 {
		t.Error("policies are among the cluster's objects")
	}
	byName := map[string][]*translatorv1.Diagnostic{}
	for _, d := range a.diags {
		byName[d.GetPolicy().GetName()] = append(byName[d.GetPolicy().GetName()], d)
	}
	if d := byName["bad"]; len(d) != 1 || d[0].GetPath() != "spec.destinationSelectors" || d[0].GetSeverity() != translatorv1.Diagnostic_SEVERITY_ERROR {
		t.Errorf("diagnostics of the invalid policy = %v", d)
	}
	if d := byName["refused"]; len(d) != 1 || d[0].GetPath() != "spec.from" || d[0].GetPolicy().GetKind() != "AccessPolicy" {
		t.Errorf("diagnostics of the refused policy = %v", d)
	}
	if d := byName["garbage"]; len(d) != 1 || !strings.Contains(d[0].GetDetail(), "nope") {
		t.Errorf("diagnostics of the undecodable policy = %v", d)
	}
	if got := a.outputs["east"]; len(got) != 1 || !strings.Contains(string(got[0].GetBody()), `"policies":"2"`) {
		t.Errorf("output = %v", got)
	}

	// Diagnostics are resent with every answer; deleting a policy changes outputs.
	a = run(t, s, update{policies: &translatorv1.PolicyChange{Deletes: []*snapshotv1.ResourceID{policyRes("good", "").GetId()}}})
	if len(a.diags) != 3 || len(a.outputs["east"]) != 1 || !f.requests[1].PoliciesChanged {
		t.Errorf("after delete: %d diagnostics, outputs %v", len(a.diags), a.outputs)
	}
	// A policy removed from its cluster goes too.
	run(t, s, update{clusters: []*translatorv1.ClusterInput{{Cluster: "east", Deletes: []*snapshotv1.ResourceID{policyRes("local", "").GetId()}}}})
	if n := len(f.requests[2].Fleet.AccessPolicies()); n != 0 {
		t.Errorf("%d policies left, want 0", n)
	}
}

func TestSessionSplitsLargeOutputs(t *testing.T) {
	f := &fake{}
	s := newSession(f, f.Describe())
	in := &translatorv1.ClusterInput{Cluster: "big"}
	for i := range 30 {
		in.Upserts = append(in.Upserts, svcRes("ns", fmt.Sprintf("s%02d", i), 0))
	}
	a := run(t, s, update{full: true, clusters: []*translatorv1.ClusterInput{in}})
	if a.parts["big"] != 1 {
		t.Errorf("small output sent in %d parts", a.parts["big"])
	}
	var outs []Output
	for i := range 25 {
		outs = append(outs, Output{Cluster: "c", Backend: "b", ID: snapshot.ID{Version: "v1", Kind: "ConfigMap", Name: fmt.Sprint(i)}, Body: make([]byte, 100<<10)})
	}
	parts := splitOutputs("c", "b", outs, keysOf(outs).each, nil, nil, 1<<20)
	if len(parts) != 3 {
		t.Fatalf("2.5 MB split into %d parts, want 3", len(parts))
	}
	for i, p := range parts {
		if p.GetMore() != (i < len(parts)-1) {
			t.Errorf("part %d more = %v", i, p.GetMore())
		}
	}
	keys := keysOf(outs).each
	kept := splitOutputs("c", "b", outs, keys, protocol.NewKeySet(slices.Clone(keys[:20])), nil, 1<<20)
	if len(kept) != 1 || len(kept[0].GetKept()) != 20 || len(kept[0].GetResources()) != 5 {
		t.Errorf("20 of 25 outputs kept: %d parts, the first keeps %d and sends %d; want one part of 20 kept and 5 sent",
			len(kept), len(kept[0].GetKept()), len(kept[0].GetResources()))
	}
	if len(splitOutputs("c", "b", nil, nil, nil, nil, 1<<20)) != 1 {
		t.Error("an empty set must be one empty part")
	}
}

func TestSessionKeepsTheTargetsTheHostSaysAreTheSame(t *testing.T) {
	f := &fake{}
	s := newSession(f, f.Describe())
	a := run(t, s, update{full: true, scoped: true, targets: []string{"east"}, clusters: []*translatorv1.ClusterInput{
		{Cluster: "east", Upserts: []*snapshotv1.Resource{svcRes("ns", "a", 0)}},
		{Cluster: "west", Upserts: []*snapshotv1.Resource{svcRes("ns", "b", 0)}},
	}})
	if len(a.outputs) != 1 || len(a.outputs["east"]) != 1 {
		t.Fatalf("the full update sent %v, want east's set only", a.outputs)
	}
	if !a.done.GetTakesSameTargets() {
		t.Error("Done does not say the SDK takes same_targets")
	}
	// Both change; the targets are the same, so west stays out of them.
	a = run(t, s, update{scoped: true, sameTargets: true, clusters: []*translatorv1.ClusterInput{
		{Cluster: "east", Upserts: []*snapshotv1.Resource{svcRes("ns", "c", 0)}},
		{Cluster: "west", Upserts: []*snapshotv1.Resource{svcRes("ns", "d", 0)}},
	}})
	if len(a.outputs) != 1 || len(a.outputs["east"]) != 2 {
		t.Errorf("with the same targets the update sent %v, want east's set of 2", a.outputs)
	}
	// Now west is a target: its every set is sent.
	a = run(t, s, update{scoped: true, targets: []string{"east", "west"}})
	if len(a.outputs) != 1 || len(a.outputs["west"]) != 2 {
		t.Errorf("when west became a target the update sent %v, want west's set of 2", a.outputs)
	}
}

func TestSessionRefusesSameTargetsWithoutTargetsBefore(t *testing.T) {
	for name, u := range map[string]update{
		"first update":    {scoped: true, sameTargets: true},
		"full update":     {full: true, scoped: true, sameTargets: true},
		"unscoped update": {sameTargets: true},
	} {
		t.Run(name, func(t *testing.T) {
			f := &fake{}
			s := newSession(f, f.Describe())
			if name != "first update" {
				run(t, s, update{full: true, scoped: true, targets: []string{"east"}})
			}
			gen++
			begin := &translatorv1.Begin{Generation: gen, Full: u.full, Scoped: u.scoped, SameTargets: u.sameTargets}
			err := s.handle(context.Background(), &translatorv1.TranslateRequest{Msg: &translatorv1.TranslateRequest_Begin{Begin: begin}}, func(*translatorv1.TranslateResponse) error { return nil })
			if err == nil {
				t.Error("same_targets accepted")
			}
		})
	}
}

func TestSessionProtocolErrors(t *testing.T) {
	f := &fake{}
	s := newSession(f, f.Describe())
	nop := func(*translatorv1.TranslateResponse) error { return nil }
	if err := s.handle(context.Background(), &translatorv1.TranslateRequest{Msg: &translatorv1.TranslateRequest_Commit{Commit: &translatorv1.Commit{Generation: 1}}}, nop); err == nil {
		t.Error("commit outside an update accepted")
	}
	s.handle(context.Background(), &translatorv1.TranslateRequest{Msg: &translatorv1.TranslateRequest_Begin{Begin: &translatorv1.Begin{Generation: 5}}}, nop)
	if err := s.handle(context.Background(), &translatorv1.TranslateRequest{Msg: &translatorv1.TranslateRequest_Commit{Commit: &translatorv1.Commit{Generation: 6}}}, nop); err == nil {
		t.Error("commit of another generation accepted")
	}
}

func TestServeInProcessDescribe(t *testing.T) {
	conn, stop, err := ServeFleetInProcess(&fake{})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	d, err := translatorv1.NewTranslatorClient(conn).Describe(context.Background(), &translatorv1.DescribeRequest{})
	if err != nil || d.GetName() != "fake" || len(d.GetBackends()) != 1 {
		t.Fatalf("Describe = %v, %v", d, err)
	}
	if _, _, err := ServeFleetInProcess(&badDesc{}); err == nil {
		t.Error("a translator without a name was served")
	}
}

type badDesc struct{ fake }

func (badDesc) Describe() Description { return Description{} }
