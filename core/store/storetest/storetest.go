package storetest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/store"
)

// eventTimeout bounds how long the suite waits for a Watch event that must
// come. It is a deadline for a condition, not a measurement.
const eventTimeout = 10 * time.Second

// Factory returns a store instance for t; see the package documentation for
// what calls with the same t must share.
type Factory func(t *testing.T) store.Store

// Shared returns a Factory that makes one backend per test with newBackend
// and, on each call, a store instance on it with newReplica and a fresh
// replica ID ("replica-1", "replica-2", ...). Instances are closed when the
// test ends.
func Shared[B any](newBackend func(t *testing.T) B, newReplica func(t *testing.T, b B, replica string) store.Store) Factory {
	type entry struct {
		backend B
		n       int
	}
	var (
		mu       sync.Mutex
		backends = make(map[*testing.T]*entry)
	)
	return func(t *testing.T) store.Store {
		t.Helper()
		mu.Lock()
		e, ok := backends[t]
		if !ok {
			e = &entry{}
			backends[t] = e
			mu.Unlock()
			e.backend = newBackend(t)
			t.Cleanup(func() {
				mu.Lock()
				delete(backends, t)
				mu.Unlock()
			})
			mu.Lock()
		}
		e.n++
		replica := fmt.Sprintf("replica-%d", e.n)
		mu.Unlock()
		s := newReplica(t, e.backend, replica)
		t.Cleanup(func() { s.Close() })
		return s
	}
}

// Run runs the conformance suite, one subtest per contract clause.
func Run(t *testing.T, newStore Factory) {
	tests := map[string]func(t *testing.T, newStore Factory){
		"InputRoundTrip":           testInputRoundTrip,
		"InputOlderIgnored":        testInputOlderIgnored,
		"InputConcurrentPuts":      testInputConcurrentPuts,
		"InputNotFound":            testInputNotFound,
		"ListInputs":               testListInputs,
		"DeleteInput":              testDeleteInput,
		"InvalidArguments":         testInvalidArguments,
		"Outputs":                  testOutputs,
		"OutputNotFound":           testOutputNotFound,
		"DeleteOutputs":            testDeleteOutputs,
		"ClusterRoundTrip":         testClusterRoundTrip,
		"ClusterNotFound":          testClusterNotFound,
		"ListClustersSorted":       testListClustersSorted,
		"ClusterCopies":            testClusterCopies,
		"ClusterCompareAndPut":     testClusterCompareAndPut,
		"ClusterCompareAndPutMany": testClusterCompareAndPutMany,
		"ClusterRevokeRace":        testClusterRevokeRace,
		"CA":                       testCA,
		"Trust":                    testTrust,
		"TrustCompareAndPut":       testTrustCompareAndPut,
		"TrustRace":                testTrustRace,
		"RolloutCompareAndPut":     testRolloutCompareAndPut,
		"WatchOtherReplica":        testWatchOtherReplica,
		"WatchMultipleWatchers":    testWatchMultipleWatchers,
		"WatchEndsWithContext":     testWatchEndsWithContext,
		"ReplicasShareData":        testReplicasShareData,
		"Ping":                     testPing,
		"Closed":                   testClosed,
	}
	maps.Copy(tests, leaseTests)
	for name, test := range tests {
		t.Run(name, func(t *testing.T) { test(t, newStore) })
	}
}

// Snap builds a snapshot at version with n ConfigMaps whose data carry seed,
// for tests and benchmarks.
func Snap(tb testing.TB, version uint64, seed string, n int) *snapshot.Snapshot {
	tb.Helper()
	rs := make([]snapshot.Resource, 0, n)
	for i := range n {
		id := snapshot.ID{Version: "v1", Kind: "ConfigMap", Namespace: "default", Name: fmt.Sprintf("cm-%d", i)}
		body := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":%q,"namespace":"default"},"data":{"seed":%q}}`, id.Name, seed)
		r, err := snapshot.NewResource(id, []byte(body))
		if err != nil {
			tb.Fatalf("NewResource: %v", err)
		}
		rs = append(rs, r)
	}
	s, err := snapshot.New(version, rs)
	if err != nil {
		tb.Fatalf("snapshot.New: %v", err)
	}
	return s
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func sameSnap(t *testing.T, what string, got, want *snapshot.Snapshot) {
	t.Helper()
	if got == nil {
		t.Fatalf("%s = nil, want version %d", what, want.Version())
	}
	if got.Version() != want.Version() || got.Hash() != want.Hash() {
		t.Fatalf("%s = version %d hash %s, want version %d hash %s", what, got.Version(), got.Hash().Short(), want.Version(), want.Hash().Short())
	}
	if diff := cmp.Diff(want.Resources(), got.Resources(), cmpopts.EquateEmpty()); diff != "" {
		t.Fatalf("%s resources (-want +got):\n%s", what, diff)
	}
}

func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func testInputRoundTrip(t *testing.T, newStore Factory) {
	ctx, s := ctxFor(t), newStore(t)
	want := Snap(t, 7, "a", 20)
	must(t, "PutInput", s.PutInput(ctx, "east", want))
	got, err := s.GetInput(ctx, "east")
	must(t, "GetInput", err)
	sameSnap(t, `GetInput("east")`, got, want)

	empty := snapshot.Empty.WithVersion(8)
	must(t, "PutInput(empty)", s.PutInput(ctx, "west", empty))
	got, err = s.GetInput(ctx, "west")
	must(t, "GetInput", err)
	sameSnap(t, `GetInput("west")`, got, empty)
}

func testInputOlderIgnored(t *testing.T, newStore Factory) {
	ctx, s := ctxFor(t), newStore(t)
	v5 := Snap(t, 5, "five", 3)
	must(t, "PutInput(v5)", s.PutInput(ctx, "c", v5))
	must(t, "PutInput(v4)", s.PutInput(ctx, "c", Snap(t, 4, "four", 3)))
	got, err := s.GetInput(ctx, "c")
	must(t, "GetInput", err)
	sameSnap(t, "GetInput after older Put", got, v5)

	// Another replica's older Put is ignored too.
	other := newStore(t)
	must(t, "other PutInput(v1)", other.PutInput(ctx, "c", Snap(t, 1, "one", 3)))
	got, err = s.GetInput(ctx, "c")
	must(t, "GetInput", err)
	sameSnap(t, "GetInput after other replica's older Put", got, v5)

	same := Snap(t, 5, "five-again", 3)
	must(t, "PutInput(v5, other content)", s.PutInput(ctx, "c", same))
	got, err = s.GetInput(ctx, "c")
	must(t, "GetInput", err)
	sameSnap(t, "GetInput after same-version Put", got, same)

	v6 := Snap(t, 6, "six", 1)
	must(t, "PutInput(v6)", s.PutInput(ctx, "c", v6))
	got, err = s.GetInput(ctx, "c")
	must(t, "GetInput", err)
	sameSnap(t, "GetInput after newer Put", got, v6)
}

func testInputConcurrentPuts(t *testing.T, newStore Factory) {
	ctx := ctxFor(t)
	a, b := newStore(t), newStore(t)
	const n = 40
	snaps := make([]*snapshot.Snapshot, n+1)
	for v := 1; v <= n; v++ {
		snaps[v] = Snap(t, uint64(v), fmt.Sprint(v), 2)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for v := 1; v <= n; v++ {
		for _, s := range []store.Store{a, b} {
			wg.Go(func() { errs <- s.PutInput(ctx, "race", snaps[v]) })
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		must(t, "PutInput", err)
	}
	for _, s := range []store.Store{a, b} {
		got, err := s.GetInput(ctx, "race")
		must(t, "GetInput", err)
		sameSnap(t, "GetInput after racing Puts", got, snaps[n])
	}
}

func testInputNotFound(t *testing.T, newStore Factory) {
	ctx, s := ctxFor(t), newStore(t)
	got, err := s.GetInput(ctx, "missing")
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf(`GetInput("missing") = %v, %v; want ErrNotFound`, got, err)
	}
}

func testListInputs(t *testing.T, newStore Factory) {
	ctx, s := ctxFor(t), newStore(t)
	got, err := s.ListInputs(ctx)
	must(t, "ListInputs", err)
	if got == nil || len(got) != 0 {
		t.Fatalf("ListInputs on an empty store = %v, want an empty map", got)
	}
	want := map[string]*snapshot.Snapshot{}
	for i := range 25 {
		name := fmt.Sprintf("cluster-%02d", i)
		want[name] = Snap(t, uint64(i+1), name, i%4)
		must(t, "PutInput", s.PutInput(ctx, name, want[name]))
	}
	got, err = s.ListInputs(ctx)
	must(t, "ListInputs", err)
	if len(got) != len(want) {
		t.Fatalf("ListInputs returned %d inputs, want %d", len(got), len(want))
	}
	for name, w := range want {
		sameSnap(t, fmt.Sprintf("ListInputs()[%q]", name), got[name], w)
	}
	// The map is the caller's.
	delete(got, "cluster-00")
	again, err := s.ListInputs(ctx)
	must(t, "ListInputs", err)
	if _, ok := again["cluster-00"]; !ok {
		t.Fatal("deleting from the map ListInputs returned changed the store")
	}
}

func testDeleteInput(t *testing.T, newStore Factory) {
	ctx, s := ctxFor(t), newStore(t)
	must(t, "DeleteInput(missing)", s.DeleteInput(ctx, "missing"))
	must(t, "PutInput", s.PutInput(ctx, "a", Snap(t, 3, "a", 1)))
	must(t, "PutInput", s.PutInput(ctx, "b", Snap(t, 3, "b", 1)))
	must(t, "DeleteInput", s.DeleteInput(ctx, "a"))
	if _, err := s.GetInput(ctx, "a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf(`GetInput("a") after delete: err = %v, want ErrNotFound`, err)
	}
	got, err := s.ListInputs(ctx)
	must(t, "ListInputs", err)
	if _, ok := got["a"]; ok || len(got) != 1 {
		t.Fatalf("ListInputs after delete has %d inputs (a present: %v), want only b", len(got), ok)
	}
	// After a delete, any version may be stored again.
	v1 := Snap(t, 1, "a-again", 1)
	must(t, "PutInput after delete", s.PutInput(ctx, "a", v1))
	g, err := s.GetInput(ctx, "a")
	must(t, "GetInput", err)
	sameSnap(t, "GetInput after re-Put", g, v1)
}

func testInvalidArguments(t *testing.T, newStore Factory) {
	ctx, s := ctxFor(t), newStore(t)
	snap := Snap(t, 1, "x", 1)
	for name, err := range map[string]error{
		"PutInput(empty cluster)":  s.PutInput(ctx, "", snap),
		"PutInput(nil)":            s.PutInput(ctx, "c", nil),
		"PutOutput(empty backend)": s.PutOutput(ctx, "c", "", snap),
		"PutOutput(empty cluster)": s.PutOutput(ctx, "", "istio", snap),
		"PutOutput(nil)":           s.PutOutput(ctx, "c", "istio", nil),
		"PutCluster(empty name)":   s.PutCluster(ctx, store.Cluster{}),
		"PutCA(empty certificate)": s.PutCA(ctx, nil, []byte("key")),
		"PutCA(empty private key)": s.PutCA(ctx, []byte("cert"), nil),
	} {
		if err == nil {
			t.Errorf("%s = nil, want an error", name)
		}
	}
}

func testOutputs(t *testing.T, newStore Factory) {
	ctx, s := ctxFor(t), newStore(t)
	istio, envoy := Snap(t, 2, "istio", 5), Snap(t, 3, "envoy", 4)
	must(t, "PutOutput", s.PutOutput(ctx, "east", "istio", istio))
	must(t, "PutOutput", s.PutOutput(ctx, "east", "envoy", envoy))
	must(t, "PutOutput", s.PutOutput(ctx, "west", "istio", Snap(t, 9, "west", 1)))
	got, err := s.GetOutput(ctx, "east", "istio")
	must(t, "GetOutput", err)
	sameSnap(t, `GetOutput("east", "istio")`, got, istio)

	// Outputs are last-writer-wins: an older version replaces a newer one.
	older := Snap(t, 1, "istio-older", 2)
	must(t, "PutOutput(older)", s.PutOutput(ctx, "east", "istio", older))
	got, err = s.GetOutput(ctx, "east", "istio")
	must(t, "GetOutput", err)
	sameSnap(t, `GetOutput("east", "istio") after older Put`, got, older)

	list, err := s.ListOutputs(ctx, "east")
	must(t, "ListOutputs", err)
	if len(list) != 2 {
		t.Fatalf(`ListOutputs("east") has %d outputs, want 2`, len(list))
	}
	sameSnap(t, `ListOutputs("east")["istio"]`, list["istio"], older)
	sameSnap(t, `ListOutputs("east")["envoy"]`, list["envoy"], envoy)

	none, err := s.ListOutputs(ctx, "nowhere")
	must(t, "ListOutputs", err)
	if none == nil || len(none) != 0 {
		t.Fatalf(`ListOutputs("nowhere") = %v, want an empty map`, none)
	}
}

func testOutputNotFound(t *testing.T, newStore Factory) {
	ctx, s := ctxFor(t), newStore(t)
	if _, err := s.GetOutput(ctx, "east", "istio"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetOutput on an empty store: err = %v, want ErrNotFound", err)
	}
	must(t, "PutOutput", s.PutOutput(ctx, "east", "envoy", Snap(t, 1, "x", 1)))
	if _, err := s.GetOutput(ctx, "east", "istio"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetOutput of another backend: err = %v, want ErrNotFound", err)
	}
}

func testDeleteOutputs(t *testing.T, newStore Factory) {
	ctx, s := ctxFor(t), newStore(t)
	must(t, "DeleteOutputs(missing)", s.DeleteOutputs(ctx, "missing"))
	must(t, "PutOutput", s.PutOutput(ctx, "east", "istio", Snap(t, 1, "a", 1)))
	must(t, "PutOutput", s.PutOutput(ctx, "east", "envoy", Snap(t, 1, "b", 1)))
	keep := Snap(t, 1, "c", 1)
	must(t, "PutOutput", s.PutOutput(ctx, "west", "istio", keep))
	must(t, "DeleteOutputs", s.DeleteOutputs(ctx, "east"))
	list, err := s.ListOutputs(ctx, "east")
	must(t, "ListOutputs", err)
	if len(list) != 0 {
		t.Fatalf(`ListOutputs("east") after DeleteOutputs has %d outputs, want 0`, len(list))
	}
	if _, err := s.GetOutput(ctx, "east", "istio"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetOutput after DeleteOutputs: err = %v, want ErrNotFound", err)
	}
	got, err := s.GetOutput(ctx, "west", "istio")
	must(t, "GetOutput(west)", err)
	sameSnap(t, `GetOutput("west", "istio")`, got, keep)
}

var clusterCmp = []cmp.Option{
	cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) }),
	cmpopts.EquateEmpty(),
}

func sampleCluster(name string) store.Cluster {
	now := time.Date(2026, 11, 22, 1, 2, 3, 456789000, time.UTC)
	return store.Cluster{
		Name:         name,
		TokenHash:    []byte{0, 1, 2, 0xfe, 0xff},
		TokenExpires: now.Add(24 * time.Hour),
		Registered:   now,
		Serials:      []string{"1a2b", "3c4d"},
		Revoked:      true,
		RevokedAt:    now.Add(time.Hour),
		LastSeen:     now.Add(30 * time.Minute).In(time.FixedZone("X", 3600)),
		Replica:      "replica-7",
		Labels:       map[string]string{"region": "eu-west", "topology.kubernetes.io/zone": "a"},
	}
}

func testClusterRoundTrip(t *testing.T, newStore Factory) {
	ctx, s := ctxFor(t), newStore(t)
	want := sampleCluster("east")
	must(t, "PutCluster", s.PutCluster(ctx, want))
	got, err := s.GetCluster(ctx, "east")
	must(t, "GetCluster", err)
	if diff := cmp.Diff(want, got, clusterCmp...); diff != "" {
		t.Fatalf(`GetCluster("east") (-want +got):\n%s`, diff)
	}
	want.Revoked, want.RevokedAt, want.Serials = false, time.Time{}, nil
	must(t, "PutCluster(replace)", s.PutCluster(ctx, want))
	got, err = s.GetCluster(ctx, "east")
	must(t, "GetCluster", err)
	if diff := cmp.Diff(want, got, clusterCmp...); diff != "" {
		t.Fatalf(`GetCluster("east") after replace (-want +got):\n%s`, diff)
	}
}

func testClusterCompareAndPut(t *testing.T, newStore Factory) {
	ctx, s := ctxFor(t), newStore(t)
	c := store.Cluster{Name: "east", Serials: []string{"a"}}
	if _, err := s.CompareAndPutCluster(ctx, store.Cluster{Name: "east", Version: 3}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("CompareAndPutCluster(version 3) of a missing record: err = %v, want ErrConflict", err)
	}
	stored, err := s.CompareAndPutCluster(ctx, c)
	must(t, "CompareAndPutCluster(create)", err)
	if stored.Version != 1 {
		t.Fatalf("created record has version %d, want 1", stored.Version)
	}
	if _, err := s.CompareAndPutCluster(ctx, c); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("CompareAndPutCluster(version 0) over version 1: err = %v, want ErrConflict", err)
	}
	stored.Revoked = true
	stored, err = s.CompareAndPutCluster(ctx, stored)
	must(t, "CompareAndPutCluster(update)", err)
	got, err := s.GetCluster(ctx, "east")
	must(t, "GetCluster", err)
	if got.Version != 2 || !got.Revoked || stored.Version != 2 {
		t.Fatalf("after update: stored %+v, read %+v; want version 2, revoked", stored, got)
	}
}

// testClusterCompareAndPutMany stores the records of a batch whose
// versions match, in order, and leaves the others as they are.
func testClusterCompareAndPutMany(t *testing.T, newStore Factory) {
	ctx, s := ctxFor(t), newStore(t)
	east, err := s.CompareAndPutCluster(ctx, store.Cluster{Name: "east"})
	must(t, "CompareAndPutCluster(east)", err)
	west, err := s.CompareAndPutCluster(ctx, store.Cluster{Name: "west", Labels: map[string]string{"tier": "1"}})
	must(t, "CompareAndPutCluster(west)", err)
	seen := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	east.LastSeen, east.Replica = seen, "r1"
	staleWest := west
	staleWest.Version--
	staleWest.LastSeen = seen
	north := store.Cluster{Name: "north", Replica: "r1"}
	stored, err := s.CompareAndPutClusters(ctx, []store.Cluster{east, staleWest, north})
	must(t, "CompareAndPutClusters", err)
	var names []string
	for _, c := range stored {
		names = append(names, fmt.Sprintf("%s@%d", c.Name, c.Version))
	}
	if want := []string{"east@2", "north@1"}; !slices.Equal(names, want) {
		t.Fatalf("CompareAndPutClusters stored %v, want %v", names, want)
	}
	got, err := s.GetCluster(ctx, "east")
	must(t, "GetCluster(east)", err)
	if !got.LastSeen.Equal(seen) || got.Replica != "r1" || got.Version != 2 {
		t.Errorf("east after CompareAndPutClusters: %+v, want last seen %s by r1 at version 2", got, seen)
	}
	got, err = s.GetCluster(ctx, "west")
	must(t, "GetCluster(west)", err)
	if !got.LastSeen.IsZero() || got.Version != west.Version || got.Labels["tier"] != "1" {
		t.Errorf("west after a stale CompareAndPutClusters: %+v, want it unchanged at version %d", got, west.Version)
	}
	if stored, err := s.CompareAndPutClusters(ctx, nil); err != nil || len(stored) != 0 {
		t.Errorf("CompareAndPutClusters(nil) = %v, %v; want nothing stored", stored, err)
	}
}

// testClusterRevokeRace revokes a record through one replica while others
// renew it, each renewal reading the record, refusing a revoked one and
// writing it back with a new serial: the revocation must survive every
// interleaving.
func testClusterRevokeRace(t *testing.T, newStore Factory) {
	ctx := ctxFor(t)
	a, b := newStore(t), newStore(t)
	for trial := range 5 {
		name := fmt.Sprintf("race-%d", trial)
		_, err := store.UpdateCluster(ctx, a, name, func(c *store.Cluster, _ bool) error { return nil })
		must(t, "create", err)
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Go(func() {
				for j := range 10 {
					_, _ = store.UpdateCluster(ctx, b, name, func(c *store.Cluster, found bool) error {
						if !found || c.Revoked {
							return errors.New("revoked")
						}
						c.Serials = append(c.Serials, fmt.Sprintf("%d-%d", i, j))
						return nil
					})
				}
			})
		}
		wg.Go(func() {
			_, err := store.UpdateCluster(ctx, a, name, func(c *store.Cluster, _ bool) error {
				c.Revoked, c.Serials = true, nil
				return nil
			})
			must(t, "revoke", err)
		})
		wg.Wait()
		got, err := a.GetCluster(ctx, name)
		must(t, "GetCluster", err)
		if !got.Revoked || len(got.Serials) != 0 {
			t.Fatalf("trial %d: after a revocation racing renewals: revoked=%v serials=%v", trial, got.Revoked, got.Serials)
		}
	}
}

func testClusterNotFound(t *testing.T, newStore Factory) {
	ctx, s := ctxFor(t), newStore(t)
	if _, err := s.GetCluster(ctx, "missing"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf(`GetCluster("missing"): err = %v, want ErrNotFound`, err)
	}
	must(t, "DeleteCluster(missing)", s.DeleteCluster(ctx, "missing"))
	must(t, "PutCluster", s.PutCluster(ctx, sampleCluster("gone")))
	must(t, "DeleteCluster", s.DeleteCluster(ctx, "gone"))
	if _, err := s.GetCluster(ctx, "gone"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf(`GetCluster("gone") after delete: err = %v, want ErrNotFound`, err)
	}
}

func testListClustersSorted(t *testing.T, newStore Factory) {
	ctx, s := ctxFor(t), newStore(t)
	got, err := s.ListClusters(ctx)
	must(t, "ListClusters", err)
	if got == nil || len(got) != 0 {
		t.Fatalf("ListClusters on an empty store = %v, want an empty slice", got)
	}
	for _, name := range []string{"zulu", "alpha", "mike", "bravo", "alpha-2"} {
		must(t, "PutCluster", s.PutCluster(ctx, store.Cluster{Name: name, Replica: "r"}))
	}
	must(t, "DeleteCluster", s.DeleteCluster(ctx, "mike"))
	got, err = s.ListClusters(ctx)
	must(t, "ListClusters", err)
	var names []string
	for _, c := range got {
		names = append(names, c.Name)
	}
	if diff := cmp.Diff([]string{"alpha", "alpha-2", "bravo", "zulu"}, names); diff != "" {
		t.Fatalf("ListClusters names (-want +got):\n%s", diff)
	}
}

func testClusterCopies(t *testing.T, newStore Factory) {
	ctx, s := ctxFor(t), newStore(t)
	c := sampleCluster("east")
	must(t, "PutCluster", s.PutCluster(ctx, c))
	c.Serials[0] = "changed by caller"
	c.TokenHash[0] = 0xaa
	c.Labels["region"] = "changed by caller"
	got, err := s.GetCluster(ctx, "east")
	must(t, "GetCluster", err)
	got.Serials[1] = "changed again"
	got.Labels["region"] = "changed again"
	again, err := s.GetCluster(ctx, "east")
	must(t, "GetCluster", err)
	if diff := cmp.Diff(sampleCluster("east"), again, clusterCmp...); diff != "" {
		t.Fatalf("stored record changed through a caller's slices (-want +got):\n%s", diff)
	}
}

func testCA(t *testing.T, newStore Factory) {
	ctx, s := ctxFor(t), newStore(t)
	if _, _, err := s.GetCA(ctx); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetCA on an empty store: err = %v, want ErrNotFound", err)
	}
	cert := []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
	key := []byte("-----BEGIN PRIVATE KEY-----\nMC4C\n-----END PRIVATE KEY-----\n")
	must(t, "PutCA", s.PutCA(ctx, cert, key))
	gotCert, gotKey, err := s.GetCA(ctx)
	must(t, "GetCA", err)
	if string(gotCert) != string(cert) || string(gotKey) != string(key) {
		t.Fatalf("GetCA = %q, %q; want %q, %q", gotCert, gotKey, cert, key)
	}
	cert2 := append([]byte("rotated "), cert...)
	must(t, "PutCA(replace)", s.PutCA(ctx, cert2, key))
	gotCert, _, err = s.GetCA(ctx)
	must(t, "GetCA", err)
	if string(gotCert) != string(cert2) {
		t.Fatalf("GetCA after replace = %q, want %q", gotCert, cert2)
	}
}

func testTrust(t *testing.T, newStore Factory) {
	ctx, s := ctxFor(t), newStore(t)
	if _, err := s.GetTrust(ctx, "default/fleet"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetTrust on an empty store: err = %v, want ErrNotFound", err)
	}
	must(t, "PutTrust", s.PutTrust(ctx, store.TrustRecord{Name: "default/fleet", Data: []byte("one"), Version: 4}))
	must(t, "PutTrust(other)", s.PutTrust(ctx, store.TrustRecord{Name: "report/east", Data: []byte("two")}))
	must(t, "PutTrust(replace)", s.PutTrust(ctx, store.TrustRecord{Name: "default/fleet", Data: []byte("three"), Version: 7}))
	want := map[string]store.TrustRecord{
		"default/fleet": {Name: "default/fleet", Data: []byte("three"), Version: 7},
		"report/east":   {Name: "report/east", Data: []byte("two")},
	}
	for name, want := range want {
		got, err := s.GetTrust(ctx, name)
		must(t, "GetTrust", err)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("GetTrust(%q) (-want +got):\n%s", name, diff)
		}
	}
	must(t, "DeleteTrust", s.DeleteTrust(ctx, "report/east"))
	must(t, "DeleteTrust(missing)", s.DeleteTrust(ctx, "report/east"))
	if _, err := s.GetTrust(ctx, "report/east"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetTrust after DeleteTrust: err = %v, want ErrNotFound", err)
	}
	if err := s.PutTrust(ctx, store.TrustRecord{Name: "default/empty"}); err == nil {
		t.Error("PutTrust with no data succeeded")
	}
}

func testTrustCompareAndPut(t *testing.T, newStore Factory) {
	ctx, s := ctxFor(t), newStore(t)
	r := store.TrustRecord{Name: "default/fleet", Data: []byte("root-1")}
	if _, err := s.CompareAndPutTrust(ctx, store.TrustRecord{Name: r.Name, Data: r.Data, Version: 3}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("CompareAndPutTrust(version 3) of a missing record: err = %v, want ErrConflict", err)
	}
	stored, err := s.CompareAndPutTrust(ctx, r)
	must(t, "CompareAndPutTrust(create)", err)
	if stored.Version != 1 {
		t.Fatalf("created record has version %d, want 1", stored.Version)
	}
	if _, err := s.CompareAndPutTrust(ctx, store.TrustRecord{Name: r.Name, Data: []byte("root-2")}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("CompareAndPutTrust(version 0) over version 1: err = %v, want ErrConflict", err)
	}
	stored.Data = []byte("root-3")
	stored, err = s.CompareAndPutTrust(ctx, stored)
	must(t, "CompareAndPutTrust(update)", err)
	got, err := s.GetTrust(ctx, r.Name)
	must(t, "GetTrust", err)
	if want := (store.TrustRecord{Name: r.Name, Data: []byte("root-3"), Version: 2}); !cmp.Equal(want, got) || stored.Version != 2 {
		t.Fatalf("after update: stored %+v, read %+v; want %+v", stored, got, want)
	}
}

// testRolloutCompareAndPut checks the rollout records' compare-and-set,
// and that two replicas that read the same version cannot both take the
// next step: the second one's write conflicts, and it reads the first's.
func testRolloutCompareAndPut(t *testing.T, newStore Factory) {
	ctx, a, b := ctxFor(t), newStore(t), newStore(t)
	if _, err := a.GetRollout(ctx, "fleet"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetRollout on an empty store: err = %v, want ErrNotFound", err)
	}
	if _, err := a.CompareAndPutRollout(ctx, store.RolloutRecord{Name: "fleet", Data: []byte("x"), Version: 2}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("CompareAndPutRollout(version 2) of a missing record: err = %v, want ErrConflict", err)
	}
	stored, err := a.CompareAndPutRollout(ctx, store.RolloutRecord{Name: "fleet", Data: []byte("stage 0")})
	must(t, "CompareAndPutRollout(create)", err)
	if stored.Version != 1 {
		t.Fatalf("created record has version %d, want 1", stored.Version)
	}
	readA, err := a.GetRollout(ctx, "fleet")
	must(t, "GetRollout(a)", err)
	readB, err := b.GetRollout(ctx, "fleet")
	must(t, "GetRollout(b)", err)
	readA.Data, readB.Data = []byte("stage 1 by a"), []byte("stage 1 by b")
	_, err = a.CompareAndPutRollout(ctx, readA)
	must(t, "CompareAndPutRollout(a)", err)
	if _, err := b.CompareAndPutRollout(ctx, readB); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second writer at the same version: err = %v, want ErrConflict", err)
	}
	got, err := b.GetRollout(ctx, "fleet")
	must(t, "GetRollout(b)", err)
	if want := (store.RolloutRecord{Name: "fleet", Data: []byte("stage 1 by a"), Version: 2}); !cmp.Equal(want, got) {
		t.Fatalf("after the race b reads %+v, want %+v", got, want)
	}
	must(t, "DeleteRollout", a.DeleteRollout(ctx, "fleet"))
	if _, err := b.GetRollout(ctx, "fleet"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetRollout after delete: err = %v, want ErrNotFound", err)
	}
}

// testTrustRace has replicas race to create and then to replace one trust
// record, each reading it and writing its own data at the version it read,
// as server replicas starting the same root rotation do: exactly one writer
// wins each round, and every replica reads the winner's data.
func testTrustRace(t *testing.T, newStore Factory) {
	ctx := ctxFor(t)
	replicas := []store.Store{newStore(t), newStore(t), newStore(t)}
	for round := range 3 {
		var (
			wg, read sync.WaitGroup
			mu       sync.Mutex
			winners  []string
		)
		start := make(chan struct{})
		for i, s := range replicas {
			for j := range 4 {
				read.Add(1)
				wg.Go(func() {
					var version uint64
					if cur, err := s.GetTrust(ctx, "default/fleet"); err == nil {
						version = cur.Version
					}
					read.Done()
					<-start
					data := fmt.Sprintf("round %d writer %d-%d", round, i, j)
					_, err := s.CompareAndPutTrust(ctx, store.TrustRecord{Name: "default/fleet", Data: []byte(data), Version: version})
					switch {
					case err == nil:
						mu.Lock()
						winners = append(winners, data)
						mu.Unlock()
					case !errors.Is(err, store.ErrConflict):
						t.Errorf("CompareAndPutTrust: %v", err)
					}
				})
			}
		}
		read.Wait() // every writer read the same version
		close(start)
		wg.Wait()
		if len(winners) != 1 {
			t.Fatalf("round %d: %d writers won (%q), want exactly one", round, len(winners), winners)
		}
		for i, s := range replicas {
			got, err := s.GetTrust(ctx, "default/fleet")
			must(t, "GetTrust", err)
			if string(got.Data) != winners[0] || got.Version != uint64(round+1) {
				t.Errorf("round %d: replica %d reads %q at version %d, want the winner %q at version %d", round, i, got.Data, got.Version, winners[0], round+1)
			}
		}
	}
}

// next returns the next event that is not a Resync, failing the test if
// none comes in time or the channel closes.
func next(t *testing.T, events <-chan store.Event) store.Event {
	t.Helper()
	timer := time.NewTimer(eventTimeout)
	defer timer.Stop()
	for {
		select {
		case e, ok := <-events:
			if !ok {
				t.Fatal("Watch channel closed while waiting for an event")
			}
			if e.Kind == store.EventResync {
				continue
			}
			return e
		case <-timer.C:
			t.Fatalf("no Watch event within %v", eventTimeout)
		}
	}
}

func testWatchOtherReplica(t *testing.T, newStore Factory) {
	ctx := ctxFor(t)
	a, b := newStore(t), newStore(t)
	events, err := a.Watch(ctx)
	must(t, "Watch", err)

	// a's own writes are not events for a: the first event must be b's.
	must(t, "a.PutInput", a.PutInput(ctx, "own", Snap(t, 1, "own", 1)))
	must(t, "a.PutCluster", a.PutCluster(ctx, store.Cluster{Name: "own"}))

	want := Snap(t, 4, "from-b", 3)
	must(t, "b.PutInput", b.PutInput(ctx, "east", want))
	e := next(t, events)
	if e.Kind != store.EventInput || e.Cluster != "east" || e.Version != 4 || e.Deleted || e.Replica == "" {
		t.Fatalf("event after b.PutInput = %+v, want input east version 4 with b's replica ID", e)
	}
	got, err := a.GetInput(ctx, "east")
	must(t, "a.GetInput after the event", err)
	sameSnap(t, "a.GetInput after the event", got, want)

	// An ignored write is no event: the next one is the output.
	must(t, "b.PutInput(older)", b.PutInput(ctx, "east", Snap(t, 2, "older", 1)))
	must(t, "b.PutInput(same)", b.PutInput(ctx, "east", want))
	must(t, "b.PutOutput", b.PutOutput(ctx, "east", "istio", Snap(t, 6, "out", 1)))
	e = next(t, events)
	if e.Kind != store.EventOutput || e.Cluster != "east" || e.Backend != "istio" || e.Version != 6 {
		t.Fatalf("event after b.PutOutput = %+v, want output east/istio version 6", e)
	}
	must(t, "b.PutCluster", b.PutCluster(ctx, store.Cluster{Name: "east", Replica: "b"}))
	e = next(t, events)
	if e.Kind != store.EventCluster || e.Cluster != "east" || e.Deleted {
		t.Fatalf("event after b.PutCluster = %+v, want cluster east", e)
	}
	must(t, "b.DeleteInput", b.DeleteInput(ctx, "east"))
	e = next(t, events)
	if e.Kind != store.EventInput || e.Cluster != "east" || !e.Deleted {
		t.Fatalf("event after b.DeleteInput = %+v, want input east deleted", e)
	}
	if _, err := a.GetInput(ctx, "east"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a.GetInput after the delete event: err = %v, want ErrNotFound", err)
	}
	must(t, "b.DeleteOutputs", b.DeleteOutputs(ctx, "east"))
	e = next(t, events)
	if e.Kind != store.EventOutput || e.Cluster != "east" || e.Backend != "" || !e.Deleted {
		t.Fatalf("event after b.DeleteOutputs = %+v, want outputs of east deleted", e)
	}
	must(t, "b.DeleteCluster", b.DeleteCluster(ctx, "east"))
	e = next(t, events)
	if e.Kind != store.EventCluster || e.Cluster != "east" || !e.Deleted {
		t.Fatalf("event after b.DeleteCluster = %+v, want cluster east deleted", e)
	}
}

func testWatchMultipleWatchers(t *testing.T, newStore Factory) {
	ctx := ctxFor(t)
	a, b := newStore(t), newStore(t)
	w1, err := a.Watch(ctx)
	must(t, "Watch", err)
	w2, err := a.Watch(ctx)
	must(t, "Watch", err)
	for v := uint64(1); v <= 3; v++ {
		must(t, "b.PutInput", b.PutInput(ctx, "c", Snap(t, v, fmt.Sprint(v), 1)))
	}
	for i, w := range []<-chan store.Event{w1, w2} {
		for v := uint64(1); v <= 3; v++ {
			e := next(t, w)
			if e.Kind != store.EventInput || e.Cluster != "c" {
				t.Fatalf("watcher %d: event %+v, want input c", i+1, e)
			}
			// A WriteThrough may coalesce; versions never go back.
			if e.Version == 3 {
				break
			}
		}
	}
}

func testWatchEndsWithContext(t *testing.T, newStore Factory) {
	s := newStore(t)
	ctx, cancel := context.WithCancel(t.Context())
	events, err := s.Watch(ctx)
	must(t, "Watch", err)
	cancel()
	timer := time.NewTimer(eventTimeout)
	defer timer.Stop()
	for {
		select {
		case _, ok := <-events:
			if !ok {
				return
			}
		case <-timer.C:
			t.Fatalf("Watch channel still open %v after its context ended", eventTimeout)
		}
	}
}

func testReplicasShareData(t *testing.T, newStore Factory) {
	ctx := ctxFor(t)
	a, b := newStore(t), newStore(t)
	want := Snap(t, 3, "shared", 2)
	must(t, "a.PutInput", a.PutInput(ctx, "east", want))
	must(t, "a.PutCluster", a.PutCluster(ctx, sampleCluster("east")))
	must(t, "a.PutCA", a.PutCA(ctx, []byte("cert"), []byte("key")))
	// b may be a write-through store that learns of a's writes
	// asynchronously; wait for them with a deadline.
	deadline := time.Now().Add(eventTimeout)
	for {
		got, err := b.GetInput(ctx, "east")
		_, cerr := b.GetCluster(ctx, "east")
		if err == nil && cerr == nil {
			sameSnap(t, "b.GetInput", got, want)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("b does not see a's writes after %v: GetInput: %v, GetCluster: %v", eventTimeout, err, cerr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func testPing(t *testing.T, newStore Factory) {
	must(t, "Ping", newStore(t).Ping(ctxFor(t)))
}

func testClosed(t *testing.T, newStore Factory) {
	ctx, s := ctxFor(t), newStore(t)
	must(t, "PutInput", s.PutInput(ctx, "c", Snap(t, 1, "x", 1)))
	events, err := s.Watch(ctx)
	must(t, "Watch", err)
	must(t, "Close", s.Close())
	must(t, "second Close", s.Close())
	if _, err := s.GetInput(ctx, "c"); !errors.Is(err, store.ErrClosed) {
		t.Errorf("GetInput after Close: err = %v, want ErrClosed", err)
	}
	if err := s.PutInput(ctx, "c", Snap(t, 2, "x", 1)); !errors.Is(err, store.ErrClosed) {
		t.Errorf("PutInput after Close: err = %v, want ErrClosed", err)
	}
	if _, err := s.Watch(ctx); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Watch after Close: err = %v, want ErrClosed", err)
	}
	timer := time.NewTimer(eventTimeout)
	defer timer.Stop()
	for {
		select {
		case _, ok := <-events:
			if !ok {
				return
			}
		case <-timer.C:
			t.Fatalf("Watch channel still open %v after Close", eventTimeout)
		}
	}
}
