package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/agent"
	"github.com/meshrelay/meshrelay/core/agent/discovery"
	"github.com/meshrelay/meshrelay/core/agent/leader"
	"github.com/meshrelay/meshrelay/core/agent/sink"
	agenttraffic "github.com/meshrelay/meshrelay/core/agent/traffic"
	"github.com/meshrelay/meshrelay/core/agent/xds"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// agentFlags are the agent command's flags beyond agent.Options.
type agentFlags struct {
	source      string
	sinks       []string
	xdsAddr     string
	metricsAddr string
	debugAddr   string
	kubeconfig  string
	leaderElect bool
	traffic     bool
	meshTrust   bool
	trustEvery  time.Duration
	lease       leader.Options
	filter      discovery.Filter
}

func newAgentCommand(logs *logOptions) *cobra.Command {
	opts := agent.DefaultOptions()
	opts.Version = version
	f := agentFlags{source: "kube", sinks: []string{"kube"}, xdsAddr: ":9977", metricsAddr: ":9988", lease: leader.Options{Name: "meshrelay-agent"}}
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run the relay agent of one workload cluster",
		Long: `Run the meshrelay relay agent of one workload cluster. It dials the
management server (it never listens for it), registers with a relay identity
token on first start, discovers its cluster and applies what the server sends:
server-side apply with pruning and drift correction in Kubernetes, files in a
directory, and xDS (:9977) to local Envoys and gRPC xDS clients.

Outputs go where they belong by what they are, whatever backend emitted them:
xDS resources (xds.meshrelay.io) to the xDS server, every other resource to
the kube sink; a dir sink writes them all.

The kube source discovers the built-in resources (Services, EndpointSlices,
workloads, Namespaces, Nodes) and the custom resources of the kinds the
server's plugins read, and the policies: the server names them when the
agent connects, and the agent keeps them in --state-dir. It sends no input
until it knows them.

When the server is unreachable the agent keeps what is applied, keeps
discovering, and resyncs on reconnect.`,
		Example: `  # In a workload cluster (in-cluster config), with leader election:
  meshrelay agent --cluster east --server meshrelay.example.com:9900 \
    --token-file /etc/meshrelay/token --ca-file /etc/meshrelay/ca.crt --leader-elect

  # A "cluster" made of a directory of YAML, outputs written as files:
  meshrelay agent --cluster dev --server 127.0.0.1:9900 --token-file dev.token \
    --ca-file ca.crt --source dir:./cluster --sink dir:./out`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger, err := logs.logger(os.Stderr)
			if err != nil {
				return err
			}
			stopDebug, err := serveDebug(f.debugAddr, logger)
			if err != nil {
				return err
			}
			defer stopDebug()
			return runAgent(cmd.Context(), logger, opts, f)
		},
	}
	fs := cmd.Flags()
	opts.AddFlags(fs)
	fs.StringVar(&f.source, "source", f.source, "discovery source: kube or dir:PATH")
	fs.StringSliceVar(&f.sinks, "sink", f.sinks, "where outputs go: kube (every resource but xDS ones) and/or dir:PATH (every resource) (repeatable)")
	fs.StringVar(&f.xdsAddr, "xds-addr", f.xdsAddr, "address of the xDS server, serving every backend's xDS resources to Envoys and gRPC xDS clients (empty: off)")
	fs.StringVar(&f.metricsAddr, "metrics-addr", f.metricsAddr, "address of /metrics, /healthz and /readyz (empty: off)")
	addDebugFlag(fs, &f.debugAddr)
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig of the workload cluster (default: in-cluster or $KUBECONFIG)")
	fs.BoolVar(&f.leaderElect, "leader-elect", false, "only the holder of a Lease relays and applies")
	fs.BoolVar(&f.traffic, "traffic", true, "receive the proxies' metrics on the xDS port (Envoy's metrics service, OTLP over gRPC) and relay their traffic as edges every 10 s (needs --xds-addr)")
	fs.BoolVar(&f.meshTrust, "mesh-trust", true, "keep Istio's cacerts Secret as the MeshTrust selecting this cluster says, and bounce workloads (kube sink); with only dir sinks, write it as DIR/mesh-trust/NAMESPACE/cacerts.yaml")
	fs.DurationVar(&f.trustEvery, "mesh-trust-interval", 10*time.Second, "how often the mesh trust is reported and reconciled")
	f.lease.AddFlags(fs)
	fs.StringSliceVar(&f.filter.IncludeNamespaces, "include-namespaces", nil, "discover only these namespaces")
	fs.StringSliceVar(&f.filter.ExcludeNamespaces, "exclude-namespaces", nil, "do not discover these namespaces")
	fs.StringVar(&f.filter.ExcludeSelector, "exclude-selector", "", "do not discover objects matching this label selector")
	return cmd
}

func kubeConfig(path string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if path != "" {
		rules.ExplicitPath = path
	}
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
}

// backgroundRunner is a part with work of its own, such as the kube sink's
// drift watch or the xDS server.
type backgroundRunner interface {
	Run(ctx context.Context) error
}

func runAgent(ctx context.Context, logger *slog.Logger, opts agent.Options, f agentFlags) error {
	logger = logger.With("cluster", opts.Cluster)
	cfg, err := agentKubeConfig(f)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	source, err := agentSource(cfg, f, logger)
	if err != nil {
		return err
	}

	var a *agent.Agent
	report := func(backend string, results map[snapshot.ID]error) {
		if a != nil {
			a.Report(backend, results)
		}
	}
	var rec *agenttraffic.Receiver
	if f.traffic && f.xdsAddr != "" {
		rec = agenttraffic.New(agenttraffic.Options{Cluster: opts.Cluster, Logger: logger})
	}
	sinks, runners, err := agentSinks(cfg, opts, f, reg, report, rec, logger)
	if err != nil {
		return err
	}
	a, err = agent.New(opts, source, sinks, logger)
	if err != nil {
		return err
	}
	if rec != nil {
		runners = append(runners, trafficRelay{rec, a})
	}
	if f.meshTrust {
		m, err := newTrustManager(cfg, f, opts.Cluster, a, logger)
		if err != nil {
			return err
		}
		runners = append(runners, m)
	}
	g, ctx := errgroup.WithContext(ctx)
	if f.metricsAddr != "" {
		if err := serveMetrics(ctx, g, f.metricsAddr, reg); err != nil {
			return err
		}
	}
	work := func(ctx context.Context) error {
		wg, ctx := errgroup.WithContext(ctx)
		for _, r := range runners {
			wg.Go(func() error { return r.Run(ctx) })
		}
		wg.Go(func() error { return a.Run(ctx) })
		return wg.Wait()
	}
	if !f.leaderElect {
		g.Go(func() error { return work(ctx) })
		return g.Wait()
	}
	if f.lease.Namespace == "" {
		f.lease.Namespace = cmp.Or(os.Getenv("POD_NAMESPACE"), "default")
	}
	if f.lease.Identity == "" {
		f.lease.Identity = os.Getenv("POD_NAME") // empty: host name and a random suffix
	}
	f.lease.Logger = logger
	g.Go(func() error {
		var workErr error
		err := leader.Run(ctx, cfg, f.lease, func(ctx context.Context) {
			workErr = work(ctx)
		})
		return errors.Join(err, workErr)
	})
	return g.Wait()
}

// agentKubeConfig returns the Kubernetes client configuration when the
// source, a sink or leader election needs one, else nil.
func agentKubeConfig(f agentFlags) (*rest.Config, error) {
	needKube := f.source == "kube" || f.leaderElect || slices.Contains(f.sinks, "kube")
	if !needKube {
		return nil, nil
	}
	cfg, err := kubeConfig(f.kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubernetes config: %w", err)
	}
	return cfg, nil
}

// agentSource returns the discovery source --source names.
func agentSource(cfg *rest.Config, f agentFlags, logger *slog.Logger) (agent.Source, error) {
	switch {
	case f.source == "kube":
		k, err := discovery.NewKube(cfg, discovery.KubeOptions{Filter: f.filter, Logger: logger})
		if err != nil {
			return nil, err
		}
		return k, nil
	case strings.HasPrefix(f.source, "dir:"):
		return discovery.NewDir(strings.TrimPrefix(f.source, "dir:"), discovery.DirOptions{Filter: f.filter, Logger: logger}), nil
	}
	return nil, &exitError{code: 2, err: fmt.Errorf("--source must be kube or dir:PATH, not %q", f.source)}
}

// agentSinks returns the sinks --xds-addr and --sink name, and those of
// them with work of their own.
func agentSinks(cfg *rest.Config, opts agent.Options, f agentFlags, reg prometheus.Registerer,
	report func(string, map[snapshot.ID]error), rec *agenttraffic.Receiver, logger *slog.Logger,
) (agent.Sinks, []backgroundRunner, error) {
	var runners []backgroundRunner
	var sinks agent.Sinks
	if f.xdsAddr != "" {
		xopts := xds.Options{Addr: f.xdsAddr, Logger: logger, Report: report}
		if rec != nil {
			// Beside ADS: proxies reach the agent where they already do.
			xopts.Services, xopts.ServerOptions = rec.Register, rec.ServerOptions()
		}
		x := xds.New(xopts)
		runners = append(runners, x)
		sinks = append(sinks, x)
	}
	for _, s := range f.sinks {
		switch {
		case s == "kube":
			k, err := sink.NewKube(cfg, sink.KubeOptions{ServerID: ownerID(opts.Server), Registerer: reg, Report: report, Logger: logger})
			if err != nil {
				return nil, nil, err
			}
			sinks = append(sinks, k)
			runners = append(runners, k)
		case strings.HasPrefix(s, "dir:"):
			sinks = append(sinks, sink.NewDir(strings.TrimPrefix(s, "dir:")))
		default:
			return nil, nil, &exitError{code: 2, err: fmt.Errorf("--sink must be kube or dir:PATH, not %q", s)}
		}
	}
	return sinks, runners, nil
}

// trafficRelay relays the traffic receiver's windows on the agent's stream.
type trafficRelay struct {
	rec *agenttraffic.Receiver
	a   *agent.Agent
}

func (t trafficRelay) Run(ctx context.Context) error { return t.rec.Run(ctx, t.a) }

// serveMetrics serves /metrics, /healthz and /readyz on addr in g until
// ctx ends.
func serveMetrics(ctx context.Context, g *errgroup.Group, addr string, reg prometheus.Gatherer) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	g.Go(func() error {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	g.Go(func() error { <-ctx.Done(); return srv.Close() })
	return nil
}

// ownerID is the value of the meshrelay.io/server label on applied objects:
// the server's host name, stable across replicas behind one address.
func ownerID(server string) string {
	host, _, err := net.SplitHostPort(server)
	if err != nil {
		host = server
	}
	var b strings.Builder
	for _, r := range strings.ToLower(host) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r == '-' || r == '.' {
			b.WriteRune(r)
		}
	}
	out := strings.Trim(b.String(), "-.")
	if len(out) > 63 {
		out = strings.Trim(out[:63], "-.")
	}
	if out == "" {
		return "meshrelay"
	}
	return out
}
