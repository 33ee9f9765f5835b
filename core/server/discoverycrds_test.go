package server

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	discoveryapi "github.com/meshrelay/meshrelay/api/discovery/v1alpha1"
	"github.com/meshrelay/meshrelay/core/agent/discovery"
	"github.com/meshrelay/meshrelay/core/store"
	"github.com/meshrelay/meshrelay/core/store/memory"
	"github.com/meshrelay/meshrelay/internal/testenv"
	"github.com/meshrelay/meshrelay/internal/testutil"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"
)

// With a discovery writer, the fleet's Meshes, Workloads and Destinations
// appear as discovery.meshrelay.io custom resources in the management
// cluster (a real kube-apiserver with the generated CRDs, which validate
// them), follow the agent's changes, and are deleted with their cluster.
func TestDiscoveryCRDs(t *testing.T) {
	k := testenv.StartKube(t)
	k.InstallCRDs(t, "deploy/crds")
	createAll(t, k, kubeFleet)
	ns := k.CreateNamespace(t)
	writer, err := NewKubeDiscovery(k.Config(), KubeDiscoveryOptions{Namespace: ns, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ts := startServerDeps(t, nil, "", func(d *Deps) { d.Discovery = writer })
	src, err := discovery.NewKube(k.Config(), discovery.KubeOptions{Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	startAgentSource(t, ts, "west", ts.register("west"), src)
	dyn := k.Dynamic(t)
	ctx := context.Background()
	names := func(kind string) []string {
		list, err := dyn.Resource(discoveryKinds[kind]).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, o := range list.Items {
			out = append(out, o.GetName())
		}
		slices.Sort(out)
		return out
	}
	testutil.Eventually(t, "the discovery objects", func() bool {
		return slices.Contains(names("Workload"), "reviews-v1.deployment.bookinfo.west") &&
			slices.Contains(names("Destination"), "reviews.bookinfo.west") && slices.Equal(names("Mesh"), []string{"istio.west"})
	})
	w, err := dyn.Resource(discoveryKinds["Workload"]).Namespace(ns).Get(ctx, "reviews-v1.deployment.bookinfo.west", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sa, _, _ := unstructured.NestedString(w.Object, "spec", "serviceAccount")
	locs, _, _ := unstructured.NestedStringSlice(w.Object, "spec", "localities")
	if sa != "bookinfo-reviews" || !slices.Equal(locs, []string{"eu-west-1/eu-west-1b"}) ||
		w.GetLabels()[discoveryapi.ClusterLabel] != "west" || w.GetLabels()[discoveryapi.NameLabel] != "reviews-v1" {
		t.Errorf("workload reviews-v1: spec.serviceAccount %q, localities %v, labels %v", sa, locs, w.GetLabels())
	}

	// A Deployment deleted in the workload cluster goes from the management cluster.
	if err := dyn.Resource(kubeResources["Deployment"]).Namespace("bookinfo").Delete(ctx, "reviews-v2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "reviews-v2's Workload to go", func() bool {
		return !slices.Contains(names("Workload"), "reviews-v2.deployment.bookinfo.west")
	})

	// Deregistering the cluster deletes everything derived from it.
	admin := relayv1.NewAdminClient(ts.dial(nil))
	if _, err := admin.DeregisterCluster(ts.adminCtx(), &relayv1.DeregisterClusterRequest{Cluster: "west"}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "west's discovery objects to go", func() bool {
		return len(names("Workload"))+len(names("Destination"))+len(names("Mesh")) == 0
	})
}

// Names stay unique across the fleet and within Kubernetes' limit.
func TestCRName(t *testing.T) {
	long := strings.Repeat("a", 253)
	for _, c := range []struct {
		parts []string
		want  string
	}{
		{[]string{"reviews", "bookinfo", "west"}, "reviews.bookinfo.west"},
		{[]string{"reviews-v1", "deployment", "bookinfo", "west"}, "reviews-v1.deployment.bookinfo.west"},
	} {
		if got := crName(c.parts...); got != c.want {
			t.Errorf("crName(%v) = %q, want %q", c.parts, got, c.want)
		}
	}
	a, b := crName(long, "ns", "east"), crName(long, "ns", "west")
	if a == b || len(a) > 253 || len(validation.IsDNS1123Subdomain(a)) > 0 {
		t.Errorf("long names: %q and %q (%d bytes): %v", a, b, len(a), validation.IsDNS1123Subdomain(a))
	}
}

// Replicas sharing a store write the discovery objects one at a time,
// under a lease in the store: here into a real kube-apiserver (see
// testOneWriter).
func TestDiscoveryCRDsOneWriter(t *testing.T) {
	k := testenv.StartKube(t)
	k.InstallCRDs(t, "deploy/crds")
	ns := k.CreateNamespace(t)
	dyn := k.Dynamic(t)
	testOneWriter(t, func(string) DiscoveryWriter {
		w, err := NewKubeDiscovery(k.Config(), KubeDiscoveryOptions{Namespace: ns, LeaseTTL: 3 * time.Second, Logger: discardLogger()})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}, func() []string {
		list, err := dyn.Resource(discoveryKinds["Destination"]).Namespace(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, o := range list.Items {
			out = append(out, o.GetName())
		}
		slices.Sort(out)
		return out
	})
}

// Replicas sharing a store take turns at writing into a destination they
// share, which records which replica wrote what (see testOneWriter).
func TestDiscoveryOneWriter(t *testing.T) {
	dest := &sharedDestination{objects: map[string]string{}}
	testOneWriter(t, func(id string) DiscoveryWriter { return destinationWriter{dest: dest, id: id} }, dest.names)
}

// testOneWriter runs replicas over a real Redis, with the writers newWriter
// returns writing where destinations reads. A replica still loading (its
// fleet empty) does not delete what the writing replica wrote, and when
// the writing replica dies another takes over within the lease's time.
func testOneWriter(t *testing.T, newWriter func(replica string) DiscoveryWriter, destinations func() []string) {
	r := testenv.StartRedis(t)
	ctx := context.Background()
	withWriter := func(replica string) func(*Deps) {
		return func(d *Deps) { d.Discovery = newWriter(replica) }
	}

	a := startServerDeps(t, redisStore(t, r, "a"), "", withWriter("a"), withID("a"))
	west := startAgent(t, a, "west", a.register("west"))
	west.src.set(t, "reviews")
	want := []string{"reviews.default.west"}
	testutil.Eventually(t, "west's Destination", func() bool { return slices.Equal(destinations(), want) })

	// A replica still loading, whose fleet is empty, takes turns with a
	// through the same Redis.
	certPEM, keyPEM, err := rawRedis(t, r).GetCA(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mem := memory.New()
	if err := mem.PutCA(ctx, certPEM, keyPEM); err != nil {
		t.Fatal(err)
	}
	loading := startServerDeps(t, loadingStore{Store: mem, Leases: rawRedis(t, r)}, "", withWriter("loading"), withID("loading"))
	testutil.Eventually(t, "the loading replica to try for the turn twice", func() bool { return loading.discoveryAttempts() >= 2 })
	if got := destinations(); !slices.Equal(got, want) {
		t.Fatalf("with a replica still loading, the Destinations are %v, want %v", got, want)
	}
	loading.stop()

	// b, loaded from Redis, serves an agent of its own.
	b := startServerDeps(t, redisStore(t, r, "b"), "", withWriter("b"), withID("b"))
	east := startAgent(t, b, "east", b.register("east"))
	east.src.set(t, "details")
	want = []string{"details.default.east", "reviews.default.west"}
	testutil.Eventually(t, "every Destination", func() bool { return slices.Equal(destinations(), want) })

	// a dies without a word: its store goes, then the rest of it.
	a.store.Close()
	a.stop()
	east.src.set(t, "details", "productpage")
	want = []string{"details.default.east", "productpage.default.east", "reviews.default.west"}
	testutil.Eventually(t, "b to take over and write east's new Destination", func() bool { return slices.Equal(destinations(), want) })
}

// loadingStore is the store of a replica that has not read its fleet
// yet, sharing the leases of the others.
type loadingStore struct {
	store.Store
	store.Leases
}

func (l loadingStore) AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (store.Lease, error) {
	return l.Leases.AcquireLease(ctx, name, holder, ttl)
}

func (l loadingStore) ReleaseLease(ctx context.Context, name, holder string) error {
	return l.Leases.ReleaseLease(ctx, name, holder)
}

// sharedDestination holds the Destinations replicas write into it, by name.
type sharedDestination struct {
	mu      sync.Mutex
	objects map[string]string // name → replica that wrote it
}

func (d *sharedDestination) names() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Sorted(maps.Keys(d.objects))
}

// destinationWriter is one replica's DiscoveryWriter into a
// sharedDestination, named as KubeDiscovery names Destinations.
type destinationWriter struct {
	dest *sharedDestination
	id   string
}

func (w destinationWriter) LeaseTTL() time.Duration { return 3 * time.Second }

func (w destinationWriter) Write(_ context.Context, req DiscoveryWrite) error {
	desired := map[string]bool{}
	for _, c := range req.Fleet.Clusters {
		for _, d := range c.Destinations {
			desired[crName(d.Name, d.Namespace, c.Name)] = true
		}
	}
	w.dest.mu.Lock()
	defer w.dest.mu.Unlock()
	for name := range desired {
		w.dest.objects[name] = w.id
	}
	for name := range w.dest.objects {
		if !desired[name] && req.Prune {
			delete(w.dest.objects, name)
		}
	}
	return nil
}

// discoveryAttempts returns how often the replica tried to take or renew
// its turn at writing the discovery objects.
func (s *Server) discoveryAttempts() int {
	s.mu.Lock()
	turn := s.turn
	s.mu.Unlock()
	if turn == nil {
		return 0
	}
	turn.mu.Lock()
	defer turn.mu.Unlock()
	return turn.attempts
}
