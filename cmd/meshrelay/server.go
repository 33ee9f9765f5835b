package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/meshrelay/meshrelay/core/pluginhost"
	"github.com/meshrelay/meshrelay/core/server"
	"github.com/meshrelay/meshrelay/core/store"
	"github.com/meshrelay/meshrelay/core/store/memory"
	"github.com/meshrelay/meshrelay/core/store/redis"
	"github.com/meshrelay/meshrelay/core/ui"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

func newServerCommand(logs *logOptions) *cobra.Command {
	opts := server.DefaultOptions()
	uiOpts := ui.DefaultOptions()
	plugins := pluginhost.DefaultOptions()
	var storeURL, pluginDir, configSource, kubeconfig, discoveryNamespace, debugAddr string
	var discoveryLease time.Duration
	var discoveryCRDs bool
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run the management server",
		Long: `Run the meshrelay management server: the relay agents dial (gRPC, :9900),
registration and the CA, the snapshot store, the translation engine with its
plugins, and /metrics, /healthz and /readyz (:9091).

The store is in memory by default; several replicas share a Redis store
(--store redis://...). Policies come from the management cluster
(--config-source kube) or a watched directory (--config-source dir:PATH).

The admin API (meshrelay get, meshrelay describe) serves the Meshes,
Workloads and Destinations the server derives from every cluster's inputs;
with --discovery-crds it also writes them into the management cluster as
discovery.meshrelay.io custom resources (kubectl get workloads -n
meshrelay-system), deleted when their cluster is deregistered.

--ui-addr serves the read-only web UI: the fleet graph, policy status,
destinations and each cluster's outputs, live. It asks for the admin token
(or takes "Authorization: Bearer TOKEN") and is HTTPS with the server
certificate, except on a loopback address, where it is plain HTTP.`,
		Example: `  # A development server with policies from a directory:
  meshrelay server --plugin-dir ./plugins --config-source dir:./policies

  # One of several replicas sharing Redis, policies from the management cluster:
  meshrelay server --store redis://:secret@redis:6379/0 --config-source kube \
    --plugin-dir /plugins --san meshrelay.example.com

  # With the web UI on https://meshrelay.example.com:9443/:
  meshrelay server --plugin-dir ./plugins --ui-addr :9443 --san meshrelay.example.com`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger, err := logs.logger(os.Stderr)
			if err != nil {
				return err
			}
			disc, err := discoveryWriter(discoveryCRDs, discoveryNamespace, kubeconfig, discoveryLease, logger)
			if err != nil {
				return err
			}
			stopDebug, err := serveDebug(debugAddr, logger)
			if err != nil {
				return err
			}
			defer stopDebug()
			return runServer(cmd.Context(), logger, opts, uiOpts, plugins, storeURL, pluginDir, configSource, kubeconfig, disc)
		},
	}
	fs := cmd.Flags()
	opts.AddFlags(fs)
	uiOpts.AddFlags(fs)
	plugins.AddFlags(fs)
	fs.StringVar(&storeURL, "store", "memory", "snapshot store: memory, or redis://[:password@]host:port/db (rediss:// for TLS, redis+sentinel://, redis+cluster://)")
	fs.StringVar(&pluginDir, "plugin-dir", "", "directory of installed plugins (see meshrelay plugin install)")
	fs.StringVar(&configSource, "config-source", "", "where policies come from: kube (the management cluster) or dir:PATH")
	fs.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig of the management cluster for --config-source kube and --discovery-crds (default: in-cluster or $KUBECONFIG)")
	fs.BoolVar(&discoveryCRDs, "discovery-crds", false, "also write the fleet's Meshes, Workloads and Destinations as discovery.meshrelay.io custom resources in the management cluster (install the CRDs of deploy/crds first)")
	fs.StringVar(&discoveryNamespace, "discovery-namespace", "meshrelay-system", "management cluster namespace of the discovery custom resources (--discovery-crds)")
	addDebugFlag(fs, &debugAddr)
	fs.DurationVar(&discoveryLease, "discovery-lease", server.DefaultDiscoveryLease, "replicas sharing a store write the discovery custom resources one at a time, under a lease in the store this long: when the writing replica dies, another takes over within it (--discovery-crds)")
	return cmd
}

func runServer(ctx context.Context, logger *slog.Logger, opts server.Options, uiOpts ui.Options, popts pluginhost.Options,
	storeURL, pluginDir, configSource, kubeconfig string, disc server.DiscoveryWriter) error {
	if opts.ServerID == "" {
		host, _ := os.Hostname()
		opts.ServerID = host
	}
	st, err := openStore(ctx, logger, storeURL, opts.ServerID)
	if err != nil {
		return err
	}
	defer st.Close()

	var translators []pluginhost.Translator
	if pluginDir != "" {
		host, err := pluginhost.New(pluginDir, logger, popts)
		if err != nil {
			return err
		}
		defer host.Close()
		if err := host.Start(ctx); err != nil {
			return err
		}
		go host.Watch(ctx)
		for _, p := range host.Plugins() {
			translators = append(translators, p)
		}
	} else {
		logger.Warn("no --plugin-dir: nothing will be translated")
	}

	policies, err := policySource(configSource, kubeconfig, logger)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	// go_gc_heap_live_bytes, the heap the last collection kept, beside
	// the default Go metrics: what the server holds, without the garbage
	// and headroom that the in-use and RSS figures carry.
	liveHeap := collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/gc/heap/live:bytes$`)}
	reg.MustRegister(collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(liveHeap)), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	srv, err := server.New(ctx, opts, server.Deps{
		Store: st, Translators: translators, Policies: policies, Discovery: disc, Logger: logger, Registerer: reg, Gatherer: reg,
	})
	if err != nil {
		return err
	}
	if uiOpts.Addr == "" {
		return srv.Run(ctx)
	}
	return serveWithUI(ctx, srv, uiOpts, logger)
}

// serveWithUI runs the server and its web UI until ctx ends.
func serveWithUI(ctx context.Context, srv *server.Server, uiOpts ui.Options, logger *slog.Logger) error {
	if !server.Loopback(uiOpts.Addr) {
		uiOpts.TLS = srv.ServingTLSConfig()
	}
	uiOpts.Traffic = srv.TrafficServer()
	web, err := ui.New(uiOpts, srv.AdminServer(), logger)
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return srv.Run(gctx) })
	g.Go(func() error { return web.Run(gctx) })
	return g.Wait()
}

// openStore opens the snapshot store a --store URL names. Redis is wrapped
// in a write-through store so memory keeps serving when Redis is down.
func openStore(ctx context.Context, logger *slog.Logger, url, replica string) (store.Store, error) {
	if url == "" || url == "memory" {
		return memory.New(), nil
	}
	ropts, err := redis.ParseURL(url)
	if err != nil {
		return nil, &exitError{code: 2, err: fmt.Errorf("--store: %w", err)}
	}
	ropts.Replica, ropts.Logger = replica, logger
	backing, err := redis.New(ctx, ropts)
	if err != nil {
		return nil, fmt.Errorf("open redis store: %w", err)
	}
	wt := store.NewWriteThrough(memory.New().Replica(replica), backing, store.WriteThroughOptions{Logger: logger})
	stats, err := wt.Load(ctx)
	if err != nil {
		// Redis may be down at start; the server runs degraded and catches up.
		logger.Warn("load fleet from redis; starting degraded", "error", err)
	} else {
		logger.Info("fleet loaded from redis", "stats", fmt.Sprintf("%+v", stats))
	}
	return wt, nil
}

// policySource returns the management policy source a --config-source names.
func policySource(source, kubeconfig string, logger *slog.Logger) (server.PolicySource, error) {
	switch {
	case source == "":
		return nil, nil
	case source == "kube":
		cfg, err := managementConfig(kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("--config-source kube: %w", err)
		}
		return server.NewKubePolicies(cfg, logger)
	case strings.HasPrefix(source, "dir:"):
		return server.NewDirPolicies(strings.TrimPrefix(source, "dir:"), logger), nil
	}
	return nil, &exitError{code: 2, err: fmt.Errorf("--config-source must be kube or dir:PATH, not %q", source)}
}

// managementConfig loads the management cluster's client configuration:
// kubeconfig when given, else in-cluster or $KUBECONFIG.
func managementConfig(kubeconfig string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if kubeconfig != "" {
		rules.ExplicitPath = kubeconfig
	}
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
}

// discoveryWriter returns the writer of discovery custom resources, or nil
// when --discovery-crds is off.
func discoveryWriter(on bool, namespace, kubeconfig string, lease time.Duration, logger *slog.Logger) (server.DiscoveryWriter, error) {
	if !on {
		return nil, nil
	}
	cfg, err := managementConfig(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("--discovery-crds: %w", err)
	}
	w, err := server.NewKubeDiscovery(cfg, server.KubeDiscoveryOptions{Namespace: namespace, LeaseTTL: lease, Logger: logger})
	if err != nil {
		return nil, &exitError{code: 2, err: fmt.Errorf("--discovery-namespace: %w", err)}
	}
	return w, nil
}
