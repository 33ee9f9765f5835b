package server

import (
	"context"
	"slices"
	"strings"
	"testing"

	discoveryapi "github.com/meshrelay/meshrelay/api/discovery/v1alpha1"
	"github.com/meshrelay/meshrelay/core/agent/discovery"
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
	writer, err := NewKubeDiscovery(k.Config(), ns, discardLogger())
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
