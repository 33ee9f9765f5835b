package ui

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"sigs.k8s.io/yaml"
)

// outputsAdmin answers with one output of east whose agent's error
// carries a line break and a YAML document of its own.
type outputsAdmin struct {
	relayv1.UnimplementedAdminServer
	err string
}

func (a outputsAdmin) DescribeCluster(context.Context, *relayv1.DescribeRequest) (*relayv1.ClusterDescription, error) {
	return &relayv1.ClusterDescription{}, nil
}

func (a outputsAdmin) List(context.Context, *relayv1.ListRequest) (*relayv1.ListResponse, error) {
	return &relayv1.ListResponse{Outputs: []*relayv1.OutputResource{{
		Cluster: "east", Backend: "istio", Kind: "ConfigMap", Namespace: "bookinfo", Name: "routes",
		Policies: []string{"TrafficPolicy/bookinfo/reviews"}, Error: a.err,
		Body: `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"routes","namespace":"bookinfo"}}`,
	}}}, nil
}

// An agent's error is text the agent chose: on the outputs page it stays
// inside its comment line and adds no document, line or escape sequence.
func TestOutputsYAMLKeepsAgentText(t *testing.T) {
	hostile := "denied\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: fake}\n\x1b]0;owned\x07"
	s := &Server{admin: outputsAdmin{err: hostile}}
	text, err := s.outputsYAML(context.Background(), "east", "istio")
	if err != nil {
		t.Fatal(err)
	}
	if docs := strings.Split(text, "\n---\n"); len(docs) != 1 {
		t.Fatalf("one output gave %d YAML documents:\n%s", len(docs), text)
	}
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if !strings.HasPrefix(lines[0], "# ConfigMap bookinfo/routes") || !strings.Contains(lines[0], `failed: denied\n---\napiVersion`) {
		t.Errorf("the comment line is %q, want the error escaped on it", lines[0])
	}
	if strings.ContainsAny(text, "\x1b\x07") {
		t.Errorf("the outputs page holds terminal escapes:\n%q", text)
	}
	var obj map[string]any
	if err := yaml.Unmarshal([]byte(text), &obj); err != nil || obj["kind"] != "ConfigMap" {
		t.Errorf("the page parses as %v (%v), want the ConfigMap alone", obj, err)
	}
}

func TestNatural(t *testing.T) {
	in := []string{"c10", "c2", "c1", "b", "c02", "c1a", "c", "c100", "a9z", "a10"}
	want := []string{"a9z", "a10", "b", "c", "c1", "c1a", "c2", "c02", "c10", "c100"}
	got := slices.Clone(in)
	slices.SortStableFunc(got, natural)
	if !slices.Equal(got, want) {
		t.Errorf("natural order of %q = %q, want %q", in, got, want)
	}
}

// policyAdmin describes a policy with an output in each of clusters, as
// the server does: every output unless the request asks for its outline
// or a page (output_clusters in their order, output_limit). It counts the
// outputs it answered.
type policyAdmin struct {
	relayv1.UnimplementedAdminServer
	clusters []string
	outputs  *atomic.Int64
}

func (a policyAdmin) ListClusters(context.Context, *relayv1.ListClustersRequest) (*relayv1.ListClustersResponse, error) {
	return &relayv1.ListClustersResponse{}, nil
}

func (a policyAdmin) DescribePolicy(_ context.Context, req *relayv1.DescribeRequest) (*relayv1.PolicyDescription, error) {
	d := &relayv1.PolicyDescription{Status: &relayv1.PolicyStatus{Kind: "AccessPolicy", Namespace: "ns", Name: "p"}}
	for _, c := range a.clusters {
		d.Clusters = append(d.Clusters, &relayv1.PolicyCluster{Cluster: c, Applied: true, Resources: 1})
	}
	if req.GetOutline() {
		return d, nil
	}
	clusters := a.clusters
	if len(req.GetOutputClusters()) > 0 {
		clusters = slices.DeleteFunc(slices.Clone(req.GetOutputClusters()), func(c string) bool { return !slices.Contains(a.clusters, c) })
	}
	for _, c := range clusters {
		if n := int(req.GetOutputLimit()); n > 0 && len(d.Outputs) == n {
			break
		}
		d.Outputs = append(d.Outputs, &relayv1.OutputResource{Cluster: c, Kind: "AuthorizationPolicy", Name: "p", Body: "{}"})
	}
	a.outputs.Add(int64(len(d.Outputs)))
	return d, nil
}

// A policy's page gets a page of its outputs, those of the clusters its
// filter matches, in natural order, and how many there are.
func TestDescribePolicyBounded(t *testing.T) {
	var clusters []string
	for i := range 1000 {
		clusters = append(clusters, fmt.Sprintf("c%d", 999-i))
	}
	admin := policyAdmin{clusters: clusters, outputs: new(atomic.Int64)}
	s := &Server{admin: admin}
	for query, want := range map[string]struct {
		first, last string
		n, matching int
	}{
		"":                      {"c0", "c199", policyOutputs, 1000},
		"?outputs=3":            {"c0", "c2", 3, 1000},
		"?outputs=999999":       {"c0", "c999", 1000, 1000},
		"?match=C99&outputs=20": {"c99", "c999", 11, 11},
		"?match=nothing":        {"", "", 0, 0},
	} {
		r := httptest.NewRequest("GET", "/api/policies/AccessPolicy/ns/p"+query, nil)
		before := admin.outputs.Load()
		v, err := s.describePolicy(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		if asked := admin.outputs.Load() - before; asked != int64(want.n) {
			t.Errorf("describePolicy(%q) was answered %d outputs, want only the %d of its page", query, asked, want.n)
		}
		var got struct {
			OutputsTotal, OutputsMatching int
			Status                        struct{ Name string }
			Outputs                       []struct{ Cluster string }
		}
		if err := json.Unmarshal(v.(json.RawMessage), &got); err != nil {
			t.Fatalf("describePolicy(%q) answers %s: %v", query, v, err)
		}
		first, last := "", ""
		if n := len(got.Outputs); n > 0 {
			first, last = got.Outputs[0].Cluster, got.Outputs[n-1].Cluster
		}
		if got.Status.Name != "p" || got.OutputsTotal != 1000 || got.OutputsMatching != want.matching || len(got.Outputs) != want.n || first != want.first || last != want.last {
			t.Errorf("describePolicy(%q) = %s %d/%d/%d outputs %s..%s, want %d/%d/1000 %s..%s",
				query, got.Status.Name, len(got.Outputs), got.OutputsMatching, got.OutputsTotal, first, last, want.n, want.matching, want.first, want.last)
		}
	}
}

// pageAdmin is policyAdmin that also answers the fleet's status, checks
// tokens with Authorize as server.Server.AdminServer does, and counts the
// status and cluster list it computed.
type pageAdmin struct {
	policyAdmin
	statuses, lists atomic.Int64
}

func (a *pageAdmin) Authorize(context.Context) error { return nil }

func (a *pageAdmin) GetStatus(context.Context, *relayv1.GetStatusRequest) (*relayv1.Status, error) {
	a.statuses.Add(1)
	return &relayv1.Status{Version: "v1", ServerId: "s"}, nil
}

func (a *pageAdmin) ListClusters(context.Context, *relayv1.ListClustersRequest) (*relayv1.ListClustersResponse, error) {
	a.lists.Add(1)
	return &relayv1.ListClustersResponse{}, nil
}

// A page opened asks for the status, opens its event stream and asks for
// its policy: the fleet's status is computed once for the three, and the
// clusters' for none of them (the token is checked with Authorize).
func TestPageComputesStatusOnce(t *testing.T) {
	admin := &pageAdmin{policyAdmin: policyAdmin{clusters: []string{"c1", "c2"}, outputs: new(atomic.Int64)}}
	opts := DefaultOptions()
	s := &Server{admin: admin, opts: opts, streams: make(chan struct{}, 1), sessions: newSessions(opts.SessionLife, opts.MaxSessions)}
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	call := func(path string) *http.Response {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, "GET", srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer token")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s = %s", path, resp.Status)
		}
		return resp
	}
	resp := call("/api/status")
	var st struct{ ServerId string }
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || st.ServerId != "s" {
		t.Errorf("GET /api/status = %+v, %v; want the status", st, err)
	}
	resp.Body.Close()
	events := call("/api/events")
	defer events.Body.Close()
	line, err := bufio.NewReader(events.Body).ReadString('}')
	if err != nil || !strings.Contains(line, `"serverId":"s"`) {
		t.Errorf("the event stream began with %q, %v; want the status", line, err)
	}
	call("/api/policies/AccessPolicy/ns/p").Body.Close()
	if n, l := admin.statuses.Load(), admin.lists.Load(); n != 1 || l != 0 {
		t.Errorf("a page opened computed the status %d times and listed the clusters %d times, want once and never", n, l)
	}
}
