package sdktest

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/api/snapshot"
	translatorv1 "github.com/meshrelay/meshrelay/proto/translator/v1"
	"github.com/meshrelay/meshrelay/sdk"
	"github.com/meshrelay/meshrelay/sdk/protocol/host"
)

// Session drives one translator session in process, update by update,
// through the host side of the protocol the server runs
// (sdk/protocol/host): the first [Session.Update] is a full update, later
// ones carry only what changed since the previous fixture, as the host's
// session works it out. It keeps the complete outputs the answers add up
// to.
type Session struct {
	tb      testing.TB
	host    *host.Session
	counter *counter
	updates int
	sets    map[[2]string][]sdk.Output
	// delivered are the sets as the host holds them, which a translator's
	// answer may keep resources of (host.View.Delivered).
	delivered map[[2]string]*snapshot.Snapshot
	diags     []sdk.Diagnostic
	sent      [][2]string
	targets   []string
	scoped    bool
	// inputKinds are the kinds the translator declares it reads.
	inputKinds []string
}

// NewSession opens a session with t served in process. It ends with the
// test. Like [Run], it leaves out of every fixture the objects of custom
// kinds t does not declare, and fails on an emit of an undeclared kind.
func NewSession(tb testing.TB, t Translator) *Session {
	tb.Helper()
	s := &Session{tb: tb, sets: map[[2]string][]sdk.Output{}, delivered: map[[2]string]*snapshot.Snapshot{}}
	if tt, ok := t.(sdk.Translator); ok {
		s.counter = &counter{Translator: tt}
		t = s.counter
		if v, ok := tt.(sdk.PolicyValidator); ok {
			t = validatingCounter{counter: s.counter, v: v}
		}
	}
	conn, stop, err := serve(t)
	if err != nil {
		tb.Fatal(err)
	}
	s.host, s.inputKinds, err = openSession(context.Background(), translatorv1.NewTranslatorClient(conn))
	if err != nil {
		stop()
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.host.Close(); stop() })
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
	if err := s.translate(f); err != nil {
		s.tb.Fatalf("update %d: %v", s.updates, err)
	}
	return s.result()
}

// translate sends f and keeps the answer.
func (s *Session) translate(f *Fixture) error {
	s.updates++
	f = f.discovered(s.inputKinds)
	v, err := viewOf(f)
	if err != nil {
		return err
	}
	v.Scoped, v.Targets = s.scoped, slices.Sorted(slices.Values(s.targets))
	v.Delivered = func(cluster, backend string) (*snapshot.Snapshot, bool) {
		set, ok := s.delivered[[2]string{cluster, backend}]
		return set, ok
	}
	if s.counter != nil {
		s.counter.reset()
	}
	res, err := s.host.Translate(context.Background(), v)
	if err != nil {
		return err
	}
	return s.keep(res, f)
}

// keep records an answer: the sets it carried, the complete outputs they
// add up to without the clusters f no longer has, and its diagnostics.
func (s *Session) keep(res host.Result, f *Fixture) error {
	s.sent = s.sent[:0]
	if !res.Sent {
		return nil // the fixture is the view the translator holds
	}
	for _, set := range res.Outputs {
		key := [2]string{set.Cluster, set.Backend}
		delivered, err := snapshot.New(0, set.Resources)
		if err != nil {
			return fmt.Errorf("output of cluster %q backend %q: %w", set.Cluster, set.Backend, err)
		}
		s.sets[key], s.delivered[key] = outputsOf(set), delivered
		s.sent = append(s.sent, key)
	}
	present := map[string]bool{}
	for _, c := range f.Clusters {
		present[c.Name] = true
	}
	for k := range s.sets {
		if !present[k[0]] {
			delete(s.sets, k)
			delete(s.delivered, k)
		}
	}
	s.diags = diagnosticsOf(res.Diagnostics)
	return nil
}

// Computed returns the targets the last update computed, sorted; nil for a
// translator that is not an [sdk.Translator].
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

// CheckIncremental runs the fixtures through one session, in full and then
// as deltas, and fails the test unless every step's outputs and
// diagnostics equal those of a fresh session given that fixture in full.
func CheckIncremental(tb testing.TB, t Translator, fixtures ...*Fixture) {
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

// counter records the targets a Translator computes.
type counter struct {
	sdk.Translator
	mu       sync.Mutex
	computed []string
}

func (c *counter) TranslateTarget(ctx context.Context, req *sdk.Request, resp *sdk.Response) error {
	c.mu.Lock()
	c.computed = append(c.computed, req.Target.Name)
	c.mu.Unlock()
	return c.Translator.TranslateTarget(ctx, req, resp)
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
