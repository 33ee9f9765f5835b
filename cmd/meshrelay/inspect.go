package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/meshrelay/meshrelay/api/meta"
	"github.com/meshrelay/meshrelay/core/server"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"sigs.k8s.io/yaml"
)

// inspectOutputFlag adds -o table|wide|yaml|json.
func inspectOutputFlag(cmd *cobra.Command, out *string, wide bool) {
	formats := []string{"table", "yaml", "json"}
	if wide {
		formats = []string{"table", "wide", "yaml", "json"}
	}
	cmd.Flags().StringVarP(out, "output", "o", "table", "output format: "+strings.Join(formats, ", "))
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(formats, cobra.ShellCompDirectiveNoFileComp))
}

// apiError turns an admin API error into the CLI's: exit 3 for an unknown
// name, the server's message (made printable: it may quote names agents
// chose) without the gRPC framing otherwise.
func apiError(err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	msg := meta.Printable(st.Message())
	switch st.Code() {
	case codes.NotFound:
		return problem("%s", msg)
	case codes.InvalidArgument:
		return &exitError{code: 2, err: fmt.Errorf("%s", msg)}
	default:
		return fmt.Errorf("%s: %s", strings.ToLower(st.Code().String()), msg)
	}
}

func newGetCommand() *cobra.Command {
	var af adminFlags
	var out string
	var labelColumns []string
	req := &relayv1.ListRequest{}
	cmd := &cobra.Command{
		Use:   "get clusters|meshes|workloads|destinations|policies|outputs|rollouts",
		Short: "List the fleet's clusters, meshes, workloads, destinations, policies, outputs or rollouts",
		Long: `List objects of one kind across the fleet, as the server sees them now.

Meshes, workloads and destinations are derived by the server from what each
cluster's agent discovered: a workload is a Deployment, StatefulSet or
DaemonSet with its service account, labels, localities and meshes; a
destination is a Service in one cluster with its ports, backing workloads,
endpoints and how many clusters have it (describe destination lists them).
Outputs are the objects each backend computed for a cluster.

-c, -n and -l narrow the list: -l is a Kubernetes label selector, matched
against a cluster's labels (meshrelay cluster label), a workload's pod
template labels, a destination's Service labels, a policy's labels and an
output object's labels. -L KEY adds a column of each cluster's label KEY,
and -o wide a column of all its labels. For policies, -c keeps those
that reach the cluster or were defined in it.

-o wide adds columns; -o yaml and -o json print the admin API's answer,
except for outputs, which print the output objects themselves (a
multi-document YAML stream, or a JSON List) ready to read or diff.`,
		Example: `  meshrelay get clusters
  meshrelay get clusters -l env=prod,region!=us-east -L region,tier
  meshrelay get workloads -n bookinfo -l app=reviews -o wide
  meshrelay get destinations -c west
  meshrelay get policies -o yaml
  meshrelay get outputs -c west --backend istio -o yaml
  meshrelay get rollouts`,
		Args:      cobra.ExactArgs(1),
		ValidArgs: append(slices.Clone(server.ListKinds), "rollouts"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if args[0] == "rollouts" || args[0] == "rollout" {
				return getRollouts(cmd, &af, out)
			}
			kind := server.NormalizeKind(args[0])
			if kind == "" {
				return &exitError{code: 2, err: fmt.Errorf("unknown kind %q: want one of %s", args[0], strings.Join(server.ListKinds, ", "))}
			}
			if !slices.Contains([]string{"table", "wide", "yaml", "json"}, out) {
				return &exitError{code: 2, err: fmt.Errorf("--output must be table, wide, yaml or json, not %q", out)}
			}
			req.Kind = kind
			req.Bodies = kind == server.KindOutputs && (out == "yaml" || out == "json")
			resp, err := call(cmd.Context(), &af, func(ctx context.Context, c relayv1.AdminClient) (*relayv1.ListResponse, error) {
				return c.List(ctx, req)
			})
			if err != nil {
				return apiError(err)
			}
			return printList(cmd.OutOrStdout(), kind, out, labelColumns, resp)
		},
	}
	af.add(cmd)
	inspectOutputFlag(cmd, &out, true)
	fs := cmd.Flags()
	fs.StringVarP(&req.Cluster, "cluster", "c", "", "only this cluster")
	fs.StringVarP(&req.Namespace, "namespace", "n", "", "only this namespace (default: every namespace)")
	fs.StringVarP(&req.LabelSelector, "selector", "l", "", "label selector, such as app=reviews,version!=v1")
	fs.StringVar(&req.Backend, "backend", "", "outputs only: only this backend (istio, envoy, cilium)")
	fs.StringSliceVarP(&labelColumns, "label-columns", "L", nil, "clusters only: a column with each cluster's value of these label keys (repeatable or comma-separated)")
	_ = cmd.RegisterFlagCompletionFunc("cluster", completeNames(&af, server.KindClusters))
	return cmd
}

// printList prints a List answer in the chosen format.
func printList(w io.Writer, kind, format string, labelColumns []string, resp *relayv1.ListResponse) error {
	if kind == server.KindOutputs && format != "table" && format != "wide" {
		return printObjects(w, format, resp.GetOutputs())
	}
	if format == "yaml" || format == "json" {
		return printData(w, format, resp)
	}
	wide := format == "wide"
	switch kind {
	case server.KindClusters:
		return printClustersTo(w, resp.GetClusters(), clusterColumns{labels: labelColumns, wide: wide})
	case server.KindMeshes:
		return printMeshes(w, resp.GetMeshes(), wide)
	case server.KindWorkloads:
		return printWorkloads(w, resp.GetWorkloads(), wide)
	case server.KindDestinations:
		return printDestinations(w, resp.GetDestinations(), wide)
	case server.KindPolicies:
		return printPoliciesTo(w, resp.GetPolicies(), wide)
	default:
		return printOutputs(w, resp.GetOutputs(), wide)
	}
}

// printObjects prints output objects as a YAML stream or a JSON List.
func printObjects(w io.Writer, format string, outs []*relayv1.OutputResource) error {
	items := make([]json.RawMessage, 0, len(outs))
	for _, o := range outs {
		items = append(items, json.RawMessage(o.GetBody()))
	}
	if format == "json" {
		data, err := json.MarshalIndent(map[string]any{"apiVersion": "v1", "kind": "List", "items": items}, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(w, string(data))
		return err
	}
	for i, item := range items {
		y, err := yaml.JSONToYAML(item)
		if err != nil {
			return fmt.Errorf("output %s %s/%s: %w", outs[i].GetKind(), outs[i].GetNamespace(), outs[i].GetName(), err)
		}
		fmt.Fprintf(w, "---\n# %s/%s\n%s", meta.Printable(outs[i].GetCluster()), meta.Printable(outs[i].GetBackend()), y)
	}
	return nil
}

func printMeshes(w io.Writer, meshes []*relayv1.Mesh, wide bool) error {
	headers := []string{"CLUSTER", "MESH", "TYPE", "NAMESPACE", "VERSION", "WORKLOADS"}
	if wide {
		headers = append(headers, "TRUST DOMAIN", "NETWORK", "ENVOY NODES")
	}
	t := newTable(w, headers...)
	for _, m := range meshes {
		cells := []any{m.GetCluster(), m.GetName(), m.GetType(), orDash(m.GetNamespace()), orDash(m.GetVersion()), m.GetWorkloads()}
		if wide {
			cells = append(cells, orDash(m.GetTrustDomain()), orDash(m.GetNetwork()), orDash(strings.Join(m.GetEnvoyNodes(), ",")))
		}
		t.row(cells...)
	}
	return t.flush()
}

func printWorkloads(w io.Writer, ws []*relayv1.Workload, wide bool) error {
	headers := []string{"CLUSTER", "NAMESPACE", "WORKLOAD", "KIND", "MESHES", "READY", "LOCALITIES"}
	if wide {
		headers = append(headers, "SERVICE ACCOUNT", "DESTINATIONS", "LABELS")
	}
	t := newTable(w, headers...)
	for _, wl := range ws {
		cells := []any{wl.GetCluster(), wl.GetNamespace(), wl.GetName(), wl.GetKind(), orDash(strings.Join(wl.GetMeshes(), ",")),
			fmt.Sprintf("%d/%d", wl.GetReadyEndpoints(), wl.GetEndpoints()), orDash(strings.Join(wl.GetLocalities(), ","))}
		if wide {
			cells = append(cells, wl.GetServiceAccount(), orDash(strings.Join(wl.GetDestinations(), ",")), labelString(wl.GetLabels()))
		}
		t.row(cells...)
	}
	return t.flush()
}

func printDestinations(w io.Writer, ds []*relayv1.Destination, wide bool) error {
	headers := []string{"CLUSTER", "NAMESPACE", "DESTINATION", "TYPE", "PORTS", "WORKLOADS", "READY"}
	if wide {
		headers = append(headers, "CLUSTERS", "MESHES", "LABELS")
	}
	t := newTable(w, headers...)
	for _, d := range ds {
		cells := []any{d.GetCluster(), d.GetNamespace(), d.GetName(), d.GetType(), orDash(portString(d.GetPorts())),
			orDash(strings.Join(d.GetWorkloads(), ",")), fmt.Sprintf("%d/%d", d.GetReadyEndpoints(), d.GetEndpoints())}
		if wide {
			cells = append(cells, d.GetClusterCount(), orDash(strings.Join(d.GetMeshes(), ",")), labelString(d.GetLabels()))
		}
		t.row(cells...)
	}
	return t.flush()
}

func portString(ports []*relayv1.DestinationPort) string {
	var out []string
	for _, p := range ports {
		s := fmt.Sprintf("%d/%s", p.GetPort(), p.GetProtocol())
		if p.GetName() != "" {
			s = p.GetName() + ":" + s
		}
		out = append(out, s)
	}
	return strings.Join(out, ",")
}

func labelString(l map[string]string) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(l)) {
		out = append(out, k+"="+l[k])
	}
	return orDash(strings.Join(out, ","))
}

func printOutputs(w io.Writer, outs []*relayv1.OutputResource, wide bool) error {
	headers := []string{"CLUSTER", "BACKEND", "KIND", "NAMESPACE", "NAME", "APPLIED"}
	if wide {
		headers = append(headers, "API VERSION", "POLICIES", "ERROR")
	}
	t := newTable(w, headers...)
	for _, o := range outs {
		applied := "yes"
		switch {
		case o.GetError() != "":
			applied = "error"
		case !o.GetApplied():
			applied = "pending"
		}
		cells := []any{o.GetCluster(), o.GetBackend(), o.GetKind(), orDash(o.GetNamespace()), o.GetName(), applied}
		if wide {
			cells = append(cells, o.GetApiVersion(), orDash(strings.Join(o.GetPolicies(), ",")), orDash(o.GetError()))
		}
		t.row(cells...)
	}
	return t.flush()
}

// completeNames completes the names of a kind from the server's List,
// honouring the command's --namespace and --cluster when set.
func completeNames(af *adminFlags, kind string) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 && kind != server.KindClusters {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		c, ctx, done, err := af.client(cmd.Context())
		if err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		defer done()
		req := &relayv1.ListRequest{Kind: kind}
		if kind != server.KindClusters {
			req.Namespace, _ = cmd.Flags().GetString("namespace")
			req.Cluster, _ = cmd.Flags().GetString("cluster")
		}
		resp, err := c.List(ctx, req)
		if err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		var names []string
		for _, n := range listNames(resp) {
			if strings.HasPrefix(n, toComplete) && !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
		return names, cobra.ShellCompDirectiveNoFileComp
	}
}

// listNames returns the names describe accepts for a List answer's objects.
func listNames(resp *relayv1.ListResponse) []string {
	var names []string
	for _, c := range resp.GetClusters() {
		names = append(names, c.GetName())
	}
	for _, d := range resp.GetDestinations() {
		names = append(names, d.GetNamespace()+"/"+d.GetName())
	}
	for _, p := range resp.GetPolicies() {
		ref := meta.PolicyRef{Kind: p.GetKind(), Namespace: p.GetNamespace(), Name: p.GetName(), Cluster: p.GetSourceCluster()}
		names = append(names, ref.String())
	}
	return names
}

func newDescribeCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "describe",
		Short: "Show one destination, policy or cluster across the fleet",
		Long: `Show everything the server knows about one destination, policy or cluster:

  destination  the clusters that have the Service, its backing workloads,
               the policies that select it, what each backend emitted for it
               and the diagnostics of those policies;
  policy       every cluster where it applies, whether the agent there
               applied it (with the agent's errors), the resources it
               produced and its diagnostics;
  cluster      its connection, meshes, counts, outputs and the policies
               that reach it;
  rollout      the staged rollout in progress, or the last one: its stages
               and each cluster's state and reason.

An unknown name exits 3.`,
		Example: `  meshrelay describe destination bookinfo/reviews
  meshrelay describe policy reviews-split -n bookinfo
  meshrelay describe cluster west -o yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(
		newDescribeKindCommand("destination", server.KindDestinations,
			"Show a Service across the fleet: clusters, workloads, policies, outputs",
			`  meshrelay describe destination reviews -n bookinfo
  meshrelay describe destination bookinfo/reviews -c west`,
			func(ctx context.Context, c relayv1.AdminClient, req *relayv1.DescribeRequest, w io.Writer, format string) error {
				d, err := c.DescribeDestination(ctx, req)
				if err != nil {
					return apiError(err)
				}
				if format != "table" {
					return printData(w, format, d)
				}
				if err := printDestinationDescription(w, d); err != nil {
					return err
				}
				return printCallers(ctx, c, d, w)
			}),
		newDescribeKindCommand("policy", server.KindPolicies,
			"Show a policy: where it applies, its state per cluster, its outputs",
			`  meshrelay describe policy reviews-split
  meshrelay describe policy TrafficPolicy/bookinfo/reviews-split -o yaml   # the management source's
  meshrelay describe policy AccessPolicy/bookinfo/reviews-access@west      # the one defined in cluster west`,
			func(ctx context.Context, c relayv1.AdminClient, req *relayv1.DescribeRequest, w io.Writer, format string) error {
				d, err := c.DescribePolicy(ctx, req)
				if err != nil {
					return apiError(err)
				}
				if format != "table" {
					return printData(w, format, d)
				}
				return printPolicyDescription(w, d)
			}),
		newDescribeKindCommand("cluster", server.KindClusters,
			"Show a cluster: connection, meshes, outputs, the policies reaching it",
			`  meshrelay describe cluster west`,
			func(ctx context.Context, c relayv1.AdminClient, req *relayv1.DescribeRequest, w io.Writer, format string) error {
				d, err := c.DescribeCluster(ctx, req)
				if err != nil {
					return apiError(err)
				}
				if format != "table" {
					return printData(w, format, d)
				}
				return printClusterDescription(w, d)
			}),
		newRolloutStatusCommand("rollout", "Show the staged rollout in progress, or the last one: its stages and each cluster's state", "  meshrelay describe rollout"),
	)
	return cmd
}

type describeFunc func(ctx context.Context, c relayv1.AdminClient, req *relayv1.DescribeRequest, w io.Writer, format string) error

func newDescribeKindCommand(use, kind, short, example string, describe describeFunc) *cobra.Command {
	var af adminFlags
	var out string
	req := &relayv1.DescribeRequest{}
	cmd := &cobra.Command{
		Use:               use + " NAME",
		Short:             short,
		Example:           example,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeNames(&af, kind),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !slices.Contains([]string{"table", "yaml", "json"}, out) {
				return &exitError{code: 2, err: fmt.Errorf("--output must be table, yaml or json, not %q", out)}
			}
			c, ctx, done, err := af.client(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			req.Name = args[0]
			return describe(ctx, c, req, cmd.OutOrStdout(), out)
		},
	}
	af.add(cmd)
	inspectOutputFlag(cmd, &out, false)
	if kind != server.KindClusters {
		cmd.Flags().StringVarP(&req.Namespace, "namespace", "n", "", "the namespace, when the name alone is ambiguous")
		clusterHelp := "only the Service in this cluster"
		if kind == server.KindPolicies {
			clusterHelp = "only a policy defined in this workload cluster"
		}
		cmd.Flags().StringVarP(&req.Cluster, "cluster", "c", "", clusterHelp)
		_ = cmd.RegisterFlagCompletionFunc("cluster", completeNames(&af, server.KindClusters))
	}
	return cmd
}

// section prints a titled block.
func section(w io.Writer, title string) { fmt.Fprintf(w, "\n%s:\n", title) }

func printDestinationDescription(w io.Writer, d *relayv1.DestinationDescription) error {
	var clusters []string
	for _, dst := range d.GetDestinations() {
		clusters = append(clusters, dst.GetCluster())
	}
	fmt.Fprintf(w, "Destination: %s/%s\nClusters:    %s\n", meta.Printable(d.GetNamespace()), meta.Printable(d.GetName()), meta.Printable(strings.Join(clusters, ", ")))
	section(w, "Services")
	if err := printDestinations(w, d.GetDestinations(), false); err != nil {
		return err
	}
	section(w, "Workloads")
	if err := printWorkloads(w, d.GetWorkloads(), true); err != nil {
		return err
	}
	section(w, "Policies selecting it")
	if err := printPoliciesTo(w, d.GetPolicies(), false); err != nil {
		return err
	}
	section(w, "Outputs for it")
	if err := printOutputs(w, d.GetOutputs(), true); err != nil {
		return err
	}
	return printDiagnostics(w, d.GetDiagnostics())
}

func printPolicyDescription(w io.Writer, d *relayv1.PolicyDescription) error {
	p := d.GetStatus()
	src := "management"
	if p.GetSourceCluster() != "" {
		src = "cluster " + p.GetSourceCluster()
	}
	fmt.Fprintf(w, "Policy:  %s %s/%s\nSource:  %s\nState:   %s\nApplied: %d/%d clusters\n",
		meta.Printable(p.GetKind()), meta.Printable(p.GetNamespace()), meta.Printable(p.GetName()), meta.Printable(src), meta.Printable(p.GetState()),
		p.GetAppliedClusters(), p.GetTargetClusters())
	section(w, "Clusters")
	t := newTable(w, "CLUSTER", "STATE", "RESOURCES", "ERRORS")
	for _, c := range d.GetClusters() {
		state := "applied"
		switch {
		case len(c.GetErrors()) > 0:
			state = "failed"
		case c.GetPending():
			state = "pending"
		}
		t.row(c.GetCluster(), state, c.GetResources(), orDash(strings.Join(c.GetErrors(), "; ")))
	}
	if err := t.flush(); err != nil {
		return err
	}
	section(w, "Outputs")
	if err := printOutputs(w, d.GetOutputs(), false); err != nil {
		return err
	}
	section(w, "Problems")
	problems := append(append([]string{}, p.GetErrors()...), p.GetWarnings()...)
	if len(problems) == 0 {
		fmt.Fprintln(w, "  none")
	}
	for _, e := range problems {
		fmt.Fprintf(w, "  %s\n", meta.Printable(e))
	}
	return nil
}

func printClusterDescription(w io.Writer, d *relayv1.ClusterDescription) error {
	fmt.Fprintf(w, "Cluster: %s\nWorkloads: %d  Destinations: %d\n\n", meta.Printable(d.GetStatus().GetName()), d.GetWorkloads(), d.GetDestinations())
	fmt.Fprintf(w, "Labels: %s\n\n", meta.Printable(orDash(formatLabels(d.GetStatus().GetLabels()))))
	if err := printClustersTo(w, []*relayv1.ClusterStatus{d.GetStatus()}, clusterColumns{}); err != nil {
		return err
	}
	section(w, "Meshes")
	if err := printMeshes(w, d.GetMeshes(), true); err != nil {
		return err
	}
	section(w, "Policies reaching it")
	if err := printPoliciesTo(w, d.GetPolicies(), false); err != nil {
		return err
	}
	return printDiagnostics(w, d.GetDiagnostics())
}

func printDiagnostics(w io.Writer, diags []*relayv1.Diagnostic) error {
	section(w, "Diagnostics")
	if len(diags) == 0 {
		fmt.Fprintln(w, "  none")
		return nil
	}
	t := newTable(w, "SEVERITY", "POLICY", "CLUSTER", "PLUGIN", "PATH", "SUMMARY")
	for _, d := range diags {
		t.row(d.GetSeverity(), d.GetPolicy(), orDash(d.GetCluster()), orDash(d.GetPlugin()), orDash(d.GetPath()), d.GetSummary())
	}
	return t.flush()
}
