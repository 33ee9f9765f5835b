package server

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/meshrelay/meshrelay/core/pluginhost"
	"github.com/meshrelay/meshrelay/internal/testenv"
	"github.com/meshrelay/meshrelay/internal/testutil"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// labelSpy is the echo translator that also keeps the labels the last
// view gave each cluster, as a plugin's session would hold them.
type labelSpy struct {
	*echo
	mu     sync.Mutex
	labels map[string]map[string]string
}

func newLabelSpy() *labelSpy {
	return &labelSpy{echo: newEcho(), labels: map[string]map[string]string{}}
}

func (l *labelSpy) Translate(ctx context.Context, v pluginhost.View) (pluginhost.Result, error) {
	l.mu.Lock()
	l.labels = map[string]map[string]string{}
	for name, c := range v.Clusters {
		l.labels[name] = maps.Clone(c.Labels)
	}
	l.mu.Unlock()
	return l.echo.Translate(ctx, v)
}

func (l *labelSpy) of(cluster string) map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.labels[cluster]
}

func withTranslator(tr pluginhost.Translator) func(*Deps) {
	return func(d *Deps) { d.Translators = []pluginhost.Translator{tr} }
}

// A cluster's labels are set at registration and changed through the
// admin API on one replica; they are kept in Redis, versioned, read by
// another replica's List with a label selector, and handed to both
// replicas' translators with the cluster's inputs.
func TestClusterLabelsRoundTripRedis(t *testing.T) {
	r := testenv.StartRedis(t)
	raw := rawRedis(t, r)
	spy1, spy2 := newLabelSpy(), newLabelSpy()
	ts1 := startServerDeps(t, redisStore(t, r, "r1"), "", withTranslator(spy1), withID("r1"))
	testutil.Eventually(t, "the CA to reach Redis", func() bool {
		_, _, err := raw.GetCA(context.Background())
		return err == nil
	})
	ts2 := startServerDeps(t, redisStore(t, r, "r2"), "", withTranslator(spy2), withID("r2"))
	admin1 := relayv1.NewAdminClient(ts1.dial(nil))
	admin2 := relayv1.NewAdminClient(ts2.dial(nil))

	tok := ts1.registerWith(&relayv1.RegisterClusterRequest{Cluster: "east", Labels: map[string]string{"region": "eu-west", "env": "prod"}})
	ts1.register("west")
	east := startAgent(t, ts1, "east", tok)
	east.src.set(t, "a")
	want := map[string]string{"region": "eu-west", "env": "prod"}
	testutil.Eventually(t, "replica 1's translator to get east's labels", func() bool { return maps.Equal(spy1.of("east"), want) })
	testutil.Eventually(t, "replica 2's translator to get east's labels", func() bool { return maps.Equal(spy2.of("east"), want) })

	before, err := raw.GetCluster(context.Background(), "east")
	if err != nil {
		t.Fatal(err)
	}
	got, err := admin1.LabelCluster(ts1.adminCtx(), &relayv1.LabelClusterRequest{Cluster: "east", Set: map[string]string{"tier": "gold"}, Remove: []string{"env"}})
	if err != nil {
		t.Fatalf("LabelCluster: %v", err)
	}
	want = map[string]string{"region": "eu-west", "tier": "gold"}
	if diff := cmp.Diff(want, got.GetLabels()); diff != "" {
		t.Errorf("LabelCluster's answer (-want +got):\n%s", diff)
	}
	stored, err := raw.GetCluster(context.Background(), "east")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, stored.Labels); diff != "" || stored.Version != before.Version+1 || got.GetRegistryVersion() != stored.Version {
		t.Errorf("Redis holds labels %v at version %d (answer: %d), want %v at version %d:\n%s", stored.Labels, stored.Version, got.GetRegistryVersion(), want, before.Version+1, diff)
	}
	testutil.Eventually(t, "replica 2's translator to get the new labels", func() bool { return maps.Equal(spy2.of("east"), want) })
	testutil.Eventually(t, "replica 1's translator to get the new labels", func() bool { return maps.Equal(spy1.of("east"), want) })

	testutil.Eventually(t, "replica 2 to list east by its new label", func() bool {
		list, err := admin2.List(ts2.adminCtx(), &relayv1.ListRequest{Kind: "clusters", LabelSelector: "tier=gold,region in (eu-west)"})
		return err == nil && len(list.GetClusters()) == 1 && list.GetClusters()[0].GetName() == "east" && maps.Equal(list.GetClusters()[0].GetLabels(), want)
	})
	list, err := admin2.List(ts2.adminCtx(), &relayv1.ListRequest{Kind: "clusters", LabelSelector: "!tier"})
	if err != nil || len(list.GetClusters()) != 1 || list.GetClusters()[0].GetName() != "west" {
		t.Errorf("List(clusters, !tier) = %v, %v; want west only", list.GetClusters(), err)
	}
	desc, err := admin2.DescribeCluster(ts2.adminCtx(), &relayv1.DescribeRequest{Name: "east"})
	if err != nil || !maps.Equal(desc.GetStatus().GetLabels(), want) {
		t.Errorf("DescribeCluster(east) labels = %v, %v; want %v", desc.GetStatus().GetLabels(), err, want)
	}

	// Both replicas change different labels at once: compare-and-set keeps
	// every change.
	var wg sync.WaitGroup
	for r, admin := range []relayv1.AdminClient{admin1, admin2} {
		ts := []*testServer{ts1, ts2}[r]
		wg.Go(func() {
			for i := range 10 {
				if _, err := admin.LabelCluster(ts.adminCtx(), &relayv1.LabelClusterRequest{Cluster: "west", Set: map[string]string{fmt.Sprintf("r%d-%d", r, i): "x"}}); err != nil {
					t.Errorf("LabelCluster on replica %d: %v", r+1, err)
				}
			}
		})
	}
	wg.Wait()
	if w, err := raw.GetCluster(context.Background(), "west"); err != nil || len(w.Labels) != 20 {
		t.Errorf("after concurrent changes on two replicas west has %d labels (%v), want 20", len(w.Labels), err)
	}

	// Registering again adds to the labels the cluster has.
	ts2.registerWith(&relayv1.RegisterClusterRequest{Cluster: "east", Labels: map[string]string{"env": "staging"}})
	want = map[string]string{"region": "eu-west", "tier": "gold", "env": "staging"}
	testutil.Eventually(t, "replica 1's translator to get the labels of the second registration", func() bool { return maps.Equal(spy1.of("east"), want) })
}

// Label changes are refused, naming what is wrong, unless they are
// Kubernetes label keys and values within the bounds, by an administrator,
// of a registered cluster; a refused change changes nothing.
func TestLabelClusterRefusals(t *testing.T) {
	ts := startServer(t, nil, "")
	admin := relayv1.NewAdminClient(ts.dial(nil))
	ts.registerWith(&relayv1.RegisterClusterRequest{Cluster: "east", Labels: map[string]string{"env": "prod"}})
	many := map[string]string{}
	for i := range MaxClusterLabels {
		many[fmt.Sprintf("k%d", i)] = "v"
	}
	tests := map[string]struct {
		ctx  context.Context
		req  *relayv1.LabelClusterRequest
		code codes.Code
		msg  string
	}{
		"no admin token":  {context.Background(), &relayv1.LabelClusterRequest{Cluster: "east", Set: map[string]string{"a": "b"}}, codes.Unauthenticated, "admin token"},
		"unknown cluster": {ts.adminCtx(), &relayv1.LabelClusterRequest{Cluster: "nowhere", Set: map[string]string{"a": "b"}}, codes.NotFound, "not registered"},
		"invalid key":     {ts.adminCtx(), &relayv1.LabelClusterRequest{Cluster: "east", Set: map[string]string{"bad key!": "b"}}, codes.InvalidArgument, `label key "bad key!"`},
		"invalid value":   {ts.adminCtx(), &relayv1.LabelClusterRequest{Cluster: "east", Set: map[string]string{"a": strings.Repeat("v", 64)}}, codes.InvalidArgument, `label "a" value`},
		"invalid removal": {ts.adminCtx(), &relayv1.LabelClusterRequest{Cluster: "east", Remove: []string{"-x"}}, codes.InvalidArgument, `label key "-x"`},
		"set and removed": {ts.adminCtx(), &relayv1.LabelClusterRequest{Cluster: "east", Set: map[string]string{"a": "b"}, Remove: []string{"a"}}, codes.InvalidArgument, "both set and removed"},
		"too many labels": {ts.adminCtx(), &relayv1.LabelClusterRequest{Cluster: "east", Set: many}, codes.InvalidArgument, "at most 64"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := admin.LabelCluster(tt.ctx, tt.req)
			if status.Code(err) != tt.code || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("LabelCluster = %v, want %v naming %q", err, tt.code, tt.msg)
			}
		})
	}
	if _, err := admin.RegisterCluster(ts.adminCtx(), &relayv1.RegisterClusterRequest{Cluster: "west", Labels: map[string]string{"a/b/c": "x"}}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("RegisterCluster with an invalid label = %v, want InvalidArgument", err)
	}
	c, err := ts.store.GetCluster(context.Background(), "east")
	if err != nil || !maps.Equal(c.Labels, map[string]string{"env": "prod"}) {
		t.Errorf("after refused changes east has labels %v (%v), want env=prod", c.Labels, err)
	}
}
