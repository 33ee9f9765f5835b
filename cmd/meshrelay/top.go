package main

import (
	"cmp"
	"context"
	"fmt"
	"github.com/meshrelay/meshrelay/core/server"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/meshrelay/meshrelay/internal/adminclient"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"github.com/spf13/cobra"
)

// topFlags are the flags of meshrelay top.
type topFlags struct {
	cluster string
	n       int
	sort    string
	window  int
	out     string
}

func newTopCommand() *cobra.Command {
	var af adminFlags
	f := topFlags{n: 20, sort: "rps", window: 60, out: "table"}
	cmd := &cobra.Command{
		Use:   "top edges|destinations",
		Short: "Show the busiest or failing traffic edges or destinations, live",
		Long: `Show the traffic between workloads that the agents relayed to the server
over the last minute (--window): each edge from a workload to a destination
service with its requests per second, error rate (HTTP 5xx, and gRPC codes a
server answers for: UNKNOWN, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED,
UNIMPLEMENTED, INTERNAL, UNAVAILABLE, DATA_LOSS) and latency percentiles;
"destinations" sums the edges into each destination service.

Agents receive the proxies' metrics (Envoy's metrics service, OTLP from
gRPC clients; README, "Seeing traffic"). A server replica knows the edges of
the agents connected to it, for the last hour; /metrics exposes them to
Prometheus for longer. A replica started with --advertise-addr is asked by
the others, so any replica answers for the whole fleet; a replica whose
edges are missing from the answer is named on stderr. Replicas that do not
announce an address can be named in --server, comma-separated: each is
asked for its own edges and the answers merged (counts and rates summed; an
edge seen by two replicas, as when its agent moved, gets the higher of
their percentiles).`,
		Example: `  meshrelay top edges
  meshrelay top edges -c east --sort errors -n 5
  meshrelay top destinations --sort p99`,
		Args:      cobra.ExactArgs(1),
		ValidArgs: []string{"edges", "destinations"},
		RunE: func(cmd *cobra.Command, args []string) error {
			if args[0] != "edges" && args[0] != "destinations" {
				return &exitError{code: 2, err: fmt.Errorf("top edges or top destinations, not %q", args[0])}
			}
			if !slices.Contains([]string{"rps", "errors", "p99"}, f.sort) {
				return &exitError{code: 2, err: fmt.Errorf("--sort must be rps, errors or p99, not %q", f.sort)}
			}
			// A replica asks the others that announce an address and
			// merges their edges into its own. Several addresses name
			// replicas that do not: ask each for its own and merge here.
			servers := strings.Split(af.server, ",")
			var lists []*relayv1.ListEdgesResponse
			for _, addr := range servers {
				one := af
				one.server = strings.TrimSpace(addr)
				resp, err := call(cmd.Context(), &one, func(ctx context.Context, c relayv1.AdminClient) (*relayv1.ListEdgesResponse, error) {
					return c.(*adminclient.Client).Traffic().ListEdges(ctx, &relayv1.ListEdgesRequest{WindowSeconds: uint32(f.window), Cluster: f.cluster, Local: len(servers) > 1})
				})
				if err != nil {
					return apiError(fmt.Errorf("%s: %w", one.server, err))
				}
				lists = append(lists, resp)
			}
			resp := server.MergeEdges(lists)
			for _, m := range resp.GetMissing() {
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: the edges lack a replica's: %s\n", m)
			}
			if f.out != "table" {
				return printData(cmd.OutOrStdout(), f.out, resp)
			}
			edges := resp.GetEdges()
			if args[0] == "destinations" {
				edges = byDestination(edges)
			}
			sortEdges(edges, f.sort)
			if f.n > 0 && len(edges) > f.n {
				edges = edges[:f.n]
			}
			return printEdges(cmd.OutOrStdout(), edges, args[0] == "destinations")
		},
	}
	af.add(cmd)
	fs := cmd.Flags()
	fs.StringVarP(&f.cluster, "cluster", "c", "", "only edges from or to this cluster")
	fs.IntVarP(&f.n, "limit", "n", f.n, "show at most this many rows (0: all)")
	fs.StringVar(&f.sort, "sort", f.sort, "order by rps, errors (error rate) or p99 (latency), highest first")
	fs.IntVar(&f.window, "window", f.window, "seconds of traffic to compute rates from (at most 3600; latency from the last 60)")
	cmd.Flags().StringVarP(&f.out, "output", "o", f.out, "output format: table, yaml, json")
	_ = cmd.RegisterFlagCompletionFunc("cluster", completeNames(&af, "clusters"))
	return cmd
}

// byDestination sums edges into one per destination cluster and service.
func byDestination(edges []*relayv1.Edge) []*relayv1.Edge {
	type key struct{ cluster, service string }
	sums := map[key]*relayv1.Edge{}
	var order []key
	for _, e := range edges {
		k := key{e.GetDestinationCluster(), e.GetDestinationService()}
		d, ok := sums[k]
		if !ok {
			d = &relayv1.Edge{DestinationCluster: k.cluster, DestinationService: k.service}
			sums[k] = d
			order = append(order, k)
		}
		d.Requests += e.GetRequests()
		d.Errors += e.GetErrors()
		d.Rps += e.GetRps()
		// The slowest caller's p99 bounds the destination's.
		d.P99Ms = max(d.P99Ms, e.GetP99Ms())
		d.P50Ms = max(d.P50Ms, e.GetP50Ms())
	}
	out := make([]*relayv1.Edge, 0, len(order))
	for _, k := range order {
		d := sums[k]
		if d.Requests > 0 {
			d.ErrorRate = float64(d.Errors) / float64(d.Requests)
		}
		out = append(out, d)
	}
	return out
}

func sortEdges(edges []*relayv1.Edge, by string) {
	value := func(e *relayv1.Edge) float64 {
		switch by {
		case "errors":
			return e.GetErrorRate()
		case "p99":
			return e.GetP99Ms()
		}
		return e.GetRps()
	}
	slices.SortStableFunc(edges, func(a, b *relayv1.Edge) int {
		return cmp.Or(cmp.Compare(value(b), value(a)), cmp.Compare(a.GetDestinationService(), b.GetDestinationService()))
	})
}

func printEdges(w io.Writer, edges []*relayv1.Edge, destinations bool) error {
	headers := []string{"SOURCE CLUSTER", "SOURCE WORKLOAD", "DESTINATION CLUSTER", "DESTINATION", "PROTOCOL", "REQUESTS", "RPS", "ERRORS", "P50", "P99"}
	if destinations {
		headers = []string{"CLUSTER", "DESTINATION", "REQUESTS", "RPS", "ERRORS", "P50", "P99"}
	}
	t := newTable(w, headers...)
	for _, e := range edges {
		stats := []any{e.GetRequests(), strconv.FormatFloat(e.GetRps(), 'f', 2, 64), percent(e.GetErrorRate()), millis(e.GetP50Ms()), millis(e.GetP99Ms())}
		if destinations {
			t.row(append([]any{e.GetDestinationCluster(), e.GetDestinationService()}, stats...)...)
			continue
		}
		t.row(append([]any{e.GetSourceCluster(), e.GetSourceWorkload(), e.GetDestinationCluster(), e.GetDestinationService(), e.GetProtocol()}, stats...)...)
	}
	return t.flush()
}

func percent(r float64) string { return strconv.FormatFloat(100*r, 'f', 1, 64) + "%" }

func millis(ms float64) string {
	if ms == 0 {
		return "-"
	}
	return strconv.FormatFloat(ms, 'f', 1, 64) + "ms"
}

// printCallers prints a destination's live traffic: its callers over the
// last minute, as this server replica heard of them.
func printCallers(ctx context.Context, c relayv1.AdminClient, d *relayv1.DestinationDescription, w io.Writer) error {
	ac, ok := c.(*adminclient.Client)
	if !ok {
		return nil
	}
	resp, err := ac.Traffic().ListEdges(ctx, &relayv1.ListEdgesRequest{Destination: d.GetNamespace() + "/" + d.GetName()})
	if err != nil {
		return apiError(err)
	}
	section(w, "Traffic (callers, last minute)")
	if len(resp.GetEdges()) == 0 {
		fmt.Fprintln(w, "  none seen")
		return nil
	}
	sortEdges(resp.Edges, "rps")
	return printEdges(w, resp.GetEdges(), false)
}
