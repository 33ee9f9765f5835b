package ui

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// rolloutAdmin answers GetRollout with its rollout, or NotFound for none.
type rolloutAdmin struct {
	relayv1.UnimplementedAdminServer
	st *relayv1.RolloutStatus
}

func (a rolloutAdmin) GetRollout(context.Context, *relayv1.GetRolloutRequest) (*relayv1.RolloutStatus, error) {
	if a.st == nil {
		return nil, status.Error(codes.NotFound, "no rollout yet")
	}
	return a.st, nil
}

// bigRollout is a rollout of 1,000 clusters c0…c999 in three stages at
// stage "rest", gated: canary (c0…c9) done, rest (c10…c899) waiting for
// approval with c10 failed and c11 progressing, last (c900…) after it.
func bigRollout() *relayv1.RolloutStatus {
	released := timestamppb.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	st := &relayv1.RolloutStatus{
		Id: 7, Phase: "Progressing", Reason: "stage rest waits for approval", FromRevision: "aaa", ToRevision: "bbb", Stage: 1,
		Stages: []*relayv1.RolloutStage{{Name: "canary", Clusters: 10}, {Name: "rest", Clusters: 890, Approval: true}, {Name: "last", Clusters: 100, Approval: true}},
		Total:  1000, Released: 12, Healthy: 10, Failed: 1, Pending: 988,
	}
	// Listed in reverse: the page orders them itself.
	for i := 999; i >= 0; i-- {
		c := &relayv1.RolloutCluster{Name: fmt.Sprintf("c%d", i), State: "Pending"}
		switch {
		case i < 10:
			c.Stage, c.State, c.Released, c.HealthySince = "canary", "Succeeded", released, released
		case i < 900:
			c.Stage = "rest"
		default:
			c.Stage = "last"
		}
		switch i {
		case 10:
			c.State, c.Reason, c.Released = "Failed", "apply errors", released
		case 11:
			c.State, c.Released = "Progressing", released
		}
		st.Clusters = append(st.Clusters, c)
	}
	return st
}

// The rollout page gets the rollout without its clusters, and per stage
// its state, its counts by cluster state and a bounded list of clusters,
// the failing ones first, then in natural order; ?match= narrows the
// lists and ?show= lengthens one; gates still to pass are listed.
func TestRolloutPageGroupsByStage(t *testing.T) {
	type stage struct {
		Name, State        string
		Total, Matching    int
		Counts             map[string]int
		First, Last        string
		Listed             int
		FirstReason        string
		FirstReleased      string
		Approval, Approved bool
	}
	type page struct {
		ID, Phase, Clusters string
		Stages              []stage
		Gates               []string
	}
	read := func(t *testing.T, s *Server, query string) page {
		t.Helper()
		v, err := s.rollout(context.Background(), httptest.NewRequest("GET", "/api/rollout"+query, nil))
		if err != nil {
			t.Fatal(err)
		}
		data, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			Rollout map[string]any
			Stages  []struct {
				Name, State        string
				Total, Matching    int
				Counts             map[string]int
				Approval, Approved bool
				Clusters           []struct{ Name, State, Reason, Released string }
			}
			Gates []string
		}
		if err := json.Unmarshal(data, &got); err != nil {
			t.Fatalf("rollout(%q) answers %s: %v", query, data, err)
		}
		p := page{Gates: got.Gates}
		if got.Rollout != nil {
			p.ID, p.Phase, p.Clusters = fmt.Sprint(got.Rollout["id"]), fmt.Sprint(got.Rollout["phase"]), fmt.Sprint(got.Rollout["clusters"])
		}
		for _, s := range got.Stages {
			g := stage{Name: s.Name, State: s.State, Total: s.Total, Matching: s.Matching, Counts: s.Counts, Listed: len(s.Clusters), Approval: s.Approval, Approved: s.Approved}
			if n := len(s.Clusters); n > 0 {
				g.First, g.Last, g.FirstReason, g.FirstReleased = s.Clusters[0].Name, s.Clusters[n-1].Name, s.Clusters[0].Reason, s.Clusters[0].Released
			}
			p.Stages = append(p.Stages, g)
		}
		return p
	}
	counts := func(pending, progressing, succeeded, failed int) map[string]int {
		return map[string]int{"Pending": pending, "Progressing": progressing, "Succeeded": succeeded, "Failed": failed}
	}
	s := &Server{admin: rolloutAdmin{st: bigRollout()}}
	for query, want := range map[string]page{
		"": {ID: "7", Phase: "Progressing", Clusters: "[]", Gates: []string{"rest", "last"}, Stages: []stage{
			{Name: "canary", State: "Done", Total: 10, Matching: 10, Counts: counts(0, 0, 10, 0), First: "c0", Last: "c9", Listed: 10, FirstReleased: "2026-01-02T03:04:05Z"},
			{Name: "rest", State: "AwaitingApproval", Total: 890, Matching: 890, Counts: counts(888, 1, 0, 1), First: "c10", Last: "c109", Listed: rolloutClusters, FirstReason: "apply errors", FirstReleased: "2026-01-02T03:04:05Z", Approval: true},
			{Name: "last", State: "Waiting", Total: 100, Matching: 100, Counts: counts(100, 0, 0, 0), First: "c900", Last: "c999", Listed: 100, Approval: true},
		}},
		"?match=C99&show=rest:5&show=last:1000000": {ID: "7", Phase: "Progressing", Clusters: "[]", Gates: []string{"rest", "last"}, Stages: []stage{
			{Name: "canary", State: "Done", Total: 10, Matching: 0, Counts: counts(0, 0, 10, 0), Listed: 0},
			{Name: "rest", State: "AwaitingApproval", Total: 890, Matching: 1, Counts: counts(888, 1, 0, 1), First: "c99", Last: "c99", Listed: 1, Approval: true},
			{Name: "last", State: "Waiting", Total: 100, Matching: 10, Counts: counts(100, 0, 0, 0), First: "c990", Last: "c999", Listed: 10, Approval: true},
		}},
		"?show=rest:3": {ID: "7", Phase: "Progressing", Clusters: "[]", Gates: []string{"rest", "last"}, Stages: []stage{
			{Name: "canary", State: "Done", Total: 10, Matching: 10, Counts: counts(0, 0, 10, 0), First: "c0", Last: "c9", Listed: 10, FirstReleased: "2026-01-02T03:04:05Z"},
			{Name: "rest", State: "AwaitingApproval", Total: 890, Matching: 890, Counts: counts(888, 1, 0, 1), First: "c10", Last: "c12", Listed: 3, FirstReason: "apply errors", FirstReleased: "2026-01-02T03:04:05Z", Approval: true},
			{Name: "last", State: "Waiting", Total: 100, Matching: 100, Counts: counts(100, 0, 0, 0), First: "c900", Last: "c999", Listed: 100, Approval: true},
		}},
	} {
		if diff := cmp.Diff(want, read(t, s, query)); diff != "" {
			t.Errorf("rollout(%q) (-want +got):\n%s", query, diff)
		}
	}

	// Approved, then completed: no gate is left and every stage is done.
	done := bigRollout()
	done.Phase, done.Stage, done.Reason = "Completed", 3, ""
	done.Stages[1].Approved, done.Stages[2].Approved = true, true
	got := read(t, &Server{admin: rolloutAdmin{st: done}}, "")
	var states []string
	for _, s := range got.Stages {
		states = append(states, s.State)
	}
	if len(got.Gates) != 0 || !slices.Equal(states, []string{"Done", "Done", "Done"}) {
		t.Errorf("a completed rollout has gates %q and stages %q, want none and all Done", got.Gates, states)
	}

	// Paused at its first stage: that stage is Paused, the others wait.
	paused := bigRollout()
	paused.Phase, paused.Stage = "Paused", 0
	states = nil
	for _, s := range read(t, &Server{admin: rolloutAdmin{st: paused}}, "").Stages {
		states = append(states, s.State)
	}
	if !slices.Equal(states, []string{"Paused", "Waiting", "Waiting"}) {
		t.Errorf("a rollout paused at its first stage has stages %q, want Paused, Waiting, Waiting", states)
	}

	// No rollout yet: an answer that says so, not an error.
	none := read(t, &Server{admin: rolloutAdmin{}}, "")
	if none.ID != "" || len(none.Stages) != 0 || none.Gates == nil {
		t.Errorf("without a rollout the page gets %+v, want no rollout, no stages and an empty list of gates", none)
	}
}
