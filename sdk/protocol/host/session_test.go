package host

import (
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/sdk/protocol"
)

func service(t *testing.T, name string) snapshot.Resource {
	t.Helper()
	r, err := snapshot.FromJSON([]byte(`{"apiVersion":"v1","kind":"Service","metadata":{"name":"` + name + `","namespace":"default"}}`))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func snap(t *testing.T, rs ...snapshot.Resource) *snapshot.Snapshot {
	t.Helper()
	s, err := snapshot.New(1, rs)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// planned is what an update says, in a form go-cmp compares.
type planned struct {
	Full     bool
	Clusters []string // name, with "-" for removed and "~" for stale, and upserts/deletes
	Policies int
	Targets  []string
}

func summary(u update) planned {
	p := planned{Full: u.full, Policies: len(u.policyUpserts) + len(u.policyDeletes), Targets: u.targets}
	for _, c := range u.clusters {
		name := c.name
		switch {
		case c.removed:
			name = "-" + name
		case c.stale:
			name = "~" + name
		}
		for _, r := range c.upserts {
			name += " +" + r.ID.Name
		}
		for _, id := range c.deletes {
			name += " -" + id.Name
		}
		p.Clusters = append(p.Clusters, name)
	}
	return p
}

// TestSessionPlansWhatThePluginLacks walks a session through the views a
// host hands it and checks each update it would send: the whole view
// first, then only what changed, nothing when nothing did, and the whole
// view again after a failed update.
func TestSessionPlansWhatThePluginLacks(t *testing.T) {
	a, b, c := service(t, "a"), service(t, "b"), service(t, "c")
	policy := snap(t, service(t, "p"))
	s := &Session{checked: map[[2]string]protocol.KeySet{}}
	// answered records v as answered, as Translate does after an answer.
	answered := func(v View) { s.held, s.holds = v, true }

	v1 := View{Clusters: map[string]Cluster{"east": {Input: snap(t, a)}, "west": {Input: snap(t, b)}}, Policies: policy}
	if diff := cmp.Diff(planned{Full: true, Clusters: []string{"east +a", "west +b"}, Policies: 1}, summary(s.plan(v1))); diff != "" {
		t.Fatalf("first update (-want +got):\n%s", diff)
	}
	answered(v1)

	if u := s.plan(v1); !u.none(s.held) {
		t.Fatalf("the same view again plans %+v, want nothing sent", summary(u))
	}

	v2 := View{Clusters: map[string]Cluster{"east": {Input: snap(t, a, c)}, "west": {Input: snap(t, b), Stale: true}}, Policies: policy}
	if diff := cmp.Diff(planned{Clusters: []string{"east +c", "~west"}}, summary(s.plan(v2))); diff != "" {
		t.Fatalf("update after one new Service and a stale cluster (-want +got):\n%s", diff)
	}
	answered(v2)

	v3 := View{Clusters: map[string]Cluster{"east": {Input: snap(t, c)}}, Scoped: true, Targets: []string{"east"}}
	u := s.plan(v3)
	if diff := cmp.Diff(planned{Clusters: []string{"east -a", "-west"}, Policies: 1, Targets: []string{"east"}}, summary(u)); diff != "" {
		t.Fatalf("update after a removal, a deleted policy and a scope (-want +got):\n%s", diff)
	}
	answered(v3)

	v4 := View{Clusters: v3.Clusters, Scoped: true, Targets: []string{"east", "west"}}
	if u := s.plan(v4); u.none(s.held) {
		t.Fatal("a new target alone plans nothing, want an update with the new targets")
	}

	// A failed update leaves the plugin holding an unknown view.
	s.holds = false
	if diff := cmp.Diff(planned{Full: true, Clusters: []string{"east +c"}, Targets: []string{"east"}}, summary(s.plan(v3))); diff != "" {
		t.Fatalf("update after a failure (-want +got):\n%s", diff)
	}
}

// The sets a plugin answered are kept while their cluster is in the view
// and forgotten with it: when an update removes the cluster, or a full
// update leaves it out.
func TestCheckedSetsLeaveWithTheirCluster(t *testing.T) {
	set := protocol.KeySet{protocol.ResourceKey{1}}
	view := func(names ...string) View {
		v := View{Clusters: map[string]Cluster{}}
		for _, n := range names {
			v.Clusters[n] = Cluster{Input: snapshot.Empty}
		}
		return v
	}
	held := func(s *Session) []string {
		var out []string
		for key := range s.checked {
			out = append(out, key[0])
		}
		slices.Sort(out)
		return out
	}
	s := &Session{checked: map[[2]string]protocol.KeySet{{"east", "b"}: set, {"west", "b"}: set, {"north", "b"}: set}}
	s.answered = map[[2]string]protocol.KeySet{{"east", "b"}: set}
	s.keepChecked(view("east", "west", "north"), update{clusters: []clusterUpdate{{name: "east"}}})
	if diff := cmp.Diff([]string{"east", "north", "west"}, held(s)); diff != "" {
		t.Errorf("after east changed (-want +got):\n%s", diff)
	}
	s.keepChecked(view("east", "north"), update{clusters: []clusterUpdate{{name: "west", removed: true}}})
	if diff := cmp.Diff([]string{"east", "north"}, held(s)); diff != "" {
		t.Errorf("after west left (-want +got):\n%s", diff)
	}
	s.keepChecked(view("east"), update{full: true})
	if diff := cmp.Diff([]string{"east"}, held(s)); diff != "" {
		t.Errorf("after a full update without north (-want +got):\n%s", diff)
	}
}

// TestPlanByNamedChanges: a view that names the clusters that may differ
// from the one the plugin holds plans what comparing every cluster plans,
// after random changes, joins and departures, with unchanged clusters
// named too; a view whose base is not the view held is compared whole.
func TestPlanByNamedChanges(t *testing.T) {
	inputs := []*snapshot.Snapshot{snap(t, service(t, "a")), snap(t, service(t, "b")), snap(t, service(t, "a"), service(t, "b"))}
	rng := rand.New(rand.NewPCG(3, 5))
	held := View{Clusters: map[string]Cluster{}, Seq: 1}
	named := &Session{held: held, holds: true}
	whole := &Session{held: held, holds: true}
	for step := range 300 {
		next := View{Clusters: maps.Clone(held.Clusters), Seq: held.Seq + 1, Base: held.Seq}
		for range 1 + rng.IntN(3) {
			name := "c" + strconv.Itoa(rng.IntN(12))
			switch rng.IntN(4) {
			case 0:
				delete(next.Clusters, name)
			case 1:
				c := next.Clusters[name]
				c.Stale = !c.Stale
				if c.Input == nil {
					c.Input = inputs[0]
				}
				next.Clusters[name] = c
			default:
				next.Clusters[name] = Cluster{Input: inputs[rng.IntN(len(inputs))], Labels: map[string]string{"n": strconv.Itoa(rng.IntN(2))}}
			}
			next.Changed = append(next.Changed, name)
		}
		next.Changed = append(next.Changed, "c"+strconv.Itoa(rng.IntN(12))) // named, maybe unchanged
		unnamed := next
		unnamed.Base, unnamed.Changed = 0, nil
		want, got := summary(whole.plan(unnamed)), summary(named.plan(next))
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("step %d: the plan by named changes differs from the whole comparison (-whole +named):\n%s", step, diff)
		}
		held = next
		named.held, whole.held = next, next
	}

	// A base other than the view held: the names are not trusted.
	named.held.Seq = 99
	stale := View{Clusters: map[string]Cluster{"new": {Input: inputs[0]}}, Seq: 101, Base: 100, Changed: []string{"new"}}
	var removed int
	for _, c := range named.plan(stale).clusters {
		if c.removed {
			removed++
		}
	}
	if len(held.Clusters) == 0 || removed != len(held.Clusters) {
		t.Errorf("a view on another base removed %d of the %d clusters held, want every one it lacks", removed, len(held.Clusters))
	}
}

// TestPlanOfAViewChangedInPlace: a host that changes one map in place
// from view to view, naming what it changed and what it was (InPlace,
// Was), gets the plans of a host handing each view a map of its own,
// although the map the session holds is the one changed. A plugin that
// holds another view than the base gets the whole view.
func TestPlanOfAViewChangedInPlace(t *testing.T) {
	inputs := []*snapshot.Snapshot{snap(t, service(t, "a")), snap(t, service(t, "b")), snap(t, service(t, "a"), service(t, "b"))}
	rng := rand.New(rand.NewPCG(11, 13))
	clusters := map[string]Cluster{}
	copied := &Session{held: View{Clusters: map[string]Cluster{}, Seq: 1}, holds: true}
	inPlace := &Session{held: View{Clusters: clusters, Seq: 1, InPlace: true}, holds: true}
	for step := range 300 {
		seq := uint64(step + 2)
		was := map[string]Cluster{}
		var names []string
		for range 1 + rng.IntN(3) {
			name := "c" + strconv.Itoa(rng.IntN(12))
			if !slices.Contains(names, name) {
				if c, ok := clusters[name]; ok {
					was[name] = c
				}
			}
			names = append(names, name)
			switch rng.IntN(4) {
			case 0:
				delete(clusters, name)
			case 1:
				c := clusters[name]
				c.Stale = !c.Stale
				if c.Input == nil {
					c.Input = inputs[0]
				}
				clusters[name] = c
			default:
				clusters[name] = Cluster{Input: inputs[rng.IntN(len(inputs))], Labels: map[string]string{"n": strconv.Itoa(rng.IntN(2))}}
			}
		}
		// Named but unchanged, and what it was.
		name := "c" + strconv.Itoa(rng.IntN(12))
		if c, ok := clusters[name]; ok && !slices.Contains(names, name) {
			was[name] = c
		}
		names = append(names, name)
		own := View{Clusters: maps.Clone(clusters), Seq: seq}
		changed := View{Clusters: clusters, Seq: seq, Base: seq - 1, Changed: names, InPlace: true, Was: was}
		want, got := summary(copied.plan(own)), summary(inPlace.plan(changed))
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("step %d: the plan of the view changed in place differs from that of a copy (-copy +in place):\n%s", step, diff)
		}
		copied.held, inPlace.held = own, changed
	}

	// The plugin holds an older view: the map no longer shows it.
	clusters["new"] = Cluster{Input: inputs[0]}
	next := View{Clusters: clusters, Seq: 400, Base: 399, Changed: []string{"new"}, InPlace: true, Was: map[string]Cluster{}}
	u := inPlace.plan(next)
	if !u.full || len(u.clusters) != len(clusters) {
		t.Errorf("a view changed in place from another than the one held: full %v with %d clusters, want the whole view of %d", u.full, len(u.clusters), len(clusters))
	}
	// Nor can it be compared whole with what the session holds.
	next.Base, next.Changed = 0, nil
	if u := inPlace.plan(next); !u.full {
		t.Error("a view changed in place without a base is not sent whole")
	}
}
