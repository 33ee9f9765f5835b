package ui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/server"
	"github.com/meshrelay/meshrelay/core/store"
	"github.com/meshrelay/meshrelay/core/store/memory"
	"github.com/meshrelay/meshrelay/internal/testutil"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"sigs.k8s.io/yaml"
)

// staticPolicies is a management policy source that publishes one
// snapshot.
type staticPolicies struct{ snap *snapshot.Snapshot }

func (p staticPolicies) Run(ctx context.Context, publish func(*snapshot.Snapshot)) error {
	publish(p.snap)
	<-ctx.Done()
	return nil
}

// objects decodes YAML documents into a snapshot.
func objects(t *testing.T, docs ...string) *snapshot.Snapshot {
	t.Helper()
	var rs []snapshot.Resource
	for _, d := range docs {
		data, err := yaml.YAMLToJSON([]byte(d))
		if err != nil {
			t.Fatal(err)
		}
		r, err := snapshot.FromJSON(data)
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	s, err := snapshot.New(1, rs)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

const reviewsService = `{apiVersion: v1, kind: Service, metadata: {name: reviews, namespace: bookinfo}, spec: {ports: [{name: http, port: 9080}]}}`

// accessPolicy admits clients of the from cluster to reviews.
func accessPolicy(from string) string {
	return `{apiVersion: policy.meshrelay.io/v1alpha1, kind: AccessPolicy, metadata: {name: reviews-access, namespace: bookinfo},
  spec: {destinationSelectors: [{namespaces: [bookinfo], names: [reviews]}], action: Allow, from: [{clusters: [` + from + `]}]}}`
}

// A workload cluster's policy with the name of a management policy is
// another policy: describe names each by its source ("Kind/ns/name" is
// the management source's, "@cluster" a workload cluster's), a shorter
// name is ambiguous between them, and the graph draws the edges of both.
func TestShadowedPolicy(t *testing.T) {
	st := memory.New()
	ctx := context.Background()
	for _, c := range []string{"east", "west"} {
		if _, err := store.UpdateCluster(ctx, st, c, func(*store.Cluster, bool) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	// east's own reviews-access admits west's clients to east's reviews;
	// the management one admits east's clients to reviews everywhere.
	if err := st.PutInput(ctx, "east", objects(t, reviewsService, accessPolicy("west"))); err != nil {
		t.Fatal(err)
	}
	if err := st.PutInput(ctx, "west", objects(t, reviewsService)); err != nil {
		t.Fatal(err)
	}
	e := startWith(t, server.Deps{Store: st, Policies: staticPolicies{objects(t, accessPolicy("east"))}}, server.DefaultOptions(), nil)
	admin := metadata.NewIncomingContext(ctx, metadata.Pairs("authorization", "Bearer "+e.token))
	testutil.EventuallyWhy(t, "both policies in the status", func() (bool, string) {
		st, err := e.srv.AdminServer().GetStatus(admin, &relayv1.GetStatusRequest{})
		return err == nil && len(st.GetPolicies()) == 2, fmt.Sprint(err, st.GetPolicies())
	})

	for name, want := range map[string]string{
		"AccessPolicy/bookinfo/reviews-access":      "",
		"AccessPolicy/bookinfo/reviews-access@east": "east",
		"reviews-access@east":                       "east",
	} {
		d, err := e.srv.AdminServer().DescribePolicy(admin, &relayv1.DescribeRequest{Name: name})
		if err != nil {
			t.Errorf("DescribePolicy(%q): %v", name, err)
			continue
		}
		if got := d.GetStatus().GetSourceCluster(); got != want {
			t.Errorf("DescribePolicy(%q) is the policy of source %q, want %q", name, got, want)
		}
		if !strings.Contains(d.GetBody(), "[\""+map[string]string{"": "east", "east": "west"}[want]+"\"]") {
			t.Errorf("DescribePolicy(%q) has the body %s", name, d.GetBody())
		}
	}
	for _, name := range []string{"reviews-access", "bookinfo/reviews-access"} {
		_, err := e.srv.AdminServer().DescribePolicy(admin, &relayv1.DescribeRequest{Name: name})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "AccessPolicy/bookinfo/reviews-access@east") {
			t.Errorf("DescribePolicy(%q) = %v, want ambiguous, naming the workload cluster's copy with its source", name, err)
		}
	}
	// The UI's policy page of each.
	for path, want := range map[string]string{
		"api/policies/AccessPolicy/bookinfo/reviews-access":              `"sourceCluster":""`,
		"api/policies/AccessPolicy/bookinfo/reviews-access?cluster=east": `"sourceCluster":"east"`,
	} {
		resp, body := request(t, http.DefaultClient, "GET", e.ui.URL()+path, "Bearer "+e.token, "", "")
		if resp.StatusCode != http.StatusOK || !strings.Contains(strings.ReplaceAll(body, " ", ""), want) {
			t.Errorf("GET /%s = %d %s, want %s", path, resp.StatusCode, body, want)
		}
	}

	resp, body := request(t, http.DefaultClient, "GET", e.ui.URL()+"api/graph", "Bearer "+e.token, "", "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /api/graph = %d %s", resp.StatusCode, body)
	}
	var g struct {
		Edges []struct{ From, To, Destination, Policy string }
	}
	if err := json.Unmarshal([]byte(body), &g); err != nil {
		t.Fatal(err)
	}
	var edges []string
	for _, e := range g.Edges {
		edges = append(edges, e.Policy+": "+e.From+">"+e.To+" "+e.Destination)
	}
	slices.Sort(edges)
	want := []string{
		"AccessPolicy/bookinfo/reviews-access: east>west bookinfo/reviews",
		"AccessPolicy/bookinfo/reviews-access@east: west>east bookinfo/reviews",
	}
	if !slices.Equal(edges, want) {
		t.Errorf("graph edges = %q, want %q", edges, want)
	}
}

// labelledPolicy admits clients of east to reviews in the clusters
// labelled region=region.
func labelledPolicy(name, region string) string {
	return `{apiVersion: policy.meshrelay.io/v1alpha1, kind: AccessPolicy, metadata: {name: ` + name + `, namespace: bookinfo},
  spec: {destinationSelectors: [{names: [reviews], clusterSelector: {matchLabels: {region: ` + region + `}}}], action: Allow, from: [{clusters: [east]}]}}`
}

// fromLabelled admits clients of the clusters labelled region=region to
// west's reviews.
func fromLabelled(name, region string) string {
	return `{apiVersion: policy.meshrelay.io/v1alpha1, kind: AccessPolicy, metadata: {name: ` + name + `, namespace: bookinfo},
  spec: {destinationSelectors: [{names: [reviews], clusters: [west]}], action: Allow, from: [{clusterSelector: {matchLabels: {region: ` + region + `}}}]}}`
}

// The graph's edges and describe's selecting policies match a
// clusterSelector against the registry's labels, as the plugins do: a
// policy selecting region=us reaches west's reviews only, one selecting a
// region no cluster has reaches nothing. A client clusterSelector draws
// an edge from each cluster it matches, and none when it matches none.
func TestClusterSelectorInGraphAndDescribe(t *testing.T) {
	st := memory.New()
	ctx := context.Background()
	for c, region := range map[string]string{"east": "eu", "west": "us", "central": "eu"} {
		if _, err := store.UpdateCluster(ctx, st, c, func(r *store.Cluster, _ bool) error {
			r.Labels = map[string]string{"region": region}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if err := st.PutInput(ctx, c, objects(t, reviewsService)); err != nil {
			t.Fatal(err)
		}
	}
	e := startWith(t, server.Deps{Store: st, Policies: staticPolicies{objects(t, labelledPolicy("to-us", "us"), labelledPolicy("to-mars", "mars"), fromLabelled("from-eu", "eu"), fromLabelled("from-mars", "mars"))}}, server.DefaultOptions(), nil)
	admin := metadata.NewIncomingContext(ctx, metadata.Pairs("authorization", "Bearer "+e.token))
	testutil.EventuallyWhy(t, "the four policies in the status", func() (bool, string) {
		st, err := e.srv.AdminServer().GetStatus(admin, &relayv1.GetStatusRequest{})
		return err == nil && len(st.GetPolicies()) == 4, fmt.Sprint(err, st.GetPolicies())
	})

	d, err := e.srv.AdminServer().DescribeDestination(admin, &relayv1.DescribeRequest{Namespace: "bookinfo", Name: "reviews"})
	if err != nil {
		t.Fatal(err)
	}
	var selecting []string
	for _, p := range d.GetPolicies() {
		selecting = append(selecting, p.GetName())
	}
	if !slices.Equal(selecting, []string{"from-eu", "from-mars", "to-us"}) {
		t.Errorf("DescribeDestination(reviews) lists policies %v, want from-eu, from-mars and to-us", selecting)
	}

	resp, body := request(t, http.DefaultClient, "GET", e.ui.URL()+"api/graph", "Bearer "+e.token, "", "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /api/graph = %d %s", resp.StatusCode, body)
	}
	var g struct {
		Edges []struct{ From, To, Destination, Policy string }
	}
	if err := json.Unmarshal([]byte(body), &g); err != nil {
		t.Fatal(err)
	}
	var edges []string
	for _, e := range g.Edges {
		edges = append(edges, e.Policy+": "+e.From+">"+e.To)
	}
	slices.Sort(edges)
	want := []string{"AccessPolicy/bookinfo/from-eu: central>west", "AccessPolicy/bookinfo/from-eu: east>west", "AccessPolicy/bookinfo/to-us: east>west"}
	if !slices.Equal(edges, want) {
		t.Errorf("graph edges = %q, want %q", edges, want)
	}
}
