package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"google.golang.org/protobuf/types/known/durationpb"
)

func TestPrintRollout(t *testing.T) {
	st := &relayv1.RolloutStatus{
		Id: 2, Phase: "Paused", Reason: "1 of stage canary's clusters failed", FromRevision: "5b1f0c2e9a41aaaa", ToRevision: "c09d8e7a11f3bbbb",
		Stage: 0, Total: 3, Released: 1, Failed: 1, Pending: 2, Queued: true,
		Stages: []*relayv1.RolloutStage{
			{Name: "canary", Clusters: 1, MaxConcurrent: 1, MinHealthy: durationpb.New(2 * time.Minute), ProgressDeadline: durationpb.New(15 * time.Minute)},
			{Name: "prod", Clusters: 2, MaxConcurrent: 2, MinHealthy: durationpb.New(2 * time.Minute), ProgressDeadline: durationpb.New(15 * time.Minute), Approval: true},
		},
		Clusters: []*relayv1.RolloutCluster{
			{Name: "canary-1", Stage: "canary", State: "Failed", Reason: "apply errors in output istio: \x1b[31mred"},
			{Name: "west", Stage: "prod", State: "Pending"},
		},
	}
	var b strings.Builder
	if err := printRollout(&b, st); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"2        Paused  1/2 canary  3      1         0        1       2        5b1f0c2e9a41→c09d8e7a11f3  1 of stage canary",
		"A newer policy set waits",
		"prod    2         2               0             2m0s         15m0s     approval",
		"canary-1  canary  Failed",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("printRollout output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\x1b") {
		t.Errorf("printRollout passed an escape sequence through:\n%q", out)
	}
}

// get policies gains a ROLLOUT column while a rollout carries a policy,
// and has none otherwise.
func TestPrintPoliciesRolloutColumn(t *testing.T) {
	carried := &relayv1.PolicyStatus{Kind: "TrafficPolicy", Namespace: "bookinfo", Name: "reviews-timeout", State: "Accepted", AppliedClusters: 3, TargetClusters: 9,
		Rollout: "rollout 2 Progressing at stage canary: 3/9 released, 2 healthy, 0 failed"}
	other := &relayv1.PolicyStatus{Kind: "AccessPolicy", Namespace: "bookinfo", Name: "ratings", State: "Accepted", AppliedClusters: 9, TargetClusters: 9}

	var b bytes.Buffer
	if err := printPoliciesTo(&b, []*relayv1.PolicyStatus{carried, other}, false); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "ROLLOUT") ||
		!strings.Contains(lines[1], "rollout 2 Progressing at stage canary: 3/9 released") || !strings.Contains(lines[2], "  -  ") {
		t.Errorf("get policies during a rollout:\n%s", b.String())
	}
	b.Reset()
	if err := printPoliciesTo(&b, []*relayv1.PolicyStatus{other}, false); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "ROLLOUT") {
		t.Errorf("get policies without a rollout has a ROLLOUT column:\n%s", b.String())
	}
}
