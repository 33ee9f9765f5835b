package ui

import (
	"context"
	"strings"
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
