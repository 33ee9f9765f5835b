package discovery

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/internal/testenv"
	"github.com/meshrelay/meshrelay/internal/testutil"
)

const istioGroup = "networking.istio.io"

// declare tells src the kinds, failing the test on an error.
func declare(t *testing.T, src *Kube, kinds ...string) {
	t.Helper()
	gks, err := snapshot.ParseGroupKinds(kinds)
	if err != nil {
		t.Fatal(err)
	}
	if err := src.DeclareInputKinds(gks); err != nil {
		t.Fatalf("DeclareInputKinds(%v) = %v", kinds, err)
	}
}

// Custom resources are discovered for exactly the declared kinds: a
// VirtualService stays out while only DestinationRules are declared, comes
// in when its kind is declared too, and a kind no longer declared leaves
// the snapshot.
func TestKubeDiscoversDeclaredKinds(t *testing.T) {
	k := testenv.SharedKube(t)
	c := newCluster(t, k)
	ns := k.CreateNamespace(t)
	c.applyFile("testdata/bookinfo/virtual-service-reviews-80-20.yaml", ns)
	c.applyFile("testdata/bookinfo/destination-rule-reviews.yaml", ns)
	src, col := startKubeSource(t, k, KubeOptions{Filter: Filter{IncludeNamespaces: []string{ns}},
		InputKinds: []string{istioGroup + "/DestinationRule", "/Service"}})

	s := col.WaitFor(t, "the DestinationRule is discovered", func(s *snapshot.Snapshot) bool {
		return countKind(s, istioGroup, "DestinationRule", ns) == 1
	})
	if n := countKind(s, istioGroup, "VirtualService", ns); n != 0 {
		t.Errorf("%d VirtualServices discovered while their kind is not declared, want none", n)
	}

	declare(t, src, istioGroup+"/DestinationRule", istioGroup+"/VirtualService")
	col.WaitFor(t, "the VirtualService is discovered once declared", func(s *snapshot.Snapshot) bool {
		return countKind(s, istioGroup, "VirtualService", ns) == 1 && countKind(s, istioGroup, "DestinationRule", ns) == 1
	})

	declare(t, src, istioGroup+"/VirtualService")
	col.WaitFor(t, "the DestinationRule leaves once no longer declared", func(s *snapshot.Snapshot) bool {
		return countKind(s, istioGroup, "VirtualService", ns) == 1 && countKind(s, istioGroup, "DestinationRule", ns) == 0
	})
}

// A source that does not know its kinds publishes nothing, however long
// its informers have synced: its first snapshot, once they are declared,
// holds the declared custom resources.
func TestKubePublishesNothingBeforeItKnowsItsKinds(t *testing.T) {
	k := testenv.SharedKube(t)
	c := newCluster(t, k)
	ns := k.CreateNamespace(t)
	c.applyFile("testdata/bookinfo/destination-rule-reviews.yaml", ns)
	var logs testutil.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	src, col := startKubeSource(t, k, KubeOptions{Filter: Filter{IncludeNamespaces: []string{ns}}, Logger: logger})

	const waiting = "waiting for the input kinds"
	testutil.Eventually(t, "the informers sync", src.synced)
	looked := strings.Count(logs.String(), waiting)
	src.markDirty()
	testutil.Eventually(t, "the synced source looks again", func() bool { return strings.Count(logs.String(), waiting) > looked })
	if n := col.Count(); n != 0 {
		t.Fatalf("published %d snapshots before it knew its kinds, want none", n)
	}

	declare(t, src, istioGroup+"/DestinationRule")
	s := col.WaitFor(t, "a snapshot", func(*snapshot.Snapshot) bool { return true })
	if s.Version() != 1 || countKind(s, istioGroup, "DestinationRule", ns) != 1 {
		t.Errorf("snapshot %d holds %d DestinationRules; want the first snapshot to hold the one declared",
			s.Version(), countKind(s, istioGroup, "DestinationRule", ns))
	}
}

// Kinds that are not "group/Kind" are refused by NewKube.
func TestKubeOptionsRefuseBadKinds(t *testing.T) {
	err := KubeOptions{InputKinds: []string{"networking.istio.io/v1/VirtualService"}}.Validate()
	if err == nil || !strings.Contains(err.Error(), "networking.istio.io/v1/VirtualService") {
		t.Errorf("Validate(bad kind) = %v, want an error naming it", err)
	}
}
