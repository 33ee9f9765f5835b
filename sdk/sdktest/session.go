package sdktest

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"

	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	snapshotv1 "github.com/meshrelay/meshrelay/proto/snapshot/v1"
	translatorv1 "github.com/meshrelay/meshrelay/proto/translator/v1"
	"github.com/meshrelay/meshrelay/sdk"
)

// Session drives one translator session in process, update by update, as
// the host does: the first [Session.Update] is a full update, later ones
// carry only what changed since the previous fixture. It keeps the
// complete outputs the answers add up to.
type Session struct {
	tb      testing.TB
	stream  translatorv1.Translator_TranslateClient
	counter *counter
	gen     uint64
	prev    *Fixture
	sets    map[[2]string][]sdk.Output
	diags   []sdk.Diagnostic
	sent    [][2]string
	targets []string
	scoped  bool
}

// NewSession opens a session with t served in process. It ends with the test.
func NewSession(tb testing.TB, t sdk.Translator) *Session {
	tb.Helper()
	s := &Session{tb: tb, sets: map[[2]string][]sdk.Output{}}
	if tt, ok := t.(sdk.TargetTranslator); ok {
		s.counter = &counter{TargetTranslator: tt}
		t = s.counter
		if v, ok := tt.(sdk.PolicyValidator); ok {
			t = validatingCounter{counter: s.counter, v: v}
		}
	}
	conn, stop, err := sdk.ServeInProcess(t)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(func() { cancel(); stop() })
	s.stream, err = translatorv1.NewTranslatorClient(conn).Translate(ctx)
	if err != nil {
		tb.Fatalf("open translate session: %v", err)
	}
	return s
}

// Scope limits later updates to the target clusters named; with no names,
// nothing is computed. Outputs of clusters outside the scope are left as
// they were.
func (s *Session) Scope(targets ...string) {
	s.scoped, s.targets = true, slices.Clone(targets)
}

// Update sends f, in full the first time and as a delta from the previous
// fixture afterwards, and returns the complete outputs and the diagnostics.
func (s *Session) Update(f *Fixture) *Result {
	s.tb.Helper()
	s.gen++
	reqs, err := s.requests(f)
	if err != nil {
		s.tb.Fatal(err)
	}
	if s.counter != nil {
		s.counter.reset()
	}
	for _, r := range reqs {
		if err := s.stream.Send(r); err != nil {
			s.tb.Fatalf("send update %d: %v", s.gen, err)
		}
	}
	a, err := receive(s.stream)
	if err != nil {
		s.tb.Fatalf("update %d: %v", s.gen, err)
	}
	s.prev = f
	s.sent = slices.SortedFunc(maps.Keys(a.sets), func(a, b [2]string) int {
		return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1]))
	})
	maps.Copy(s.sets, a.sets)
	present := map[string]bool{}
	for _, c := range f.Clusters {
		present[c.Name] = true
	}
	for k := range s.sets {
		if !present[k[0]] {
			delete(s.sets, k)
		}
	}
	s.diags = a.diagnostics
	return s.result()
}

// Computed returns the targets the last update computed, sorted; nil for a
// translator that is not an [sdk.TargetTranslator].
func (s *Session) Computed() []string {
	if s.counter == nil {
		return nil
	}
	return s.counter.names()
}

// Sent returns the (cluster, backend) output sets the last answer carried, sorted.
func (s *Session) Sent() [][2]string { return slices.Clone(s.sent) }

func (s *Session) result() *Result {
	res := &Result{Diagnostics: slices.Clone(s.diags)}
	for _, set := range s.sets {
		res.Outputs = append(res.Outputs, set...)
	}
	sortOutputs(res.Outputs)
	return res
}

// requests encodes f as the messages of the next update.
func (s *Session) requests(f *Fixture) ([]*translatorv1.TranslateRequest, error) {
	if s.prev == nil {
		reqs, err := fullUpdate(f, s.gen)
		if err != nil {
			return nil, err
		}
		reqs[0].GetBegin().Scoped, reqs[0].GetBegin().Targets = s.scoped, s.targets
		return reqs, nil
	}
	reqs := []*translatorv1.TranslateRequest{{Msg: &translatorv1.TranslateRequest_Begin{Begin: &translatorv1.Begin{
		Generation: s.gen, Scoped: s.scoped, Targets: s.targets,
	}}}}
	old := map[string]Cluster{}
	for _, c := range s.prev.Clusters {
		old[c.Name] = c
	}
	for _, c := range f.Clusters {
		in, err := clusterDelta(old[c.Name], c)
		if err != nil {
			return nil, err
		}
		if in != nil {
			reqs = append(reqs, &translatorv1.TranslateRequest{Msg: &translatorv1.TranslateRequest_Cluster{Cluster: in}})
		}
		delete(old, c.Name)
	}
	for _, name := range slices.Sorted(maps.Keys(old)) {
		reqs = append(reqs, &translatorv1.TranslateRequest{Msg: &translatorv1.TranslateRequest_Cluster{Cluster: &translatorv1.ClusterInput{Cluster: name, Removed: true}}})
	}
	ups, dels, err := objectDelta(s.prev.Policies, f.Policies)
	if err != nil {
		return nil, fmt.Errorf("policies: %w", err)
	}
	if len(ups)+len(dels) > 0 {
		reqs = append(reqs, &translatorv1.TranslateRequest{Msg: &translatorv1.TranslateRequest_Policies{Policies: &translatorv1.PolicyChange{Upserts: ups, Deletes: dels}}})
	}
	return append(reqs, &translatorv1.TranslateRequest{Msg: &translatorv1.TranslateRequest_Commit{Commit: &translatorv1.Commit{Generation: s.gen}}}), nil
}

// clusterDelta returns the change from old (zero when the cluster is new)
// to c, or nil when there is none.
func clusterDelta(old, c Cluster) (*translatorv1.ClusterInput, error) {
	ups, dels, err := objectDelta(old.Objects, c.Objects)
	if err != nil {
		return nil, fmt.Errorf("cluster %q: %w", c.Name, err)
	}
	same := old.Name == c.Name && old.Stale == c.Stale && slices.Equal(old.Meshes, c.Meshes)
	if same && len(ups)+len(dels) == 0 {
		return nil, nil
	}
	return &translatorv1.ClusterInput{Cluster: c.Name, Stale: c.Stale, Meshes: c.Meshes, Upserts: ups, Deletes: dels}, nil
}

// objectDelta returns the upserts and deletes that turn old into cur.
func objectDelta(old, cur []json.RawMessage) ([]*snapshotv1.Resource, []*snapshotv1.ResourceID, error) {
	index := func(objs []json.RawMessage) (map[string]*snapshotv1.Resource, error) {
		m := map[string]*snapshotv1.Resource{}
		for _, o := range objs {
			r, err := resourceOf(o)
			if err != nil {
				return nil, err
			}
			m[r.GetId().String()] = r
		}
		return m, nil
	}
	before, err := index(old)
	if err != nil {
		return nil, nil, err
	}
	after, err := index(cur)
	if err != nil {
		return nil, nil, err
	}
	var ups []*snapshotv1.Resource
	var dels []*snapshotv1.ResourceID
	for _, k := range slices.Sorted(maps.Keys(after)) {
		if b, ok := before[k]; !ok || !bytes.Equal(b.GetBody(), after[k].GetBody()) {
			ups = append(ups, after[k])
		}
	}
	for _, k := range slices.Sorted(maps.Keys(before)) {
		if _, ok := after[k]; !ok {
			dels = append(dels, before[k].GetId())
		}
	}
	return ups, dels, nil
}

// CheckIncremental runs the fixtures through one session, in full and then
// as deltas, and fails the test unless every step's outputs and
// diagnostics equal those of a fresh session given that fixture in full.
func CheckIncremental(tb testing.TB, t sdk.Translator, fixtures ...*Fixture) {
	tb.Helper()
	s := NewSession(tb, t)
	for i, f := range fixtures {
		got, err := Marshal(s.Update(f))
		if err != nil {
			tb.Fatal(err)
		}
		want, err := Marshal(RunFixture(tb, t, f))
		if err != nil {
			tb.Fatal(err)
		}
		if !bytes.Equal(want, got) {
			tb.Fatalf("step %d: incremental translation differs from a full one (- full, + incremental):\n%s", i, lineDiff(string(want), string(got)))
		}
	}
}

// counter records the targets a TargetTranslator computes.
type counter struct {
	sdk.TargetTranslator
	mu       sync.Mutex
	computed []string
}

func (c *counter) TranslateTarget(ctx context.Context, req *sdk.TargetRequest, resp *sdk.Response) error {
	c.mu.Lock()
	c.computed = append(c.computed, req.Target.Name)
	c.mu.Unlock()
	return c.TargetTranslator.TranslateTarget(ctx, req, resp)
}

func (c *counter) reset() {
	c.mu.Lock()
	c.computed = nil
	c.mu.Unlock()
}

func (c *counter) names() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Sorted(slices.Values(c.computed))
}

// validatingCounter keeps the translator's PolicyValidator visible.
type validatingCounter struct {
	*counter
	v sdk.PolicyValidator
}

func (v validatingCounter) ValidatePolicy(p policyv1alpha1.Policy) []sdk.Diagnostic {
	return v.v.ValidatePolicy(p)
}
