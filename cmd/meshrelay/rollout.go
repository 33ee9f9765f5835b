package main

import (
	"context"
	"fmt"
	"io"
	"time"

	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"github.com/spf13/cobra"
)

func newRolloutCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rollout",
		Short: "Show, pause, resume, approve or undo the staged rollout of a policy change",
		Long: `With a RolloutStrategy among the management source's policies, a change of
the other policies reaches the fleet stage by stage: each stage's clusters
move to the new revision at most maxConcurrent at a time, and the next
stage starts when all of them have been healthy (agent connected, every
output acked without apply errors, no error diagnostic added) for
minHealthy. A gated stage (approval: true) waits for approve. Failures
beyond a stage's maxFailures, or a stage past its progressDeadline, pause
the rollout. Undo puts every released cluster back on the previous
revision; clusters that never left it see nothing change. The last
rollout can still be undone once completed, while its revision is live:
every cluster then goes back to the previous revision at once.`,
		Example: `  meshrelay rollout status
  meshrelay rollout approve prod
  meshrelay rollout undo`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(
		newRolloutStatusCommand("status", "Show the rollout in progress, or the last one", "  meshrelay rollout status\n  meshrelay rollout status -o yaml"),
		newRolloutActionCommand("pause", relayv1.RolloutActionRequest_ACTION_PAUSE, "Hold the rollout: nothing more is released until resume", "  meshrelay rollout pause"),
		newRolloutActionCommand("resume", relayv1.RolloutActionRequest_ACTION_RESUME, "Let a paused rollout go on; its failed clusters are judged again", "  meshrelay rollout resume"),
		newRolloutActionCommand("approve", relayv1.RolloutActionRequest_ACTION_APPROVE, "Approve a gated stage (the current one when none is named)", "  meshrelay rollout approve\n  meshrelay rollout approve prod"),
		newRolloutActionCommand("undo", relayv1.RolloutActionRequest_ACTION_UNDO, "Put every released cluster back on the previous revision (all at once after it completed)", "  meshrelay rollout undo"),
	)
	return cmd
}

// newRolloutStatusCommand shows the rollout; describe rollout is the same.
func newRolloutStatusCommand(use, short, example string) *cobra.Command {
	var af adminFlags
	var out string
	cmd := &cobra.Command{
		Use:     use,
		Short:   short,
		Example: example,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := call(cmd.Context(), &af, func(ctx context.Context, c relayv1.AdminClient) (*relayv1.RolloutStatus, error) {
				return c.GetRollout(ctx, &relayv1.GetRolloutRequest{})
			})
			if err != nil {
				return apiError(err)
			}
			if out != "table" {
				return printData(cmd.OutOrStdout(), out, st)
			}
			return printRollout(cmd.OutOrStdout(), st)
		},
	}
	af.add(cmd)
	outputFlag(cmd, &out)
	return cmd
}

func newRolloutActionCommand(use string, action relayv1.RolloutActionRequest_Action, short, example string) *cobra.Command {
	var af adminFlags
	args := cobra.NoArgs
	if action == relayv1.RolloutActionRequest_ACTION_APPROVE {
		use, args = use+" [STAGE]", cobra.MaximumNArgs(1)
	}
	cmd := &cobra.Command{
		Use:     use,
		Short:   short,
		Example: example,
		Args:    args,
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &relayv1.RolloutActionRequest{Action: action}
			if len(args) == 1 {
				req.Stage = args[0]
			}
			st, err := call(cmd.Context(), &af, func(ctx context.Context, c relayv1.AdminClient) (*relayv1.RolloutStatus, error) {
				return c.ActOnRollout(ctx, req)
			})
			if err != nil {
				return apiError(err)
			}
			return printRolloutSummary(cmd.OutOrStdout(), st)
		},
	}
	af.add(cmd)
	return cmd
}

// printRolloutSummary prints one line: the rollout, its phase, stage and counts.
func printRolloutSummary(w io.Writer, st *relayv1.RolloutStatus) error {
	t := newTable(w, "ROLLOUT", "PHASE", "STAGE", "TOTAL", "RELEASED", "HEALTHY", "FAILED", "PENDING", "REVISION", "REASON")
	t.row(st.GetId(), st.GetPhase(), stageName(st), st.GetTotal(), st.GetReleased(), st.GetHealthy(), st.GetFailed(), st.GetPending(),
		shortRevision(st.GetFromRevision())+"→"+shortRevision(st.GetToRevision()), st.GetReason())
	return t.flush()
}

// printRollout prints the summary, the stages and each cluster's state.
func printRollout(w io.Writer, st *relayv1.RolloutStatus) error {
	if err := printRolloutSummary(w, st); err != nil {
		return err
	}
	if st.GetQueued() {
		fmt.Fprintln(w, "\nA newer policy set waits for this rollout to end.")
	}
	fmt.Fprintln(w)
	t := newTable(w, "STAGE", "CLUSTERS", "MAX CONCURRENT", "MAX FAILURES", "MIN HEALTHY", "DEADLINE", "GATE")
	for _, s := range st.GetStages() {
		gate := "-"
		switch {
		case s.GetApproval() && s.GetApproved():
			gate = "approved"
		case s.GetApproval():
			gate = "approval"
		}
		t.row(s.GetName(), s.GetClusters(), s.GetMaxConcurrent(), s.GetMaxFailures(), s.GetMinHealthy().AsDuration(), s.GetProgressDeadline().AsDuration(), gate)
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	t = newTable(w, "CLUSTER", "STAGE", "STATE", "RELEASED", "REASON")
	for _, c := range st.GetClusters() {
		released := "-"
		if c.GetReleased() != nil {
			released = c.GetReleased().AsTime().Local().Format(time.DateTime)
		}
		t.row(c.GetName(), c.GetStage(), c.GetState(), released, c.GetReason())
	}
	return t.flush()
}

func stageName(st *relayv1.RolloutStatus) string {
	if i := int(st.GetStage()); i < len(st.GetStages()) {
		return fmt.Sprintf("%d/%d %s", i+1, len(st.GetStages()), st.GetStages()[i].GetName())
	}
	return fmt.Sprintf("%d/%d", len(st.GetStages()), len(st.GetStages()))
}

func shortRevision(revision string) string {
	if len(revision) > 12 {
		return revision[:12]
	}
	return revision
}

// getRollouts is get rollouts: the rollout in progress, or the last one,
// as one row.
func getRollouts(cmd *cobra.Command, af *adminFlags, out string) error {
	st, err := call(cmd.Context(), af, func(ctx context.Context, c relayv1.AdminClient) (*relayv1.RolloutStatus, error) {
		return c.GetRollout(ctx, &relayv1.GetRolloutRequest{})
	})
	if err != nil {
		return apiError(err)
	}
	if out == "yaml" || out == "json" {
		return printData(cmd.OutOrStdout(), out, st)
	}
	return printRolloutSummary(cmd.OutOrStdout(), st)
}
