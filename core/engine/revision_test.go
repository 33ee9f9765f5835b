package engine

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/pluginhost"
)

// sessioned is a counter with a counter of its own per session, as a
// plugin process holds one view per session.
type sessioned struct {
	*counter
	mu       sync.Mutex
	sessions map[string]*counter
	closed   []string
}

func (s *sessioned) Session(name string) pluginhost.Translator {
	s.mu.Lock()
	defer s.mu.Unlock()
	if name == "" {
		return s.counter
	}
	if s.sessions[name] == nil {
		s.sessions[name] = newCounter(s.backend)
	}
	return s.sessions[name]
}

func (s *sessioned) CloseSession(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.sessions, name)
	s.closed = append(s.closed, name)
}

func policySet(t *testing.T, names ...string) *snapshot.Snapshot {
	t.Helper()
	var rs []snapshot.Resource
	for _, n := range names {
		r, err := snapshot.FromJSON([]byte(`{"apiVersion":"policy.meshrelay.io/v1alpha1","kind":"TrafficPolicy","metadata":{"name":"` + n + `","namespace":"default"}}`))
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

// policiesOf returns the count of policies the delivered output of key
// was computed with.
func (f *fleet) policiesOf(t *testing.T, key OutputKey) string {
	t.Helper()
	o, ok := f.output(key)
	if !ok {
		t.Fatalf("no output for %s", key)
	}
	var cm struct {
		Data map[string]string `json:"data"`
	}
	for r := range o.All() {
		if err := r.Decode(&cm); err != nil {
			t.Fatal(err)
		}
	}
	return cm.Data["policies"] + " policies, " + cm.Data["services"] + " services"
}

func TestRevisionsTranslateTheirClustersApart(t *testing.T) {
	ctx := context.Background()
	tr := &sessioned{counter: newCounter("istio"), sessions: map[string]*counter{}}
	f := newFleet(Options{}, tr)
	f.SetInput("east", input(t, 1, "istio", "a"))
	f.SetInput("west", input(t, 1, "istio", "b"))
	old, next := policySet(t, "one"), policySet(t, "one", "two")
	f.SetPolicies(old)
	f.cycle(ctx)
	east, west := OutputKey{"east", "istio"}, OutputKey{"west", "istio"}

	f.SetRevisions([]*snapshot.Snapshot{old, next}, []string{"west"})
	f.handed = nil
	f.cycle(ctx)
	if got := f.policiesOf(t, east); got != "2 policies, 1 services" {
		t.Errorf("east, released: %s, want the new revision's 2 policies", got)
	}
	if !slices.Equal(f.handed, []string{"east/istio"}) {
		t.Errorf("handed on %v, want east's only: west keeps its output", f.handed)
	}
	if h, _ := f.Revision("east"); h != next.Hash() {
		t.Errorf("Revision(east) = %s, want the new one", h.Short())
	}
	if h, _ := f.Revision("west"); h != old.Hash() {
		t.Errorf("Revision(west) = %s, want the old one", h.Short())
	}

	f.SetInput("west", input(t, 2, "istio", "b", "c"))
	f.cycle(ctx)
	if got := f.policiesOf(t, west); got != "1 policies, 2 services" {
		t.Errorf("west after its input changed: %s, want its new input under the old revision", got)
	}

	f.SetRevisions([]*snapshot.Snapshot{next}, nil)
	f.cycle(ctx)
	if got := f.policiesOf(t, west); got != "2 policies, 2 services" {
		t.Errorf("west after completion: %s, want the new revision", got)
	}
	if !slices.Equal(tr.closed, []string{""}) {
		t.Errorf("closed sessions %q, want the old revision's (\"\")", tr.closed)
	}
	if n := len(tr.sessions); n != 1 {
		t.Errorf("%d sessions open beside the first, want the new revision's only", n)
	}
}
