package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/meshrelay/meshrelay/api/meta"
	"github.com/meshrelay/meshrelay/core/server"
	"github.com/meshrelay/meshrelay/internal/adminclient"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"github.com/spf13/cobra"
)

// maxAdminResponse bounds an admin API answer the CLI reads: large enough
// for every output object of a big fleet (get outputs -o yaml), which -c
// and --backend narrow.
const maxAdminResponse = 256 << 20

// adminFlags locate and authenticate to a server's admin API.
type adminFlags struct {
	server, caFile, tokenFile, serverName string
	insecure                              bool
	timeout                               time.Duration
}

func (f *adminFlags) add(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.server, "server", "localhost:9900", "relay address of the management server")
	fs.StringVar(&f.caFile, "ca-file", "meshrelay-data/ca-bundle.crt", "CA bundle to trust the server with")
	fs.StringVar(&f.tokenFile, "admin-token-file", "meshrelay-data/admin-token", "file holding the admin token")
	fs.StringVar(&f.serverName, "server-name", "", "name to verify in the server's certificate (default: the host of --server)")
	fs.BoolVar(&f.insecure, "insecure", false, "plaintext, for a server started with --insecure-loopback (only to a loopback --server)")
	fs.DurationVar(&f.timeout, "timeout", 30*time.Second, "how long to wait for the server")
}

// client connects to the admin API and returns a context carrying the token.
func (f *adminFlags) client(ctx context.Context) (relayv1.AdminClient, context.Context, func(), error) {
	c, err := adminclient.Dial(adminclient.Options{
		Addr: f.server, CAFile: f.caFile, ServerName: f.serverName, TokenFile: f.tokenFile,
		Insecure: f.insecure, MaxResponse: maxAdminResponse,
	})
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := context.WithTimeout(c.Context(ctx), f.timeout)
	return c, ctx, func() { cancel(); c.Close() }, nil
}

// call makes one admin API call on a connection of its own.
func call[T any](ctx context.Context, f *adminFlags, rpc func(context.Context, relayv1.AdminClient) (T, error)) (T, error) {
	c, ctx, done, err := f.client(ctx)
	if err != nil {
		var zero T
		return zero, err
	}
	defer done()
	return rpc(ctx, c)
}

func newClusterCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Register, label, list and deregister workload clusters",
		Example: `  meshrelay cluster register east --label region=eu-west --label env=prod > east.token
  meshrelay cluster label east tier=gold env-
  meshrelay cluster list
  meshrelay cluster deregister east`,
	}
	cmd.AddCommand(newClusterRegisterCommand(), newClusterLabelCommand(), newClusterListCommand(), newClusterDeregisterCommand())
	return cmd
}

func newClusterRegisterCommand() *cobra.Command {
	var af adminFlags
	var ttl time.Duration
	var reusable, shared bool
	var labels []string
	cmd := &cobra.Command{
		Use:   "register NAME",
		Short: "Create a relay identity token bound to a cluster and print it",
		Long: `Create a relay identity token bound to cluster NAME and print it on stdout.
The server keeps only its hash. The token expires (--token-ttl, else the
server's default of a day). Under mTLS the agent of NAME trades it once for
a client certificate and renews that certificate from then on: the
registration consumes the token, so an agent that lost its state directory
needs a new one, unless --reusable was given (as agents run with
--leader-elect need when each replica keeps its own state directory). In --mode tls the agent sends
the token on every stream until it expires. Registering a cluster again
replaces its token; its certificates stay valid until deregistration.

--label KEY=VALUE (repeatable) gives the cluster labels, which the
clusterSelector of policies matches; registering again adds them to the
labels the cluster has. Keys and values are Kubernetes label keys and
values, at most 64 labels a cluster.`,
		Example: `  meshrelay cluster register east > east.token
  meshrelay cluster register west --label region=us-east --label env=prod
  meshrelay cluster register west --token-ttl 1h
  meshrelay cluster register edge-42 --allow-shared-token`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			set, remove, err := parseLabelChanges(labels)
			if err == nil && len(remove) > 0 {
				err = fmt.Errorf("--label %s-: registering sets labels; remove them with meshrelay cluster label", remove[0])
			}
			if err != nil {
				return &exitError{code: 2, err: err}
			}
			resp, err := call(cmd.Context(), &af, func(ctx context.Context, c relayv1.AdminClient) (*relayv1.RegisterClusterResponse, error) {
				return c.RegisterCluster(ctx, &relayv1.RegisterClusterRequest{
					Cluster: args[0], TokenTtlSeconds: int64(ttl.Seconds()), Reusable: reusable, AllowSharedToken: shared, Labels: set,
				})
			})
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), resp.GetToken())
			return nil
		},
	}
	af.add(cmd)
	cmd.Flags().DurationVar(&ttl, "token-ttl", 0, "token lifetime (0: the server's --token-ttl, a day by default)")
	cmd.Flags().BoolVar(&reusable, "reusable", false, "keep the token valid after a registration (by default a registration consumes it)")
	cmd.Flags().BoolVar(&shared, "allow-shared-token", false, "let the cluster's agent register with the server's shared token")
	cmd.Flags().StringArrayVar(&labels, "label", nil, "a label KEY=VALUE of the cluster (repeatable)")
	return cmd
}

func newClusterLabelCommand() *cobra.Command {
	var af adminFlags
	cmd := &cobra.Command{
		Use:   "label NAME KEY=VALUE... KEY-...",
		Short: "Set and remove labels of a registered cluster",
		Long: `Set (KEY=VALUE) and remove (KEY-) labels of registered cluster NAME, as
kubectl label does, and print the cluster's labels. The server changes its
registry record by compare-and-set, so concurrent changes of other labels
are kept. Keys and values are Kubernetes label keys and values, at most 64
labels a cluster. Policies whose clusterSelector starts or stops matching
the cluster are translated again for the clusters they concern.`,
		Example: `  meshrelay cluster label east region=eu-west env=prod
  meshrelay cluster label east tier=gold env-`,
		Args: cobra.MinimumNArgs(2),
		ValidArgsFunction: func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			if len(args) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			return completeNames(&af, server.KindClusters)(cmd, args, toComplete)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			set, remove, err := parseLabelChanges(args[1:])
			if err != nil {
				return &exitError{code: 2, err: err}
			}
			c, ctx, done, err := af.client(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			cs, err := c.LabelCluster(ctx, &relayv1.LabelClusterRequest{Cluster: args[0], Set: set, Remove: remove})
			if err != nil {
				return apiError(err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "cluster %s labeled: %s\n", meta.Printable(cs.GetName()), meta.Printable(orDash(formatLabels(cs.GetLabels()))))
			return nil
		},
	}
	af.add(cmd)
	return cmd
}

// parseLabelChanges parses kubectl label's arguments: KEY=VALUE sets a
// label, KEY- removes one.
func parseLabelChanges(args []string) (set map[string]string, remove []string, err error) {
	for _, a := range args {
		if k, v, ok := strings.Cut(a, "="); ok {
			if k == "" {
				return nil, nil, fmt.Errorf("label %q: empty key", a)
			}
			if set == nil {
				set = map[string]string{}
			}
			if old, dup := set[k]; dup && old != v {
				return nil, nil, fmt.Errorf("label %q given twice with different values", k)
			}
			set[k] = v
			continue
		}
		if k, ok := strings.CutSuffix(a, "-"); ok && k != "" {
			remove = append(remove, k)
			continue
		}
		return nil, nil, fmt.Errorf("label %q: want KEY=VALUE to set or KEY- to remove", a)
	}
	return set, remove, nil
}

// formatLabels prints labels as a selector does: k=v,k2=v2, sorted.
func formatLabels(labels map[string]string) string {
	var kv []string
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		kv = append(kv, k+"="+labels[k])
	}
	return strings.Join(kv, ",")
}

func newClusterDeregisterCommand() *cobra.Command {
	var af adminFlags
	cmd := &cobra.Command{
		Use:     "deregister NAME",
		Short:   "Revoke a cluster: its token and certificates are refused, its stream is closed",
		Example: `  meshrelay cluster deregister east`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := call(cmd.Context(), &af, func(ctx context.Context, c relayv1.AdminClient) (*relayv1.DeregisterClusterResponse, error) {
				return c.DeregisterCluster(ctx, &relayv1.DeregisterClusterRequest{Cluster: args[0]})
			}); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "cluster %s deregistered\n", args[0])
			return nil
		},
	}
	af.add(cmd)
	return cmd
}

func newClusterListCommand() *cobra.Command {
	var af adminFlags
	var out string
	cmd := &cobra.Command{
		Use:     "list",
		Short:   "List registered clusters and their connection state",
		Example: `  meshrelay cluster list -o yaml`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			resp, err := call(cmd.Context(), &af, func(ctx context.Context, c relayv1.AdminClient) (*relayv1.ListClustersResponse, error) {
				return c.ListClusters(ctx, &relayv1.ListClustersRequest{})
			})
			if err != nil {
				return err
			}
			if out != "table" {
				return printData(cmd.OutOrStdout(), out, resp)
			}
			return printClustersTo(cmd.OutOrStdout(), resp.GetClusters(), clusterColumns{})
		},
	}
	af.add(cmd)
	outputFlag(cmd, &out)
	return cmd
}

// clusterColumns are the optional columns of the clusters table: one per
// label key (get clusters -L KEY), and every label (-o wide).
type clusterColumns struct {
	labels []string
	wide   bool
}

func printClustersTo(w io.Writer, clusters []*relayv1.ClusterStatus, cols clusterColumns) error {
	head := []string{"CLUSTER", "STATE", "REPLICA", "MESHES", "INPUTS", "INPUT AGE", "OUTPUTS"}
	for _, k := range cols.labels {
		head = append(head, strings.ToUpper(k))
	}
	if cols.wide {
		head = append(head, "LABELS")
	}
	t := newTable(w, head...)
	for _, c := range clusters {
		state := "disconnected"
		switch {
		case c.GetRevoked():
			state = "revoked"
		case c.GetConnected():
			state = "connected"
		case c.GetStale():
			state = "stale"
		}
		age := "-"
		if c.GetInputUpdated() != nil {
			age = time.Since(c.GetInputUpdated().AsTime()).Round(time.Second).String()
		}
		var outs []string
		for _, o := range c.GetOutputs() {
			mark := "pending"
			if o.GetApplied() {
				mark = "applied"
			}
			if o.GetErrors() > 0 {
				mark = fmt.Sprintf("%d errors", o.GetErrors())
			}
			outs = append(outs, fmt.Sprintf("%s:%d(%s)", o.GetBackend(), o.GetResources(), mark))
		}
		row := []any{c.GetName(), state, orDash(c.GetReplica()), orDash(strings.Join(c.GetMeshes(), ",")), c.GetInputResources(), age, orDash(strings.Join(outs, " "))}
		for _, k := range cols.labels {
			row = append(row, orDash(c.GetLabels()[k]))
		}
		if cols.wide {
			row = append(row, orDash(formatLabels(c.GetLabels())))
		}
		t.row(row...)
	}
	return t.flush()
}

func newStatusCommand() *cobra.Command {
	var af adminFlags
	var out string
	var check bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show clusters, policies and plugins as the server sees them",
		Long: `Show, per cluster, whether its agent is connected and how old its input is;
per policy, whether it is accepted and in how many clusters it is applied;
per plugin, whether it is healthy; per MeshTrust, the root rotation's
phase and, for each cluster's mesh, the root that issued its intermediate
CA, the intermediate's expiry and the workloads bounced and pending. With
--check the command exits 3 when a policy is not accepted or a plugin is
failing.`,
		Example: `  meshrelay status
  meshrelay status -o json
  meshrelay status --check   # for scripts`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := call(cmd.Context(), &af, func(ctx context.Context, c relayv1.AdminClient) (*relayv1.Status, error) {
				return c.GetStatus(ctx, &relayv1.GetStatusRequest{})
			})
			if err != nil {
				return err
			}
			if out != "table" {
				err = printData(cmd.OutOrStdout(), out, st)
			} else {
				err = printStatus(cmd, st)
			}
			if err != nil || !check {
				return err
			}
			return checkStatus(st)
		},
	}
	af.add(cmd)
	outputFlag(cmd, &out)
	cmd.Flags().BoolVar(&check, "check", false, "exit 3 when a policy is not accepted or a plugin is failing")
	return cmd
}

func checkStatus(st *relayv1.Status) error {
	var bad []string
	for _, p := range st.GetPolicies() {
		if p.GetState() != "Accepted" {
			bad = append(bad, fmt.Sprintf("%s %s/%s is %s", p.GetKind(), p.GetNamespace(), p.GetName(), p.GetState()))
		}
	}
	for _, p := range st.GetPlugins() {
		if !p.GetHealthy() {
			bad = append(bad, "plugin "+p.GetName()+" is failing")
		}
	}
	if len(bad) > 0 {
		return problem("%s", strings.Join(bad, "; "))
	}
	return nil
}

func printStatus(cmd *cobra.Command, st *relayv1.Status) error {
	w := cmd.OutOrStdout()
	mode := "normal"
	if st.GetSafeMode() {
		mode = "SAFE MODE (no pruning) waiting for " + strings.Join(st.GetWaitingFor(), ", ")
	}
	fmt.Fprintf(w, "Server %s · store %s · %s\n\n", meta.Printable(st.GetServerId()), meta.Printable(st.GetStore()), meta.Printable(mode))
	if err := printClustersTo(w, st.GetClusters(), clusterColumns{}); err != nil {
		return err
	}
	fmt.Fprintln(w)
	if err := printPoliciesTo(w, st.GetPolicies(), false); err != nil {
		return err
	}
	fmt.Fprintln(w)
	t := newTable(w, "PLUGIN", "BACKENDS", "HEALTH")
	for _, p := range st.GetPlugins() {
		h := "ok"
		if !p.GetHealthy() {
			h = "failing: " + p.GetError()
		}
		t.row(p.GetName(), strings.Join(p.GetBackends(), ","), h)
	}
	if err := t.flush(); err != nil {
		return err
	}
	return printTrust(w, st.GetTrust())
}

// printPoliciesTo prints policies; wide lists every problem, not the
// first. While a staged rollout carries some of them, a ROLLOUT column
// says where it is for each.
func printPoliciesTo(w io.Writer, policies []*relayv1.PolicyStatus, wide bool) error {
	rolling := slices.ContainsFunc(policies, func(p *relayv1.PolicyStatus) bool { return p.GetRollout() != "" })
	head := []string{"POLICY", "SOURCE", "STATE", "APPLIED", "PROBLEMS"}
	if rolling {
		head = slices.Insert(head, 4, "ROLLOUT")
	}
	t := newTable(w, head...)
	for _, p := range policies {
		src := "management"
		if p.GetSourceCluster() != "" {
			src = p.GetSourceCluster()
		}
		problems := append(append([]string{}, p.GetErrors()...), p.GetWarnings()...)
		first := "-"
		switch {
		case wide && len(problems) > 0:
			first = strings.Join(problems, "; ")
		case len(problems) > 0:
			first = problems[0]
			if len(problems) > 1 {
				first += fmt.Sprintf(" (+%d more)", len(problems)-1)
			}
		}
		row := []any{fmt.Sprintf("%s %s/%s", p.GetKind(), p.GetNamespace(), p.GetName()), src, p.GetState(),
			fmt.Sprintf("%d/%d", p.GetAppliedClusters(), p.GetTargetClusters()), first}
		if rolling {
			row = slices.Insert(row, 4, any(cmp.Or(p.GetRollout(), "-")))
		}
		t.row(row...)
	}
	return t.flush()
}
