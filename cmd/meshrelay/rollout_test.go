package main

import (
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
