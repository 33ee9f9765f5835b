package host_test

import (
	"context"
	"slices"
	"testing"

	"github.com/meshrelay/meshrelay/sdk/protocol/host"
)

// The targets are sent again only when they changed, and only to a
// plugin that said it takes same_targets; a full update always sends them.
func TestSessionSendsTheTargetsOnlyWhenTheyChanged(t *testing.T) {
	for _, takes := range []bool{true, false} {
		r := &keeper{silent: true, takesSame: takes}
		s := openServed(t, "recorder", r)
		ctx := context.Background()
		views := []host.View{
			{Scoped: true, Targets: []string{"east"}, Clusters: map[string]host.Cluster{"east": cluster(t, "a"), "west": cluster(t, "b")}},
			{Scoped: true, Targets: []string{"east"}, Clusters: map[string]host.Cluster{"east": cluster(t, "a", "c"), "west": cluster(t, "b")}},
			{Scoped: true, Targets: []string{"east", "west"}, Clusters: map[string]host.Cluster{"east": cluster(t, "a", "c"), "west": cluster(t, "b")}},
			{Scoped: true, Targets: []string{"east", "west"}, Clusters: map[string]host.Cluster{"east": cluster(t, "a", "c"), "west": cluster(t, "b", "d")}},
		}
		for _, v := range views {
			if _, err := s.Translate(ctx, v); err != nil {
				t.Fatal(err)
			}
		}
		type begin struct {
			targets []string
			same    bool
		}
		want := []begin{{[]string{"east"}, false}, {nil, true}, {[]string{"east", "west"}, false}, {nil, true}}
		if !takes {
			want = []begin{{[]string{"east"}, false}, {[]string{"east"}, false}, {[]string{"east", "west"}, false}, {[]string{"east", "west"}, false}}
		}
		var got []begin
		for _, b := range r.begins {
			got = append(got, begin{b.GetTargets(), b.GetSameTargets()})
		}
		if !slices.EqualFunc(got, want, func(a, b begin) bool { return a.same == b.same && slices.Equal(a.targets, b.targets) }) {
			t.Errorf("a plugin that takes same_targets: %v; the Begins were %+v, want %+v", takes, got, want)
		}
	}
}
