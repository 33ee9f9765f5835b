package demo

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/meshrelay/meshrelay/core/server"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
)

// rings puts each demo cluster in a ring, the label the demo's
// RolloutStrategy selects its stages by: east is the canary.
var rings = map[string]string{"east": "canary", "west": "main", "central": "main", "north": "main"}

// rolloutStrategy is the demo's RolloutStrategy: the canary ring first,
// healthy for two seconds, then the main ring once approved.
const rolloutStrategy = `apiVersion: policy.meshrelay.io/v1alpha1
kind: RolloutStrategy
metadata: {name: fleet, namespace: meshrelay}
spec:
  minHealthy: 2s
  progressDeadline: 2m
  stages:
  - name: canary
    clusterSelector: {matchLabels: {ring: canary}}
  - name: main
    clusterSelector: {matchLabels: {ring: main}}
    approval: true
`

// RolloutReport is what the demo's staged rollout did.
type RolloutReport struct {
	// Canary lists the outputs ("cluster/backend") the edit changed
	// while the main ring waited for approval.
	Canary []string
	// HeldBack lists the outputs the edit changed only once the main
	// ring was approved.
	HeldBack []string
	// Status is the rollout as it completed.
	Status *relayv1.RolloutStatus
}

// stagedRollout shows a staged rollout: it labels the clusters by ring,
// adds the RolloutStrategy, edits the weights back, and watches the edit
// reach the canary, wait for approval, then reach the main ring.
func stagedRollout(ctx, actx context.Context, admin relayv1.AdminClient, srv *server.Server, policyDir string, timeout time.Duration, report *Report, say func(string, ...any)) error {
	say("\nStaged rollout: labelling the clusters by ring (meshrelay cluster label NAME ring=…) and adding policies/rollout-strategy.yaml:")
	say("  stage canary (ring=canary: east), healthy for 2s; then stage main (ring=main: the rest), once approved")
	for _, name := range slices.Sorted(maps.Keys(rings)) {
		if _, err := admin.LabelCluster(actx, &relayv1.LabelClusterRequest{Cluster: name, Set: map[string]string{"ring": rings[name]}}); err != nil {
			return fmt.Errorf("label %s: %w", name, err)
		}
	}
	if err := writeFile(filepath.Join(policyDir, "rollout-strategy.yaml"), rolloutStrategy); err != nil {
		return err
	}
	if err := waitFor(ctx, timeout, "the RolloutStrategy accepted", func() (bool, error) {
		st, err := admin.GetStatus(actx, &relayv1.GetStatusRequest{})
		if err != nil {
			return false, err
		}
		for _, p := range st.GetPolicies() {
			if p.GetKind() == "RolloutStrategy" && p.GetState() == "Accepted" {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		return err
	}

	say("Editing policies/reviews-traffic.yaml again: reviews weights 10/10/80 → 50/30/20, now staged …")
	before := hashes(srv.Engine())
	if err := editFile(filepath.Join(policyDir, "reviews-traffic.yaml"), [][2]string{{"weight: 10", "weight: 50"}, {"weight: 10", "weight: 30"}, {"weight: 80", "weight: 20"}}); err != nil {
		return err
	}
	rr := &RolloutReport{}
	st, err := waitRollout(ctx, actx, admin, timeout, "stage main waiting for approval", func(st *relayv1.RolloutStatus) bool {
		return st.GetStage() == 1 && st.GetPhase() == "Progressing" && strings.Contains(st.GetReason(), "waits for approval")
	})
	if err != nil {
		return err
	}
	rr.Canary = changedSince(srv, before)
	say("  rollout %d: stage canary done (%d/%d released, %d healthy); stage main waits for approval", st.GetId(), st.GetReleased(), st.GetTotal(), st.GetHealthy())
	say("  changed so far: %s; west, central and north keep their outputs", strings.Join(rr.Canary, ", "))

	say("Approving stage main (meshrelay rollout approve main) …")
	if _, err := admin.ActOnRollout(actx, &relayv1.RolloutActionRequest{Action: relayv1.RolloutActionRequest_ACTION_APPROVE, Stage: "main"}); err != nil {
		return fmt.Errorf("approve stage main: %w", err)
	}
	if rr.Status, err = waitRollout(ctx, actx, admin, timeout, "the rollout completed", func(st *relayv1.RolloutStatus) bool { return st.GetPhase() == "Completed" }); err != nil {
		return err
	}
	if _, err := converge(actx, admin, timeout); err != nil {
		return err
	}
	for _, k := range changedSince(srv, before) {
		if !slices.Contains(rr.Canary, k) {
			rr.HeldBack = append(rr.HeldBack, k)
		}
	}
	report.Rollout = rr
	say("  rollout %d completed: %d/%d clusters healthy; changed after approval: %s", rr.Status.GetId(), rr.Status.GetHealthy(), rr.Status.GetTotal(), strings.Join(rr.HeldBack, ", "))
	say("  (meshrelay rollout undo would put every cluster back on 10/10/80 at once)")
	// Later edits (with --serve) apply at once again; removing the
	// strategy changes no revision.
	if err := os.Remove(filepath.Join(policyDir, "rollout-strategy.yaml")); err != nil {
		return err
	}
	say("  removed policies/rollout-strategy.yaml: later edits apply at once again")
	return nil
}

// waitRollout polls the rollout until cond holds.
func waitRollout(ctx, actx context.Context, admin relayv1.AdminClient, timeout time.Duration, what string, cond func(*relayv1.RolloutStatus) bool) (*relayv1.RolloutStatus, error) {
	var st *relayv1.RolloutStatus
	err := waitFor(ctx, timeout, what, func() (bool, error) {
		var err error
		if st, err = admin.GetRollout(actx, &relayv1.GetRolloutRequest{}); err != nil {
			return false, nil // none yet
		}
		return cond(st), nil
	})
	if err != nil && st != nil {
		err = fmt.Errorf("%w (rollout %d %s at stage %d: %s)", err, st.GetId(), st.GetPhase(), st.GetStage(), st.GetReason())
	}
	return st, err
}

// waitFor polls cond every 50 ms until it holds, fails, or timeout passes.
func waitFor(ctx context.Context, timeout time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("wait for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s: not within %s", what, timeout)
}

// changedSince returns the outputs whose hash differs from before, sorted.
func changedSince(srv *server.Server, before map[string]string) []string {
	var out []string
	for k, h := range hashes(srv.Engine()) {
		if before[k] != h {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// writeFile writes data to path through a rename, so the policy source
// never reads half a file.
func writeFile(path, data string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
