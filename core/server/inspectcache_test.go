package server

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/engine"
	"github.com/meshrelay/meshrelay/core/store"
	"github.com/meshrelay/meshrelay/core/store/memory"
	"github.com/meshrelay/meshrelay/internal/bench"
	"github.com/meshrelay/meshrelay/internal/testutil"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
)

// putServiceInput stores an input of one Service for cluster, as its
// agent's stream would, and tells the server.
func putServiceInput(t *testing.T, ts *testServer, st store.Store, cluster, service string) {
	t.Helper()
	ctx := t.Context()
	if _, err := store.UpdateCluster(ctx, st, cluster, func(*store.Cluster, bool) error { return nil }); err != nil {
		t.Fatal(err)
	}
	svc, err := snapshot.FromJSON(fmt.Appendf(nil, `{"apiVersion":"v1","kind":"Service","metadata":{"name":%q,"namespace":"default"},"spec":{"ports":[{"port":80}]}}`, service))
	if err != nil {
		t.Fatal(err)
	}
	in, err := snapshot.New(1, []snapshot.Resource{svc})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.PutInput(ctx, cluster, in); err != nil {
		t.Fatal(err)
	}
	ts.handleStoreEvent(ctx, store.Event{Kind: store.EventInput, Cluster: cluster, Replica: "b"})
}

// Once read, the discovery objects are derived as inputs arrive, not
// when someone next lists them: at a thousand clusters deriving them all
// takes seconds, which that List would wait.
func TestCatalogDerivedBeforeTheNextList(t *testing.T) {
	shared := memory.New()
	ts := startServer(t, shared.Replica("a"), "", withID("a"), func(o *Options) { o.Targets = TargetsAll })
	if _, err := ts.currentCatalog(t.Context()); err != nil {
		t.Fatal(err)
	}
	other := shared.Replica("b")
	for _, c := range []string{"east", "west"} {
		putServiceInput(t, ts, other, c, "web")
	}
	testutil.Eventually(t, "both clusters' discovery objects derived", func() bool { return ts.catalog.Derived() == 2 })
}

// Delivery indexes each output it writes, so that the status and the
// descriptions that follow find it decoded.
func TestDeliveredOutputsAreIndexed(t *testing.T) {
	shared := memory.New()
	ts := startServer(t, shared.Replica("a"), "", withID("a"), func(o *Options) { o.Targets = TargetsAll })
	other := shared.Replica("b")
	putServiceInput(t, ts, other, "west", "web")
	testutil.Eventually(t, "west's output indexed as delivered", func() bool {
		out, err := other.GetOutput(t.Context(), "west", "test")
		if err != nil {
			return false
		}
		ts.outputIndex.mu.Lock()
		defer ts.outputIndex.mu.Unlock()
		o := ts.outputIndex.outputs[engine.OutputKey{Cluster: "west", Backend: "test"}]
		return o != nil && o.set.Hash() == out.Hash() && o.set.Len() == 1
	})
}

// A policy's outline, read from the output index, says what its full
// description says of it, cluster by cluster, without the outputs: here
// with one cluster's output applied, one's with an apply error on a
// resource of the policy, and the others' pending.
func TestDescribePolicyOutlineMatchesDescription(t *testing.T) {
	s, clusters := benchFleet(t, t.Context(), t.TempDir(), 4, 3)
	ctx := t.Context()
	req := &relayv1.DescribeRequest{Kind: "AccessPolicy", Namespace: bench.Namespace, Name: "bench-access"}
	full, err := s.DescribePolicy(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if len(full.GetOutputs()) == 0 {
		t.Fatal("the policy has no outputs")
	}
	applied, failed := full.GetOutputs()[0], full.GetOutputs()[len(full.GetOutputs())-1]
	if applied.GetCluster() == failed.GetCluster() || applied.GetCluster() != clusters[0].Name {
		t.Fatalf("outputs of %s and %s, want the first and the last cluster's", applied.GetCluster(), failed.GetCluster())
	}
	for _, o := range []*relayv1.OutputResource{applied, failed} {
		set, err := s.deps.Store.GetOutput(ctx, o.GetCluster(), o.GetBackend())
		if err != nil {
			t.Fatal(err)
		}
		ack := ackState{hash: set.Hash()}
		if o == failed {
			for r := range set.All() {
				if r.ID.Kind == o.GetKind() && r.ID.Namespace == o.GetNamespace() && r.ID.Name == o.GetName() {
					ack.errors = map[snapshot.ID]string{r.ID: "denied"}
				}
			}
		}
		s.mu.Lock()
		s.acks[engine.OutputKey{Cluster: o.GetCluster(), Backend: o.GetBackend()}] = ack
		s.mu.Unlock()
	}
	full, err = s.DescribePolicy(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	outline, err := s.DescribePolicy(ctx, &relayv1.DescribeRequest{Kind: req.Kind, Namespace: req.Namespace, Name: req.Name, Outline: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(outline.GetOutputs()) != 0 {
		t.Errorf("the outline has %d outputs, want none", len(outline.GetOutputs()))
	}
	full.Outputs = nil
	if d := cmp.Diff(full, outline, protocmp.Transform()); d != "" {
		t.Errorf("DescribePolicyOutline differs from DescribePolicy (-full +outline):\n%s", d)
	}
	// The description folds its policy alone: to the status GetStatus
	// folds of every policy.
	st, err := s.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(st.GetPolicies(), func(p *relayv1.PolicyStatus) bool { return p.GetName() == req.Name })
	if i < 0 {
		t.Fatalf("GetStatus has no %s", req.Name)
	}
	if d := cmp.Diff(st.GetPolicies()[i], outline.GetStatus(), protocmp.Transform()); d != "" {
		t.Errorf("DescribePolicy's status differs from GetStatus's (-GetStatus +DescribePolicy):\n%s", d)
	}
	if outline.GetStatus().GetState() != "Failed" || len(outline.GetStatus().GetErrors()) != 1 {
		t.Errorf("the policy is %s with errors %q, want Failed with the apply error", outline.GetStatus().GetState(), outline.GetStatus().GetErrors())
	}
	var states []string
	for _, c := range outline.GetClusters() {
		states = append(states, fmt.Sprintf("%s applied=%t pending=%t errors=%d", c.GetCluster(), c.GetApplied(), c.GetPending(), len(c.GetErrors())))
	}
	if len(states) != 4 || !strings.HasSuffix(states[0], "applied=true pending=false errors=0") || !strings.HasSuffix(states[3], "applied=false pending=false errors=1") ||
		!strings.HasSuffix(states[1], "applied=false pending=true errors=0") {
		t.Errorf("clusters: %q, want the first applied, the last failed, the others pending", states)
	}
}

// A page of a policy's outputs holds those of the clusters it names, in
// their order, at most its limit of them, the same as the full
// description's, and the state of those clusters only.
func TestDescribePolicyPage(t *testing.T) {
	s, clusters := benchFleet(t, t.Context(), t.TempDir(), 4, 3)
	ctx := t.Context()
	req := &relayv1.DescribeRequest{Kind: "AccessPolicy", Namespace: bench.Namespace, Name: "bench-access"}
	full, err := s.DescribePolicy(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	of := func(cluster string) []*relayv1.OutputResource {
		var out []*relayv1.OutputResource
		for _, o := range full.GetOutputs() {
			if o.GetCluster() == cluster {
				out = append(out, o)
			}
		}
		return out
	}
	last, first := clusters[3].Name, clusters[0].Name
	both := append(of(last), of(first)...)
	if len(of(last)) < 2 || len(of(first)) < 2 {
		t.Fatalf("%d outputs in %s and %d in %s, want some in each", len(of(last)), last, len(of(first)), first)
	}
	state := func(names ...string) []*relayv1.PolicyCluster {
		var out []*relayv1.PolicyCluster
		for _, n := range names {
			for _, c := range full.GetClusters() {
				if c.GetCluster() == n {
					out = append(out, c)
				}
			}
		}
		return out
	}
	for name, tc := range map[string]struct {
		clusters []string
		limit    int32
		want     []*relayv1.OutputResource
		state    []*relayv1.PolicyCluster
	}{
		"two clusters in their order": {clusters: []string{last, "nowhere", first, last}, want: both, state: state(last, first)},
		"limited":                     {clusters: []string{last, first}, limit: int32(len(of(last)) + 1), want: both[:len(of(last))+1], state: state(last, first)},
		"limited over every cluster":  {limit: 2, want: full.GetOutputs()[:2], state: full.GetClusters()},
	} {
		t.Run(name, func(t *testing.T) {
			page, err := s.DescribePolicy(ctx, &relayv1.DescribeRequest{Kind: req.Kind, Namespace: req.Namespace, Name: req.Name, OutputClusters: tc.clusters, OutputLimit: tc.limit})
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, page.GetOutputs(), protocmp.Transform()); d != "" {
				t.Errorf("outputs (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.state, page.GetClusters(), protocmp.Transform()); d != "" {
				t.Errorf("clusters (-want +got):\n%s", d)
			}
			if d := cmp.Diff(full.GetStatus(), page.GetStatus(), protocmp.Transform()); d != "" {
				t.Errorf("a page's status differs from the policy's, of every cluster (-full +page):\n%s", d)
			}
		})
	}
	if _, err := s.DescribePolicy(ctx, &relayv1.DescribeRequest{Name: req.Name, OutputLimit: -1}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("DescribePolicy with a negative limit: %v, want InvalidArgument", err)
	}
}

// A List arriving while the discovery objects of many clusters are being
// derived answers at once, from those last derived, instead of waiting for
// the derivation: right after start, that of the whole fleet.
func TestListAnswersDuringALargeDerivation(t *testing.T) {
	ts := startServer(t, nil, "")
	putServiceInput(t, ts, ts.store, "west", "web")
	admin := relayv1.NewAdminClient(ts.dial(nil))
	list := func() ([]string, error) {
		resp, err := admin.List(ts.adminCtx(), &relayv1.ListRequest{Kind: KindDestinations})
		var names []string
		for _, d := range resp.GetDestinations() {
			names = append(names, d.GetCluster()+"/"+d.GetName())
		}
		return names, err
	}
	testutil.Eventually(t, "west's destination listed", func() bool {
		names, err := list()
		return err == nil && slices.Equal(names, []string{"west/web"})
	})
	inputs := map[string]*snapshot.Snapshot{}
	for i := range 300 {
		c, err := bench.NewCluster(i, inspectBenchServices)
		if err != nil {
			t.Fatal(err)
		}
		if inputs[c.Name], err = c.Snapshot(); err != nil {
			t.Fatal(err)
		}
	}
	derived := make(chan struct{})
	go func() {
		defer close(derived)
		ts.catalog.Fleet(inputs)
	}()
	// west's (the one the cache held) is dropped first, then the 300 come.
	testutil.Eventually(t, "a derivation of 300 clusters under way", func() bool { return ts.catalog.Derived() >= 2 })
	names, err := list()
	select {
	case <-derived:
		t.Fatal("List answered after the derivation of 300 clusters ended")
	default:
	}
	if err != nil || !slices.Equal(names, []string{"west/web"}) {
		t.Errorf("List during a derivation = %q, %v; want the last derived, west/web", names, err)
	}
	<-derived
}

// The catalog is warmed at most once per interval however many engine
// cycles come, and a List meanwhile still sees the clusters that changed
// since: it derives those few itself.
func TestCatalogWarmedOncePerInterval(t *testing.T) {
	shared := memory.New()
	ts := startServer(t, shared.Replica("a"), "", withID("a"), func(o *Options) {
		o.Targets = TargetsAll
		o.catalogWarmEvery = time.Hour
	})
	if _, err := ts.currentCatalog(t.Context()); err != nil { // a read: warm from now on
		t.Fatal(err)
	}
	other := shared.Replica("b")
	putServiceInput(t, ts, other, "east", "web")
	testutil.Eventually(t, "the first round derived east", func() bool { return ts.catalogRounds.Load() == 1 && ts.catalog.Derived() == 1 })
	names := []string{"c1", "c2", "c3", "c4", "c5"}
	for _, c := range names {
		putServiceInput(t, ts, other, c, "web")
	}
	testutil.Eventually(t, "every cluster's output delivered", func() bool {
		for _, c := range names {
			if _, err := other.GetOutput(t.Context(), c, "test"); err != nil {
				return false
			}
		}
		return true
	})
	if n, d := ts.catalogRounds.Load(), ts.catalog.Derived(); n != 1 || d != 1 {
		t.Errorf("after five more cycles within the interval: %d warm rounds, %d clusters derived; want 1 and 1", n, d)
	}
	fleet, err := ts.currentCatalog(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(fleet.Clusters) != 1+len(names) {
		t.Errorf("a List meanwhile sees %d clusters, want %d", len(fleet.Clusters), 1+len(names))
	}
}

// A catalog nobody reads is not derived after engine cycles, and a read
// after it went cold sees every change, however many clusters changed.
func TestCatalogColdUntilRead(t *testing.T) {
	shared := memory.New()
	ts := startServer(t, shared.Replica("a"), "", withID("a"), func(o *Options) {
		o.Targets = TargetsAll
		o.catalogWarmEvery = time.Millisecond
		o.catalogWarmFor = time.Nanosecond // cold again right after each read
	})
	other := shared.Replica("b")
	delivered := func(clusters ...string) {
		t.Helper()
		testutil.Eventually(t, "every cluster's output delivered", func() bool {
			for _, c := range clusters {
				if _, err := other.GetOutput(t.Context(), c, "test"); err != nil {
					return false
				}
			}
			return true
		})
	}
	putServiceInput(t, ts, other, "east", "web")
	delivered("east")
	if n, d := ts.catalogRounds.Load(), ts.catalog.Derived(); n != 0 || d != 0 {
		t.Errorf("unread: %d warm rounds, %d clusters derived; want none", n, d)
	}
	clusters := func() []string {
		t.Helper()
		fleet, err := ts.currentCatalog(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, c := range fleet.Clusters {
			names = append(names, c.Name)
		}
		return names
	}
	if got := clusters(); !slices.Equal(got, []string{"east"}) {
		t.Errorf("the first read lists %q, want east", got)
	}
	// More clusters than a warm read derives itself change while cold.
	var names []string
	for i := range catalogInline + 1 {
		names = append(names, fmt.Sprintf("c%02d", i))
	}
	for _, c := range names {
		putServiceInput(t, ts, other, c, "web")
	}
	delivered(names...)
	if got, want := clusters(), append(slices.Clone(names), "east"); !slices.Equal(got, want) {
		t.Errorf("a read after %d changes lists %q, want %q", len(names), got, want)
	}
	if n := ts.catalogRounds.Load(); n != 0 {
		t.Errorf("%d warm rounds while the catalog was cold, want none", n)
	}
}
