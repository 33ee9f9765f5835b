package ui

import (
	"cmp"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Bounds of the rollout page's cluster lists: how many clusters of a
// stage an answer carries unless asked for more (?show=STAGE:N), and at
// most.
const (
	rolloutClusters    = 100
	maxRolloutClusters = 10000
)

// rolloutPage is GET /api/rollout's answer: the staged rollout in
// progress, or the last one, with its clusters grouped by stage.
type rolloutPage struct {
	// Rollout is the admin API's RolloutStatus (protojson) without its
	// clusters, which Stages carries; null when there was none.
	Rollout json.RawMessage `json:"rollout"`
	// None says why there is no rollout.
	None   string         `json:"none,omitempty"`
	Stages []rolloutStage `json:"stages"`
	// Gates are the stages that wait, or will wait, for an
	// administrator's approval, in order.
	Gates []string `json:"gates"`
}

// rolloutStage is one stage of the page's rollout: its state, its
// clusters' counts by state, and a bounded list of them.
type rolloutStage struct {
	Name string `json:"name"`
	// State is Done, Releasing, AwaitingApproval, Paused, Waiting or
	// Undone.
	State    string `json:"state"`
	Approval bool   `json:"approval"`
	Approved bool   `json:"approved"`
	// Total counts the stage's clusters; Counts them by state (Pending,
	// Progressing, Succeeded, Failed); Matching those whose names hold
	// ?match=.
	Total    int            `json:"total"`
	Counts   map[string]int `json:"counts"`
	Matching int            `json:"matching"`
	// Clusters are the first of the matching clusters, the failing and
	// progressing ones first, then in natural order of their names.
	Clusters []rolloutCluster `json:"clusters"`
}

// rolloutCluster is one cluster of a stage.
type rolloutCluster struct {
	Name         string `json:"name"`
	State        string `json:"state"`
	Reason       string `json:"reason,omitempty"`
	Released     string `json:"released,omitempty"`
	HealthySince string `json:"healthySince,omitempty"`
}

// stateOrder lists a stage's clusters by what needs the reader first.
var stateOrder = map[string]int{"Failed": 0, "Progressing": 1, "Pending": 2, "Succeeded": 3}

// rollout answers GET /api/rollout: one GetRollout call, grouped by stage.
// ?match= keeps the clusters whose names hold it (any case) in the
// lists; ?show=STAGE:N (repeated) lists up to N of a stage's clusters
// instead of rolloutClusters.
func (s *Server) rollout(ctx context.Context, r *http.Request) (any, error) {
	st, err := s.admin.GetRollout(ctx, &relayv1.GetRolloutRequest{})
	if status.Code(err) == codes.NotFound {
		return &rolloutPage{Rollout: json.RawMessage("null"), None: status.Convert(err).Message(), Stages: []rolloutStage{}, Gates: []string{}}, nil
	}
	if err != nil {
		return nil, err
	}
	q := r.URL.Query()
	limits := map[string]int{}
	for _, v := range q["show"] {
		name, n, ok := strings.Cut(v, ":")
		if c, err := strconv.Atoi(n); ok && err == nil && c > 0 {
			limits[name] = min(c, maxRolloutClusters)
		}
	}
	return groupRollout(st, strings.ToLower(q.Get("match")), limits)
}

// groupRollout shapes a rollout for its page.
func groupRollout(st *relayv1.RolloutStatus, match string, limits map[string]int) (*rolloutPage, error) {
	head := proto.Clone(st).(*relayv1.RolloutStatus)
	head.Clusters = nil
	data, err := jsonOptions.Marshal(head)
	if err != nil {
		return nil, err
	}
	page := &rolloutPage{Rollout: data, Stages: []rolloutStage{}, Gates: []string{}}
	index := map[string]int{}
	for i, s := range st.GetStages() {
		index[s.GetName()] = i
		page.Stages = append(page.Stages, rolloutStage{
			Name: s.GetName(), State: stageState(st, i), Approval: s.GetApproval(), Approved: s.GetApproved(),
			Counts: map[string]int{"Pending": 0, "Progressing": 0, "Succeeded": 0, "Failed": 0}, Clusters: []rolloutCluster{},
		})
		if s.GetApproval() && !s.GetApproved() && int32(i) >= st.GetStage() && st.GetPhase() != "Undone" {
			page.Gates = append(page.Gates, s.GetName())
		}
	}
	clusters := slices.Clone(st.GetClusters())
	slices.SortStableFunc(clusters, func(a, b *relayv1.RolloutCluster) int {
		return cmp.Or(stateOrder[a.GetState()]-stateOrder[b.GetState()], natural(a.GetName(), b.GetName()))
	})
	for _, c := range clusters {
		i, ok := index[c.GetStage()]
		if !ok {
			continue
		}
		g := &page.Stages[i]
		g.Total++
		g.Counts[c.GetState()]++
		if !strings.Contains(strings.ToLower(c.GetName()), match) {
			continue
		}
		g.Matching++
		if len(g.Clusters) < cmp.Or(limits[g.Name], rolloutClusters) {
			g.Clusters = append(g.Clusters, rolloutCluster{
				Name: c.GetName(), State: c.GetState(), Reason: c.GetReason(),
				Released: timeText(c.GetReleased().AsTime(), c.GetReleased() != nil), HealthySince: timeText(c.GetHealthySince().AsTime(), c.GetHealthySince() != nil),
			})
		}
	}
	return page, nil
}

// stageState says where stage i of a rollout is.
func stageState(st *relayv1.RolloutStatus, i int) string {
	current := int(st.GetStage())
	switch {
	case st.GetPhase() == "Undone":
		return "Undone"
	case i < current || st.GetPhase() == "Completed":
		return "Done"
	case i > current:
		return "Waiting"
	case st.GetPhase() == "Paused":
		return "Paused"
	case st.GetStages()[i].GetApproval() && !st.GetStages()[i].GetApproved():
		return "AwaitingApproval"
	}
	return "Releasing"
}

func timeText(t time.Time, set bool) string {
	if !set {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}
