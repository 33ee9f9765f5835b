package demo

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/meshrelay/meshrelay/core/agent"
	"github.com/meshrelay/meshrelay/core/agent/discovery"
	"github.com/meshrelay/meshrelay/core/agent/sink"
	"github.com/meshrelay/meshrelay/core/agent/trust"
	"github.com/meshrelay/meshrelay/core/agent/xds"
	"github.com/meshrelay/meshrelay/core/engine"
	"github.com/meshrelay/meshrelay/core/pluginhost"
	"github.com/meshrelay/meshrelay/core/server"
	"github.com/meshrelay/meshrelay/core/store"
	"github.com/meshrelay/meshrelay/core/store/memory"
	"github.com/meshrelay/meshrelay/core/ui"
	"github.com/meshrelay/meshrelay/internal/adminclient"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"golang.org/x/sync/errgroup"
)

// Plugins are the translators the demo installs.
var Plugins = []string{"istio", "envoy", "cilium", "gatewayapi"}

// Options configure a demo run.
type Options struct {
	// Root is the meshrelay source tree holding testdata/; found from the
	// working directory when empty.
	Root string
	// Out is the folder for outputs, logs and state.
	Out string
	// PluginDir holds meshrelay-plugin-* binaries to install. When empty,
	// the binaries next to the running executable are used, and failing
	// that they are built from Root with the Go toolchain.
	PluginDir string
	// ThroughRegistry publishes the plugins, signed, to an OCI registry
	// the demo starts on loopback and installs them from it.
	ThroughRegistry bool
	// Serve keeps everything running until ctx ends.
	Serve bool
	// StagedRollout makes a second policy edit as a staged rollout after
	// the first (see stagedRollout); the RolloutStrategy is removed again
	// once it completed, so later edits apply at once.
	StagedRollout bool
	// UIAddr is the web UI's address; empty picks a free loopback port.
	UIAddr string
	// Timeout bounds how long the demo waits for the fleet to converge.
	Timeout time.Duration
	// Stdout receives the report.
	Stdout io.Writer
	// TrafficWindow is the length of the agents' traffic windows; 10 s
	// when 0.
	TrafficWindow time.Duration
	// Ready, when set, is called with the report so far once the fleet
	// has converged and the policy edit has propagated, before the demo
	// serves (Serve) or stops.
	Ready func(*Report)
}

// Report is what a demo run found; tests read it.
type Report struct {
	Status *relayv1.Status
	// Outputs maps "cluster/backend" to its resources as "Kind namespace/name".
	Outputs map[string][]string
	// Changed lists the outputs the policy edit changed, as "cluster/backend".
	Changed []string
	// Propagation is how long the policy edit took to reach every affected agent.
	Propagation time.Duration
	// ServerAddr, CABundlePath and AdminTokenPath reach the server's
	// admin API while the demo runs.
	ServerAddr, CABundlePath, AdminTokenPath string
	// UI is the web UI's URL.
	UI string
	// Traffic holds, by cluster, the address of the agent's traffic
	// receiver (Envoy's metrics service and OTLP over gRPC, plaintext).
	Traffic map[string]string
	// MetricsAddr is the server's /metrics address (HTTP).
	MetricsAddr string
	// Rollout is what the staged rollout of the second edit did.
	Rollout *RolloutReport
	// Store is the server's store (in memory) while the demo serves:
	// what another replica writes there, such as its presence, this
	// server reads.
	Store store.Store
}

var clusters = []string{"east", "west", "central", "north"}

// Run runs the demo.
func Run(ctx context.Context, opts Options) (*Report, error) {
	opts, out, err := prepare(opts)
	if err != nil {
		return nil, err
	}
	logFile, err := os.Create(filepath.Join(out, "meshrelay.log"))
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	logger := slog.New(slog.NewJSONHandler(logFile, &slog.HandlerOptions{Level: slog.LevelInfo}))
	say := func(format string, args ...any) { fmt.Fprintf(opts.Stdout, format+"\n", args...) }

	say("meshrelay demo — outputs, logs and state go to %s\n", out)

	host, translators, err := startPlugins(ctx, opts, out, logger, say)
	if err != nil {
		return nil, err
	}
	defer host.Close()
	policyDir := filepath.Join(out, "policies")
	if err := copyPolicies(opts.Root, policyDir); err != nil {
		return nil, err
	}
	st := memory.New()
	srv, err := newServer(ctx, st, out, policyDir, translators, logger)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return srv.Run(gctx) })
	say("  server listening on %s (mTLS, CA in %s)", srv.Addr(), srv.CABundlePath())
	web, err := startUI(gctx, g, srv, opts.UIAddr, logger)
	if err != nil {
		return nil, err
	}
	say("  web UI on %s (admin token in %s)", web.URL(), srv.AdminTokenPath())

	admin, actx, closeAdmin, err := adminClient(ctx, srv)
	if err != nil {
		return nil, err
	}
	defer closeAdmin()
	trafficAddrs, err := startAgents(actx, gctx, g, admin, srv, opts, out, logger, say)
	if err != nil {
		return nil, err
	}

	report := &Report{ServerAddr: srv.Addr(), CABundlePath: srv.CABundlePath(), AdminTokenPath: srv.AdminTokenPath(), UI: web.URL(),
		Traffic: trafficAddrs, MetricsAddr: srv.AdminAddr(), Store: st}
	status, err := converge(actx, admin, opts.Timeout)
	if err != nil {
		cancel()
		_ = g.Wait()
		return nil, err
	}
	report.Status = status
	if report.Outputs, err = outputs(ctx, st, srv.Engine()); err != nil {
		return nil, err
	}
	printReport(opts.Stdout, report)
	if err := editAndWatch(ctx, actx, admin, srv, policyDir, opts.Timeout, report, say); err != nil {
		return nil, err
	}
	if opts.StagedRollout {
		if err := stagedRollout(ctx, actx, admin, srv, policyDir, opts.Timeout, report, say); err != nil {
			return nil, err
		}
	}
	say("See the files under %s/outputs/<cluster>/<backend>/.", out)

	if opts.Serve {
		// Live calls between bookinfo's workloads, instrumented with
		// grpc-go's OpenTelemetry plugin, reported to the agents.
		g.Go(func() error { return liveTraffic(gctx, trafficAddrs) })
	}
	if opts.Ready != nil {
		opts.Ready(report)
	}
	if opts.Serve {
		flags := fmt.Sprintf("--server %s --ca-file %s --admin-token-file %s", srv.Addr(), srv.CABundlePath(), srv.AdminTokenPath())
		say("\nServing until interrupted. Try, in another terminal:\n  meshrelay status %[1]s\n  meshrelay get destinations %[1]s\n  meshrelay describe destination bookinfo/reviews %[1]s\n  meshrelay describe policy reviews-split %[1]s", flags)
		say("Web UI: %s (log in with the admin token in %s)", report.UI, srv.AdminTokenPath())
		say("Live traffic (productpage → reviews in east, reviews → ratings in west):\n  meshrelay top edges %s", flags)
		<-ctx.Done()
	}
	cancel()
	if err := g.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		return report, err
	}
	say("\nDemo finished cleanly.")
	return report, nil
}

// prepare fills opts' defaults and makes an empty output folder; it
// returns the options and the folder's absolute path.
func prepare(opts Options) (Options, string, error) {
	var err error
	if opts.Root == "" {
		if opts.Root, err = findRoot(); err != nil {
			return opts, "", err
		}
	}
	opts.Timeout = cmp.Or(opts.Timeout, 2*time.Minute)
	if opts.Stdout == nil {
		opts.Stdout = io.Discard
	}
	out, err := filepath.Abs(cmp.Or(opts.Out, "demo-output"))
	if err != nil {
		return opts, "", err
	}
	if err := os.RemoveAll(out); err != nil {
		return opts, "", fmt.Errorf("clean %s: %w", out, err)
	}
	for _, d := range []string{"plugins", "server", "policies", "outputs", "agents"} {
		if err := os.MkdirAll(filepath.Join(out, d), 0o755); err != nil {
			return opts, "", err
		}
	}
	return opts, out, nil
}

// startPlugins installs the plugins (real binaries, with their checksums)
// in out/plugins and starts them; the caller closes the host.
func startPlugins(ctx context.Context, opts Options, out string, logger *slog.Logger, say func(string, ...any)) (*pluginhost.Host, []pluginhost.Translator, error) {
	bins, err := pluginBinaries(ctx, opts, out, say)
	if err != nil {
		return nil, nil, err
	}
	pluginDir := filepath.Join(out, "plugins")
	if opts.ThroughRegistry {
		if err := installThroughRegistry(ctx, Plugins, bins, pluginDir, logger, say); err != nil {
			return nil, nil, err
		}
	} else {
		for _, name := range Plugins {
			e, err := pluginhost.InstallContext(ctx, pluginDir, bins[name], "", logger)
			if err != nil {
				return nil, nil, fmt.Errorf("install plugin %s: %w", name, err)
			}
			say("  installed plugin %-7s %s  sha256 %s…", e.Name, e.Version, e.SHA256[:16])
		}
	}
	host, err := pluginhost.New(pluginDir, logger, pluginhost.DefaultOptions())
	if err != nil {
		return nil, nil, err
	}
	if err := host.Start(ctx); err != nil {
		host.Close()
		return nil, nil, err
	}
	go host.Watch(ctx)
	var translators []pluginhost.Translator
	for _, p := range host.Plugins() {
		translators = append(translators, p)
	}
	return host, translators, nil
}

// copyPolicies copies the example policies and the demo's MeshTrust to
// dir, so that the demo's edit never touches the source tree.
func copyPolicies(root, dir string) error {
	if err := copyDir(filepath.Join(root, "testdata", "policies"), dir); err != nil {
		return err
	}
	return copyFile(filepath.Join(root, "testdata", "demo", "mesh-trust.yaml"), filepath.Join(dir, "mesh-trust.yaml"))
}

// newServer returns the server, on loopback, with a generated CA in
// out/server and the policies of policyDir.
func newServer(ctx context.Context, st store.Store, out, policyDir string, translators []pluginhost.Translator, logger *slog.Logger) (*server.Server, error) {
	sopts := server.DefaultOptions()
	sopts.ListenAddr, sopts.AdminAddr = "127.0.0.1:0", "127.0.0.1:0"
	sopts.DataDir = filepath.Join(out, "server")
	sopts.ServerID = "demo"
	sopts.Heartbeat = time.Second
	return server.New(ctx, sopts, server.Deps{
		Store: st, Translators: translators, Policies: server.NewDirPolicies(policyDir, logger), Logger: logger,
	})
}

// startAgents starts an agent per demo cluster in g: each cluster is a
// directory of YAML; outputs go to files, and west's Envoy group is also
// served over xDS.
func startAgents(actx, gctx context.Context, g *errgroup.Group, admin relayv1.AdminClient, srv *server.Server, opts Options, out string, logger *slog.Logger, say func(string, ...any)) (map[string]string, error) {
	addrs := map[string]string{}
	for _, name := range clusters {
		a, runners, err := startAgent(actx, admin, srv, opts.Root, out, name, logger)
		if err != nil {
			return nil, err
		}
		tr, err := newTrafficRunner(a, name, opts.TrafficWindow, logger)
		if err != nil {
			return nil, err
		}
		addrs[name] = tr.lis.Addr().String()
		runners = append(runners, tr)
		g.Go(func() error {
			if err := a.Run(gctx); err != nil && !errors.Is(err, context.Canceled) {
				return fmt.Errorf("agent %s: %w", name, err)
			}
			return nil
		})
		for _, r := range runners {
			g.Go(func() error { return r.Run(gctx) })
		}
		say("  agent %-7s connected; cluster from testdata/demo/clusters/%s", name, name)
	}
	return addrs, nil
}

// editAndWatch makes the demo's one change, the TrafficPolicy's weights,
// and waits until every affected agent applied it; it records what
// changed and how long it took in report.
func editAndWatch(ctx, actx context.Context, admin relayv1.AdminClient, srv *server.Server, policyDir string, timeout time.Duration, report *Report, say func(string, ...any)) error {
	say("\nEditing policies/reviews-traffic.yaml: reviews weights 50/30/20 → 10/10/80 …")
	before := hashes(srv.Engine())
	start := time.Now()
	if err := editWeights(filepath.Join(policyDir, "reviews-traffic.yaml")); err != nil {
		return err
	}
	changed, err := waitChange(ctx, srv.Engine(), before, timeout)
	if err != nil {
		return err
	}
	if _, err := converge(actx, admin, timeout); err != nil {
		return err
	}
	report.Changed, report.Propagation = changed, time.Since(start)
	say("The edit reached %d outputs in %s (applied by every agent): %s",
		len(changed), report.Propagation.Round(time.Millisecond), strings.Join(changed, ", "))
	return nil
}

// startUI serves the web UI on addr (a free loopback port when empty).
func startUI(ctx context.Context, g *errgroup.Group, srv *server.Server, addr string, logger *slog.Logger) (*ui.Server, error) {
	uopts := ui.DefaultOptions()
	uopts.Addr = cmp.Or(addr, "127.0.0.1:0")
	uopts.Traffic = srv.TrafficServer()
	if !server.Loopback(uopts.Addr) {
		uopts.TLS = srv.ServingTLSConfig()
	}
	web, err := ui.New(uopts, srv.AdminServer(), logger)
	if err != nil {
		return nil, err
	}
	g.Go(func() error { return web.Run(ctx) })
	return web, nil
}

// findRoot walks up from the working directory to the meshrelay source tree.
func findRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "testdata", "demo", "clusters")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("run the demo from the meshrelay source tree (testdata/demo not found)")
		}
		dir = parent
	}
}

// pluginBinaries finds the three plugin binaries, or builds them.
func pluginBinaries(ctx context.Context, opts Options, out string, say func(string, ...any)) (map[string]string, error) {
	dirs := []string{opts.PluginDir}
	if opts.PluginDir == "" {
		if exe, err := os.Executable(); err == nil {
			dirs = append(dirs, filepath.Dir(exe))
		}
		dirs = append(dirs, filepath.Join(opts.Root, "bin"))
	}
	if found, ok := pluginhost.FindBinaries(Plugins, dirs...); ok {
		return found, nil
	}
	if opts.PluginDir != "" {
		return nil, fmt.Errorf("plugin binaries meshrelay-plugin-{%s} not found in %s", strings.Join(Plugins, ","), opts.PluginDir)
	}
	say("  building the plugins with the Go toolchain (the first build takes a few minutes) …")
	return pluginhost.BuildBinaries(ctx, opts.Root, filepath.Join(out, "bin"), Plugins)
}

func adminClient(ctx context.Context, srv *server.Server) (relayv1.AdminClient, context.Context, func(), error) {
	c, err := adminclient.Dial(adminclient.Options{Addr: srv.Addr(), CABundle: srv.CABundle(), ServerName: "127.0.0.1", TokenFile: srv.AdminTokenPath()})
	if err != nil {
		return nil, nil, nil, err
	}
	return c, c.Context(ctx), func() { c.Close() }, nil
}

type runner interface {
	Run(ctx context.Context) error
}

// startAgent registers a cluster and builds its agent.
func startAgent(ctx context.Context, admin relayv1.AdminClient, srv *server.Server, root, out, name string, logger *slog.Logger) (*agent.Agent, []runner, error) {
	resp, err := admin.RegisterCluster(ctx, &relayv1.RegisterClusterRequest{Cluster: name})
	if err != nil {
		return nil, nil, fmt.Errorf("register %s: %w", name, err)
	}
	dir := filepath.Join(out, "agents", name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, err
	}
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(resp.GetToken()), 0o600); err != nil {
		return nil, nil, err
	}
	opts := agent.DefaultOptions()
	opts.Cluster, opts.Server, opts.ServerName = name, srv.Addr(), "127.0.0.1"
	opts.TokenFile, opts.CAFile, opts.StateDir = tokenFile, srv.CABundlePath(), filepath.Join(dir, "state")
	opts.Heartbeat = time.Second
	alog := logger.With("cluster", name)
	source := discovery.NewDir(filepath.Join(root, "testdata", "demo", "clusters", name), discovery.DirOptions{Logger: alog, Interval: 200 * time.Millisecond})
	sinks := agent.Sinks{sink.NewDir(filepath.Join(out, "outputs", name))}
	var runners []runner
	if name == "west" {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, nil, err
		}
		x := xds.New(xds.Options{Logger: alog})
		runners = append(runners, serveXDS{x: x, lis: lis})
		sinks = append(agent.Sinks{x}, sinks...)
	}
	a, err := agent.New(opts, source, sinks, alog)
	if err != nil {
		return nil, nil, err
	}
	// Istio's cacerts Secret as a file: the cluster is a directory.
	secrets := trust.DirSecrets{Dir: filepath.Join(out, "outputs", name, "mesh-trust")}
	runners = append(runners, trust.New(trust.Options{Cluster: name, Interval: 200 * time.Millisecond}, a.TrustClient(), secrets, nil, alog))
	return a, runners, nil
}

type serveXDS struct {
	x   *xds.Server
	lis net.Listener
}

func (s serveXDS) Run(ctx context.Context) error { return s.x.Serve(ctx, s.lis) }

// converge waits until every cluster is connected, every plugin healthy and
// every policy's outputs are applied wherever they go.
func converge(ctx context.Context, admin relayv1.AdminClient, timeout time.Duration) (*relayv1.Status, error) {
	deadline := time.Now().Add(timeout)
	var last *relayv1.Status
	stable := 0
	for time.Now().Before(deadline) {
		st, err := admin.GetStatus(ctx, &relayv1.GetStatusRequest{})
		if err == nil && converged(st) {
			stable++
			if stable >= 3 {
				return st, nil
			}
		} else {
			stable = 0
		}
		if err == nil {
			last = st
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return last, fmt.Errorf("the fleet did not converge within %s; see meshrelay.log", timeout)
}

func converged(st *relayv1.Status) bool {
	if len(st.GetClusters()) != len(clusters) || len(st.GetPolicies()) == 0 {
		return false
	}
	for _, c := range st.GetClusters() {
		if !c.GetConnected() || c.GetInputResources() == 0 {
			return false
		}
		for _, o := range c.GetOutputs() {
			if !o.GetApplied() {
				return false
			}
		}
	}
	for _, p := range st.GetPlugins() {
		if !p.GetHealthy() {
			return false
		}
	}
	for _, p := range st.GetPolicies() {
		if p.GetState() == "Pending" {
			return false
		}
	}
	return trustActive(st)
}

// outputs lists the resources of every cluster's outputs, as the server
// stored them.
func outputs(ctx context.Context, st store.Outputs, e *engine.Engine) (map[string][]string, error) {
	out := map[string][]string{}
	for _, c := range e.Clusters() {
		outs, err := st.ListOutputs(ctx, c.Name)
		if err != nil {
			return nil, fmt.Errorf("outputs of %s: %w", c.Name, err)
		}
		for backend, o := range outs {
			var rs []string
			for r := range o.All() {
				ns := r.ID.Namespace
				if ns != "" {
					ns += "/"
				}
				rs = append(rs, r.ID.Kind+" "+ns+r.ID.Name)
			}
			out[c.Name+"/"+backend] = rs
		}
	}
	return out, nil
}

func hashes(e *engine.Engine) map[string]string {
	out := map[string]string{}
	for _, c := range e.Clusters() {
		for backend, m := range e.Marks(c.Name) {
			out[c.Name+"/"+backend] = m.Hash.String()
		}
	}
	return out
}

// waitChange waits until some output differs from before and the engine
// is quiet, and returns which outputs changed.
func waitChange(ctx context.Context, e *engine.Engine, before map[string]string, timeout time.Duration) ([]string, error) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		var changed []string
		for k, h := range hashes(e) {
			if before[k] != h {
				changed = append(changed, k)
			}
		}
		if len(changed) > 0 {
			slices.Sort(changed)
			return changed, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil, fmt.Errorf("the policy edit did not change any output within %s", timeout)
}

func editWeights(path string) error {
	return editFile(path, [][2]string{{"weight: 50", "weight: 10"}, {"weight: 30", "weight: 10"}, {"weight: 20", "weight: 80"}})
}

// editFile makes each replacement once, in order, and fails when one's
// text is not found.
func editFile(path string, replacements [][2]string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(data)
	for _, r := range replacements {
		if !strings.Contains(s, r[0]) {
			return fmt.Errorf("edit %s: %q not found", path, r[0])
		}
		s = strings.Replace(s, r[0], r[1], 1)
	}
	return writeFile(path, s)
}

func printReport(w io.Writer, r *Report) {
	fmt.Fprintln(w, "\nWhat was translated, per cluster and backend:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CLUSTER\tMESHES\tBACKEND\tRESOURCES")
	meshes := map[string]string{}
	for _, c := range r.Status.GetClusters() {
		meshes[c.GetName()] = strings.Join(c.GetMeshes(), ",")
	}
	for _, key := range slices.Sorted(mapKeys(r.Outputs)) {
		cluster, backend, _ := strings.Cut(key, "/")
		counts := map[string]int{}
		for _, res := range r.Outputs[key] {
			kind, _, _ := strings.Cut(res, " ")
			counts[kind]++
		}
		var parts []string
		for _, k := range slices.Sorted(mapKeys(counts)) {
			parts = append(parts, fmt.Sprintf("%d %s", counts[k], k))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", cluster, meshes[cluster], backend, strings.Join(parts, ", "))
	}
	tw.Flush()

	fmt.Fprintln(w, "\nPolicies:")
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POLICY\tSTATE\tAPPLIED IN\tNOTES")
	for _, p := range r.Status.GetPolicies() {
		notes := append(append([]string{}, p.GetErrors()...), p.GetWarnings()...)
		note := "-"
		if len(notes) > 0 {
			note = notes[0]
			if len(notes) > 1 {
				note += fmt.Sprintf(" (+%d more)", len(notes)-1)
			}
		}
		fmt.Fprintf(tw, "%s %s/%s\t%s\t%d/%d clusters\t%s\n", p.GetKind(), p.GetNamespace(), p.GetName(), p.GetState(), p.GetAppliedClusters(), p.GetTargetClusters(), note)
	}
	tw.Flush()
	printTrust(w, r.Status)
	fmt.Fprintln(w, "\nPlugins:")
	for _, p := range r.Status.GetPlugins() {
		h := "healthy"
		if !p.GetHealthy() {
			h = "failing: " + p.GetError()
		}
		fmt.Fprintf(w, "  %-7s %s (%s)\n", p.GetName(), h, strings.Join(p.GetBackends(), ","))
	}
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func copyDir(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		return copyFile(path, target)
	})
}

// copyFile copies one file, mode 0644.
func copyFile(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, data, 0o644)
}
