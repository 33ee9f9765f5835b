package sdk

import (
	"testing"

	snapshotv1 "github.com/meshrelay/meshrelay/proto/snapshot/v1"
	translatorv1 "github.com/meshrelay/meshrelay/proto/translator/v1"
	"github.com/meshrelay/meshrelay/sdk/protocol"
)

// A session names a body its answer already sent only when the update's
// Begin allows it; otherwise every set carries its bodies.
func TestSessionNamesBodiesOnlyWhereAllowed(t *testing.T) {
	clusters := func() []*translatorv1.ClusterInput {
		return []*translatorv1.ClusterInput{
			{Cluster: "east", Upserts: []*snapshotv1.Resource{svcRes("ns", "a", 0), svcRes("ns", "b", 0)}},
			{Cluster: "west", Upserts: []*snapshotv1.Resource{svcRes("ns", "a", 0), svcRes("ns", "b", 0)}},
		}
	}
	for _, allowed := range []bool{false, true} {
		f := &fake{}
		s := newSession(f, f.Describe())
		var sent, same int
		runWatched(t, s, update{full: true, sameAllowed: allowed, clusters: clusters()}, func(m *translatorv1.TranslateResponse) {
			sent += len(m.GetOutput().GetResources())
			same += len(m.GetOutput().GetSame())
		})
		want := [2]int{4, 0}
		if allowed {
			want = [2]int{2, 2}
		}
		if got := [2]int{sent, same}; got != want {
			t.Errorf("same allowed %v: %d bodies sent, %d named by an earlier one; want %v", allowed, sent, same, want)
		}
	}
}

// An answer names at most protocol.MaxSameBodies outputs: the first so
// many it sent. A later output is sent each time it comes.
func TestSameOutputsNamesTheFirstSoMany(t *testing.T) {
	key := func(i int) protocol.ResourceKey { return protocol.ResourceKey{byte(i), byte(i >> 8), byte(i >> 16)} }
	var none *sameOutputs
	if got := none.name(key(0)); got != -1 {
		t.Errorf("without naming allowed, an output is named %d", got)
	}
	s := &sameOutputs{}
	for i := range protocol.MaxSameBodies {
		if got := s.name(key(i)); got != -1 {
			t.Fatalf("output %d, new, named %d", i, got)
		}
	}
	for _, i := range []int{0, protocol.MaxSameBodies - 1} {
		if got := s.name(key(i)); got != int64(i) {
			t.Errorf("output %d again named %d, want %d", i, got, i)
		}
	}
	late := protocol.MaxSameBodies
	if s.name(key(late)) != -1 || s.name(key(late)) != -1 {
		t.Error("an output past the first MaxSameBodies was named")
	}
	if len(s.number) != protocol.MaxSameBodies {
		t.Errorf("%d outputs numbered, want %d", len(s.number), protocol.MaxSameBodies)
	}
}
