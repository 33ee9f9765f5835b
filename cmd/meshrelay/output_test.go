package main

import (
	"bytes"
	"strings"
	"testing"

	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
)

// hostile is text an agent controls (an apply error, a resource name):
// terminal escapes that colour the text and set the window's title, and
// line breaks that would start rows of their own.
const hostile = "\x1b[31mdenied\x1b]0;owned\x07\nTrafficPolicy bookinfo/fake  management  Accepted  3/3  -\r\tend"

// Tables and descriptions print agents' text on its own line and cell,
// with no control character reaching the terminal.
func TestPrintingEscapesAgentText(t *testing.T) {
	policy := &relayv1.PolicyStatus{Kind: "AccessPolicy", Namespace: "bookinfo", Name: "reviews", SourceCluster: "east",
		State: "Error", AppliedClusters: 0, TargetClusters: 1, Errors: []string{hostile}}
	output := &relayv1.OutputResource{Cluster: "east", Backend: "istio", Kind: "AuthorizationPolicy", Namespace: "bookinfo", Name: "reviews",
		Policies: []string{"AccessPolicy/bookinfo/reviews"}, Error: hostile}
	for name, tc := range map[string]struct {
		print func(*bytes.Buffer) error
		lines int
	}{
		"get policies": {func(b *bytes.Buffer) error { return printPoliciesTo(b, []*relayv1.PolicyStatus{policy}, true) }, 2},
		"get outputs":  {func(b *bytes.Buffer) error { return printOutputs(b, []*relayv1.OutputResource{output}, true) }, 2},
		"describe policy": {func(b *bytes.Buffer) error {
			return printPolicyDescription(b, &relayv1.PolicyDescription{Status: policy, Outputs: []*relayv1.OutputResource{output},
				Clusters:    []*relayv1.PolicyCluster{{Cluster: "east", Resources: 1, Errors: []string{hostile}}},
				Diagnostics: []*relayv1.Diagnostic{{Severity: "Error", Policy: "AccessPolicy/bookinfo/reviews@east", Summary: hostile}}})
		}, 0},
	} {
		t.Run(name, func(t *testing.T) {
			var b bytes.Buffer
			if err := tc.print(&b); err != nil {
				t.Fatal(err)
			}
			out := b.String()
			if strings.ContainsAny(out, "\x1b\x07\r\t") {
				t.Errorf("the output holds control characters:\n%q", out)
			}
			if strings.Contains(out, "\nTrafficPolicy bookinfo/fake") {
				t.Errorf("the agent's text started a row of its own:\n%s", out)
			}
			if tc.lines > 0 && strings.Count(out, "\n") != tc.lines {
				t.Errorf("a header and one row printed %d lines:\n%s", strings.Count(out, "\n"), out)
			}
			if !strings.Contains(out, `\x1b[31mdenied\x1b]0;owned\x07\nTrafficPolicy`) {
				t.Errorf("the agent's text is not shown escaped:\n%s", out)
			}
		})
	}
}
