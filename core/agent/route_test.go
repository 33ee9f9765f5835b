package agent

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/meshrelay/meshrelay/api/snapshot"
)

// groupSink records what it is given, taking the groups it names, or
// every group but those in not.
type groupSink struct {
	kindRecorder
	groups, not []string
	got         map[string][]string // IDs applied, by backend
	prune       bool
}

func (g *groupSink) TakesGroup(group string) bool {
	if g.not != nil {
		return !slices.Contains(g.not, group)
	}
	return slices.Contains(g.groups, group)
}

func (g *groupSink) Apply(_ context.Context, backend string, desired *snapshot.Snapshot, prune bool) (map[snapshot.ID]error, error) {
	if g.got == nil {
		g.got = map[string][]string{}
	}
	g.got[backend] = []string{}
	for r := range desired.All() {
		g.got[backend] = append(g.got[backend], r.ID.GroupKind()+" "+r.ID.Name)
	}
	g.prune = prune
	return nil, nil
}

func resources(t *testing.T, objs ...string) *snapshot.Snapshot {
	t.Helper()
	var rs []snapshot.Resource
	for _, o := range objs {
		r, err := snapshot.FromJSON([]byte(o))
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	s, err := snapshot.New(3, rs)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

const (
	xdsListener = `{"apiVersion":"xds.meshrelay.io/v1alpha1","kind":"Listener","metadata":{"name":"l","namespace":"node"}}`
	configMap   = `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"ns"}}`
	otherGroup  = `{"apiVersion":"example.com/v1","kind":"Thing","metadata":{"name":"t","namespace":"ns"}}`
)

// Each sink gets, of any backend's output, the groups it takes, an empty
// part included (so that it prunes); a plain sink gets everything; a
// resource no sink takes fails with ErrNoSink.
func TestSinksRouteByGroup(t *testing.T) {
	xdsSink := &groupSink{groups: []string{"xds.meshrelay.io"}}
	kube := &groupSink{not: []string{"xds.meshrelay.io"}}
	files := &groupSink{not: []string{}} // every group
	ss := Sinks{xdsSink, kube, files}

	res, err := ss.Apply(context.Background(), "acme", resources(t, xdsListener, configMap), true)
	if err != nil || len(res) != 0 {
		t.Fatalf("Apply(acme) = %v, %v; want no errors", res, err)
	}
	if _, err := ss.Apply(context.Background(), "istio", resources(t, configMap), true); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		sink             *groupSink
		wantAcme, wantIs []string
	}{
		"xds":  {xdsSink, []string{"xds.meshrelay.io/Listener l"}, []string{}},
		"kube": {kube, []string{"/ConfigMap c"}, []string{"/ConfigMap c"}},
		"dir":  {files, []string{"/ConfigMap c", "xds.meshrelay.io/Listener l"}, []string{"/ConfigMap c"}},
	} {
		if got := tc.sink.got["acme"]; !slices.Equal(got, tc.wantAcme) {
			t.Errorf("%s sink got %v of acme, want %v", name, got, tc.wantAcme)
		}
		if got, ok := tc.sink.got["istio"]; !ok || !slices.Equal(got, tc.wantIs) {
			t.Errorf("%s sink got %v (called: %v) of istio, want %v", name, got, ok, tc.wantIs)
		}
		if !tc.sink.prune {
			t.Errorf("%s sink was not asked to prune", name)
		}
	}

	only := Sinks{&groupSink{groups: []string{"xds.meshrelay.io"}}}
	s := resources(t, xdsListener, otherGroup)
	res, err = only.Apply(context.Background(), "acme", s, true)
	thing := s.Resources()[0].ID
	if err != nil || len(res) != 1 || !errors.Is(res[thing], ErrNoSink) {
		t.Errorf("Apply with no sink for %s = %v, %v; want ErrNoSink for it alone", thing, res, err)
	}
}

// A sink that prunes by kind is told the declared kinds of its groups.
func TestSinksDeclareKindsByGroup(t *testing.T) {
	xdsSink := &groupSink{groups: []string{"xds.meshrelay.io"}}
	kube := &groupSink{not: []string{"xds.meshrelay.io"}}
	plain := &kindRecorder{}
	kinds, err := snapshot.ParseGroupKinds([]string{"xds.meshrelay.io/Listener", "/ConfigMap"})
	if err != nil {
		t.Fatal(err)
	}
	if err := (Sinks{xdsSink, kube, plain}).DeclareKinds("acme", kinds); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		sink *kindRecorder
		want []string
	}{
		"xds":   {&xdsSink.kindRecorder, []string{"xds.meshrelay.io/Listener"}},
		"kube":  {&kube.kindRecorder, []string{"/ConfigMap"}},
		"plain": {plain, []string{"/ConfigMap", "xds.meshrelay.io/Listener"}},
	} {
		if got, _ := tc.sink.get("acme"); !slices.Equal(got, tc.want) {
			t.Errorf("%s sink was told %v, want %v", name, got, tc.want)
		}
	}
}
