package bench

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/meshrelay/meshrelay/core/agent"
	"github.com/meshrelay/meshrelay/core/pki"
	"github.com/meshrelay/meshrelay/core/pluginhost"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	goredis "github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
)

// Plugins are the translator plugins the benchmark installs.
var Plugins = []string{"istio", "envoy", "cilium"}

// Options configure a benchmark run.
type Options struct {
	// Agents is how many clusters are simulated, each with its own agent.
	Agents int
	// Services is how many Services each cluster has.
	Services int
	// Churn is how many input changes per second the fleet makes.
	Churn float64
	// Duration is how long inputs churn.
	Duration time.Duration
	// PolicyChanges is how many times the fleet-wide policy is edited after
	// the churn, one edit at a time.
	PolicyChanges int
	// Store is the server's --store: "memory" or a redis:// URL. A Redis
	// database must hold no clusters yet.
	Store string
	// Plugins is a directory holding the meshrelay-plugin-* binaries. When
	// empty they are taken from beside Executable, and failing that built
	// from the source tree the working directory is in.
	Plugins string
	// Executable is the meshrelay binary run as the server; the running
	// executable when empty.
	Executable string
	// Concurrency bounds the agents registering and connecting at once.
	Concurrency int
	// Timeout bounds each wait: the fleet's convergence, a policy edit
	// reaching every agent. Default: 2 minutes plus 20ms per agent.
	Timeout time.Duration
	// WorkDir keeps the server's data, logs and plugins; a temporary
	// directory, removed afterwards, when empty.
	WorkDir string
	// ServerArgs are added to the server's command line.
	ServerArgs []string
	// Logger receives the agents' logs and the benchmark's progress.
	Logger *slog.Logger
	// Progress, when set, receives one line per phase.
	Progress io.Writer
}

// DefaultOptions returns the defaults: 100 agents of 50 services, 10
// changes per second for 30s, three policy edits, a memory store.
func DefaultOptions() Options {
	return Options{
		Agents: 100, Services: 50, Churn: 10, Duration: 30 * time.Second,
		PolicyChanges: 3, Store: "memory", Concurrency: 32,
	}
}

// Validate reports whether the options can run.
func (o *Options) Validate() error {
	var errs []error
	if o.Agents < 1 {
		errs = append(errs, errors.New("--agents must be at least 1"))
	}
	if o.Agents > 99999 {
		errs = append(errs, errors.New("--agents must be at most 99999"))
	}
	if o.Services < 1 {
		errs = append(errs, errors.New("--services must be at least 1"))
	}
	if o.Churn < 0 {
		errs = append(errs, errors.New("--churn must not be negative"))
	}
	if o.Duration < 0 {
		errs = append(errs, errors.New("--duration must not be negative"))
	}
	if o.PolicyChanges < 0 {
		errs = append(errs, errors.New("--policy-changes must not be negative"))
	}
	if o.Store != "memory" && !strings.HasPrefix(o.Store, "redis") {
		errs = append(errs, fmt.Errorf("--store must be memory or a redis:// URL, not %q", o.Store))
	}
	return errors.Join(errs...)
}

// Latency summarizes durations in milliseconds.
type Latency struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`
}

func summarize(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	slices.Sort(ds)
	at := func(q float64) float64 {
		i := min(int(q*float64(len(ds))), len(ds)-1)
		return float64(ds[i]) / float64(time.Millisecond)
	}
	return Latency{Count: len(ds), P50: at(0.50), P99: at(0.99), Max: float64(ds[len(ds)-1]) / float64(time.Millisecond)}
}

// Report is what a run measured. Durations are in seconds.
type Report struct {
	Agents         int     `json:"agents"`
	Services       int     `json:"services_per_agent"`
	InputResources int     `json:"input_resources_per_agent"`
	Store          string  `json:"store"`
	Churn          float64 `json:"churn_per_second"`
	ChurnSeconds   float64 `json:"churn_seconds"`
	// Connected agents had a stream open; ConnectSeconds is how long the
	// fleet took to register (admin API, then token and CSR for a
	// certificate) and connect, RegistrationsPerSecond the rate.
	Connected              int     `json:"agents_connected"`
	ConnectSeconds         float64 `json:"connect_all_seconds"`
	FirstOutputs           int     `json:"agents_with_outputs"`
	FirstOutputsSeconds    float64 `json:"first_outputs_all_seconds"`
	RegistrationsPerSecond float64 `json:"registrations_per_second"`

	InputChanges   int     `json:"input_changes"`
	InputLatency   Latency `json:"input_latency"`
	InputLost      int     `json:"input_changes_not_received"`
	InputCoalesced int     `json:"input_changes_coalesced"`
	// InputWireBytes and InputPayloadBytes are per input change, received
	// by all agents together.
	InputWireBytes    float64 `json:"input_wire_bytes_per_change"`
	InputPayloadBytes float64 `json:"input_payload_bytes_per_change"`

	PolicyChanges int `json:"policy_changes"`
	// PolicyLatency is each agent's receipt of each edit; PolicyAllLatency
	// is, per edit, when the last agent received it.
	PolicyLatency    Latency `json:"policy_latency"`
	PolicyAllLatency Latency `json:"policy_all_agents_latency"`
	PolicyMissing    int     `json:"policy_receipts_missing"`
	// PolicyWireBytes and PolicyPayloadBytes are per edit and per agent.
	PolicyWireBytes    float64 `json:"policy_wire_bytes_per_agent"`
	PolicyPayloadBytes float64 `json:"policy_payload_bytes_per_agent"`
	IdleWireBytesPerS  float64 `json:"idle_wire_bytes_per_second"`
	// InputCPU and PolicyCPU are the CPU seconds the server and its plugins
	// spent per input change (during the churn) and per policy edit: the
	// cost of a change, whatever else runs on the machine.
	InputCPU  float64 `json:"server_and_plugins_cpu_seconds_per_input_change"`
	PolicyCPU float64 `json:"server_and_plugins_cpu_seconds_per_policy_edit"`
	// LoadAverage is the machine's 1-minute load average at the end: other
	// work on the machine lengthens every latency.
	LoadAverage float64 `json:"load_average"`

	Server ProcStats `json:"server"`
	// Plugins sums the server's plugin processes.
	Plugins ProcStats `json:"plugins"`
	// ServerRSSBefore is the server's RSS before any agent;
	// ServerRSSConverged once every agent had its outputs.
	ServerRSSBefore    int64     `json:"server_rss_before_agents_bytes"`
	ServerRSSConverged int64     `json:"server_rss_converged_bytes"`
	ServerRSSPerAgent  float64   `json:"server_rss_bytes_per_agent"`
	PluginRSSBefore    int64     `json:"plugins_rss_before_agents_bytes"`
	PluginRSSConverged int64     `json:"plugins_rss_converged_bytes"`
	PluginRSSPerAgent  float64   `json:"plugins_rss_bytes_per_agent"`
	ServerCPUConverge  float64   `json:"server_cpu_seconds_to_converge"`
	RedisUsedMemory    int64     `json:"redis_used_memory_bytes,omitempty"`
	Client             ProcStats `json:"bench_process"`
}

// Run runs one benchmark; see the package documentation.
func Run(ctx context.Context, opts Options) (*Report, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts.Concurrency = cmp.Or(opts.Concurrency, 32)
	opts.Timeout = cmp.Or(opts.Timeout, 2*time.Minute+time.Duration(opts.Agents)*20*time.Millisecond)
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	say := func(format string, args ...any) {
		if opts.Progress != nil {
			fmt.Fprintf(opts.Progress, "%s  "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
		}
	}
	if _, err := raiseFileLimit(); err != nil {
		return nil, err
	}
	if opts.Executable == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("find the meshrelay binary: %w", err)
		}
		opts.Executable = exe
	}
	work := opts.WorkDir
	if work == "" {
		dir, err := os.MkdirTemp("", "meshrelay-bench-")
		if err != nil {
			return nil, fmt.Errorf("create work directory: %w", err)
		}
		defer os.RemoveAll(dir)
		work = dir
	}
	for _, d := range []string{"plugins", "policies", "server", "agents"} {
		if err := os.MkdirAll(filepath.Join(work, d), 0o700); err != nil {
			return nil, fmt.Errorf("create work directory: %w", err)
		}
	}

	// Plugins and policies.
	bins, err := pluginBinaries(ctx, opts, work)
	if err != nil {
		return nil, err
	}
	for _, name := range Plugins {
		if _, err := pluginhost.InstallContext(ctx, filepath.Join(work, "plugins"), bins[name], "", opts.Logger); err != nil {
			return nil, fmt.Errorf("install plugin %s: %w", name, err)
		}
	}
	policyFile := filepath.Join(work, "policies", "bench-access.yaml")
	if err := writeFile(policyFile, PolicyYAML("p0")); err != nil {
		return nil, err
	}

	// Inputs, generated before the clock starts.
	say("generating %d clusters of %d services", opts.Agents, opts.Services)
	sims := make([]*sim, opts.Agents)
	watch := newPolicyWatch(opts.Agents)
	for i := range sims {
		c, err := NewCluster(i, opts.Services)
		if err != nil {
			return nil, err
		}
		snap, err := c.Snapshot()
		if err != nil {
			return nil, err
		}
		sims[i] = &sim{index: i, cluster: c, src: newSource(snap), policy: watch}
	}
	rep := &Report{Agents: opts.Agents, Services: opts.Services, Store: redactStore(opts.Store), Churn: opts.Churn,
		InputResources: len(sims[0].cluster.resources)}

	// The server.
	srv, err := startServer(ctx, opts, work)
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	say("server pid %d listening on %s; logs in %s", srv.pid(), srv.relay, srv.logPath)
	admin, adminCtx, closeAdmin, err := srv.waitReady(ctx, opts.Timeout)
	if err != nil {
		return nil, err
	}
	defer closeAdmin()
	if st, err := admin.ListClusters(adminCtx, &relayv1.ListClustersRequest{}); err == nil && len(st.GetClusters()) > 0 {
		return nil, fmt.Errorf("the store already holds %d clusters; run against an empty store", len(st.GetClusters()))
	}
	if ps, err := readProc(srv.pid()); err == nil {
		rep.ServerRSSBefore = ps.RSSBytes
	}
	rep.PluginRSSBefore = pluginStats(srv.pid()).RSSBytes

	// Register and connect the fleet.
	agentCtx, stopAgents := context.WithCancel(ctx)
	var agents errgroup.Group
	defer func() {
		stopAgents()
		_ = agents.Wait()
	}()
	say("registering and connecting %d agents", opts.Agents)
	start := time.Now()
	regs := make(chan int)
	var regErr error
	var regMu sync.Mutex
	var regWG sync.WaitGroup
	var registered time.Duration
	for range opts.Concurrency {
		regWG.Add(1)
		go func() {
			defer regWG.Done()
			for i := range regs {
				a, err := newAgent(adminCtx, admin, srv, work, sims[i], opts.Logger)
				if err != nil {
					regMu.Lock()
					regErr = cmp.Or(regErr, err)
					regMu.Unlock()
					continue
				}
				sims[i].agent = a
				agents.Go(func() error {
					if err := a.Run(agentCtx); err != nil && !errors.Is(err, context.Canceled) {
						opts.Logger.Warn("agent stopped", "cluster", sims[i].cluster.Name, "error", err)
					}
					return nil
				})
				// Start the next agent once this one is connected, so at
				// most Concurrency handshakes are in flight.
				for a.Stats.Connects.Load() == 0 && agentCtx.Err() == nil && time.Since(start) < opts.Timeout {
					time.Sleep(5 * time.Millisecond)
				}
			}
		}()
	}
	for i := range sims {
		regs <- i
	}
	close(regs)
	regWG.Wait()
	registered = time.Since(start)
	if regErr != nil {
		return nil, regErr
	}
	rep.Connected = count(sims, func(s *sim) bool { return s.agent.Stats.Connects.Load() > 0 })
	rep.ConnectSeconds = registered.Seconds()
	rep.RegistrationsPerSecond = float64(rep.Connected) / registered.Seconds()
	say("%d agents connected in %s", rep.Connected, registered.Round(time.Millisecond))

	deadline := start.Add(opts.Timeout)
	for time.Now().Before(deadline) && count(sims, func(s *sim) bool { return s.first.Load() != 0 }) < len(sims) {
		time.Sleep(20 * time.Millisecond)
	}
	var last int64
	for _, s := range sims {
		if f := s.first.Load(); f != 0 {
			rep.FirstOutputs++
			last = max(last, f)
		}
	}
	if last != 0 {
		rep.FirstOutputsSeconds = time.Unix(0, last).Sub(start).Seconds()
	}
	say("%d agents have their first outputs after %.3fs", rep.FirstOutputs, rep.FirstOutputsSeconds)
	// Let the fleet settle, then take the converged figures.
	time.Sleep(2 * time.Second)
	if ps, err := readProc(srv.pid()); err == nil {
		rep.ServerRSSConverged, rep.ServerCPUConverge = ps.RSSBytes, ps.CPUSeconds
		rep.ServerRSSPerAgent = float64(ps.RSSBytes-rep.ServerRSSBefore) / float64(opts.Agents)
	}
	pl := pluginStats(srv.pid())
	rep.PluginRSSConverged = pl.RSSBytes
	rep.PluginRSSPerAgent = float64(pl.RSSBytes-rep.PluginRSSBefore) / float64(opts.Agents)

	// Idle traffic: heartbeats, over one server heartbeat period (10s by
	// default), since agents that connected together beat together.
	port := srv.port()
	idle := 10 * time.Second
	b0 := receivedFrom(port)
	time.Sleep(idle)
	rep.IdleWireBytesPerS = float64(receivedFrom(port)-b0) / idle.Seconds()
	say("idle traffic %.0f B/s", rep.IdleWireBytesPerS)

	// Churn.
	if opts.Churn > 0 && opts.Duration > 0 {
		say("churning %.1f changes/s for %s", opts.Churn, opts.Duration)
		if err := churn(ctx, opts, sims, srv, rep); err != nil {
			return nil, err
		}
		say("input latency p50 %.1fms p99 %.1fms max %.1fms over %d changes; %.0f wire B/change",
			rep.InputLatency.P50, rep.InputLatency.P99, rep.InputLatency.Max, rep.InputLatency.Count, rep.InputWireBytes)
	}

	// Policy edits.
	if opts.PolicyChanges > 0 {
		if err := policyEdits(ctx, opts, sims, watch, policyFile, srv, rep, say); err != nil {
			return nil, err
		}
	}

	if ps, err := readProc(srv.pid()); err == nil {
		rep.Server = ps
	}
	rep.Plugins = pluginStats(srv.pid())
	if rep.Client, err = readProc(os.Getpid()); err != nil {
		return nil, err
	}
	rep.LoadAverage = loadAverage()
	if strings.HasPrefix(opts.Store, "redis") {
		if rep.RedisUsedMemory, err = redisUsedMemory(ctx, opts.Store); err != nil {
			opts.Logger.Warn("read redis memory", "error", err)
		}
	}
	say("stopping")
	return rep, nil
}

// churn makes input changes at opts.Churn per second for opts.Duration and
// waits for them to arrive.
func churn(ctx context.Context, opts Options, sims []*sim, srv *serverProcess, rep *Report) error {
	port := srv.port()
	cpu0 := srv.cpu()
	rng := rand.New(rand.NewPCG(uint64(opts.Agents), uint64(opts.Services)))
	payload0 := sumPayload(sims)
	wire0 := receivedFrom(port)
	start := time.Now()
	tick := time.NewTicker(time.Duration(float64(time.Second) / opts.Churn))
	defer tick.Stop()
	seq := 0
	for time.Since(start) < opts.Duration {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		seq++
		s := sims[rng.IntN(len(sims))]
		j := rng.IntN(s.cluster.Services())
		marker := "m" + strconv.Itoa(seq) + "x"
		snap, err := s.cluster.Change(j, marker)
		if err != nil {
			return err
		}
		s.expect(j, marker, time.Now())
		s.src.set(snap)
	}
	changed := time.Since(start)
	// Wait for the last changes to arrive.
	for wait := time.Now().Add(opts.Timeout); time.Now().Before(wait); time.Sleep(20 * time.Millisecond) {
		if sumFunc(sims, (*sim).outstanding) == 0 {
			break
		}
	}
	elapsed := time.Since(start)
	wire := float64(receivedFrom(port)-wire0) - rep.IdleWireBytesPerS*elapsed.Seconds()
	var lat []time.Duration
	for _, s := range sims {
		s.mu.Lock()
		lat = append(lat, s.inputLat...)
		rep.InputLost += len(s.waiting)
		rep.InputCoalesced += s.missed
		s.mu.Unlock()
	}
	rep.ChurnSeconds = changed.Seconds()
	rep.InputChanges = seq
	if seq > 0 {
		rep.InputCPU = (srv.cpu() - cpu0) / float64(seq)
	}
	rep.InputLatency = summarize(lat)
	if seq > 0 {
		rep.InputWireBytes = max(wire, 0) / float64(seq)
		rep.InputPayloadBytes = float64(sumPayload(sims)-payload0) / float64(seq)
	}
	return nil
}

// policyEdits edits the fleet-wide policy opts.PolicyChanges times, each
// time waiting until every agent received the edit.
func policyEdits(ctx context.Context, opts Options, sims []*sim, watch *policyWatch, file string, srv *serverProcess, rep *Report, say func(string, ...any)) error {
	port := srv.port()
	cpu0 := srv.cpu()
	var all, each []time.Duration
	var wire, payload float64
	for k := 1; k <= opts.PolicyChanges; k++ {
		marker := "p" + strconv.Itoa(k)
		payload0, wire0 := sumPayload(sims), receivedFrom(port)
		at := time.Now()
		watch.start(`"/`+marker+`/*"`, at)
		if err := writeFile(file, PolicyYAML(marker)); err != nil {
			return err
		}
		deadline := at.Add(opts.Timeout)
		for {
			n, _ := watch.done()
			if n == len(sims) || time.Now().After(deadline) {
				break
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
		n, lat := watch.done()
		watch.stop()
		// Let acks and stragglers settle before counting bytes.
		time.Sleep(500 * time.Millisecond)
		elapsed := time.Since(at)
		wire += max(float64(receivedFrom(port)-wire0)-rep.IdleWireBytesPerS*elapsed.Seconds(), 0)
		payload += float64(sumPayload(sims) - payload0)
		each = append(each, lat...)
		rep.PolicyMissing += len(sims) - n
		if n > 0 {
			all = append(all, slices.Max(lat))
		}
		say("policy edit %d reached %d/%d agents; the last after %s", k, n, len(sims), slices.Max(append(lat, 0)).Round(time.Millisecond))
	}
	rep.PolicyChanges = opts.PolicyChanges
	rep.PolicyCPU = (srv.cpu() - cpu0) / float64(opts.PolicyChanges)
	rep.PolicyLatency, rep.PolicyAllLatency = summarize(each), summarize(all)
	rep.PolicyWireBytes = wire / float64(opts.PolicyChanges*len(sims))
	rep.PolicyPayloadBytes = payload / float64(opts.PolicyChanges*len(sims))
	return nil
}

func count(sims []*sim, f func(*sim) bool) int {
	n := 0
	for _, s := range sims {
		if s.agent != nil && f(s) {
			n++
		}
	}
	return n
}

func sumFunc(sims []*sim, f func(*sim) int) int {
	n := 0
	for _, s := range sims {
		n += f(s)
	}
	return n
}

func sumPayload(sims []*sim) int64 {
	var n int64
	for _, s := range sims {
		n += s.payload.Load()
	}
	return n
}

// pluginStats sums the figures of the server's child processes.
func pluginStats(serverPid int) ProcStats {
	var sum ProcStats
	for _, pid := range children(serverPid) {
		if ps, err := readProc(pid); err == nil {
			sum.CPUSeconds += ps.CPUSeconds
			sum.RSSBytes += ps.RSSBytes
			sum.PeakRSSBytes += ps.PeakRSSBytes
		}
	}
	return sum
}

// newAgent registers sim's cluster through the admin API and builds its
// agent, which trades the token and a CSR for its certificate when it runs.
func newAgent(ctx context.Context, admin relayv1.AdminClient, srv *serverProcess, work string, s *sim, logger *slog.Logger) (*agent.Agent, error) {
	name := s.cluster.Name
	resp, err := admin.RegisterCluster(ctx, &relayv1.RegisterClusterRequest{Cluster: name})
	if err != nil {
		return nil, fmt.Errorf("register %s: %w", name, err)
	}
	dir := filepath.Join(work, "agents", name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("register %s: %w", name, err)
	}
	tokenFile := filepath.Join(dir, "token")
	if err := writeFile(tokenFile, []byte(resp.GetToken())); err != nil {
		return nil, err
	}
	opts := agent.DefaultOptions()
	opts.Cluster, opts.Server, opts.ServerName = name, srv.relay, "127.0.0.1"
	opts.TokenFile, opts.CAFile, opts.StateDir = tokenFile, srv.caBundle, dir
	opts.Version = "bench"
	return agent.New(opts, s.src, map[string]agent.Sink{"*": s}, logger.With("cluster", name))
}

func writeFile(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// redactStore hides a Redis password.
func redactStore(store string) string {
	if i := strings.Index(store, "@"); i > 0 {
		if j := strings.Index(store, "://"); j > 0 && j < i {
			return store[:j+3] + "***" + store[i:]
		}
	}
	return store
}

// redisUsedMemory reads used_memory from INFO memory.
func redisUsedMemory(ctx context.Context, url string) (int64, error) {
	ropts, err := goredis.ParseURL(url)
	if err != nil {
		return 0, fmt.Errorf("parse --store: %w", err)
	}
	c := goredis.NewClient(ropts)
	defer c.Close()
	info, err := c.Info(ctx, "memory").Result()
	if err != nil {
		return 0, fmt.Errorf("redis INFO memory: %w", err)
	}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "used_memory:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, errors.New("redis INFO memory has no used_memory")
}

// serverProcess is the `meshrelay server` child.
type serverProcess struct {
	cmd      *exec.Cmd
	relay    string
	dataDir  string
	caBundle string
	logPath  string
	logFile  *os.File
	exited   chan struct{}
}

func (p *serverProcess) pid() int { return p.cmd.Process.Pid }

// cpu returns the CPU seconds of the server and its plugins so far.
func (p *serverProcess) cpu() float64 {
	ps, _ := readProc(p.pid())
	return ps.CPUSeconds + pluginStats(p.pid()).CPUSeconds
}

func (p *serverProcess) port() int {
	_, port, _ := net.SplitHostPort(p.relay)
	n, _ := strconv.Atoi(port)
	return n
}

// startServer runs `meshrelay server` on free loopback ports, in its own
// process group so its plugins stop with it.
func startServer(ctx context.Context, opts Options, work string) (*serverProcess, error) {
	relay, err := freePort()
	if err != nil {
		return nil, err
	}
	metrics, err := freePort()
	if err != nil {
		return nil, err
	}
	p := &serverProcess{
		relay: relay, dataDir: filepath.Join(work, "server"), logPath: filepath.Join(work, "server.log"),
		exited: make(chan struct{}),
	}
	p.caBundle = filepath.Join(p.dataDir, "ca-bundle.crt")
	args := []string{"server",
		"--listen", relay, "--metrics-addr", metrics, "--server-id", "bench",
		"--data-dir", p.dataDir, "--store", opts.Store,
		"--plugin-dir", filepath.Join(work, "plugins"),
		"--config-source", "dir:" + filepath.Join(work, "policies"),
		"--san", "127.0.0.1", "--log-format", "json", "--log-level", "warn",
	}
	args = append(args, opts.ServerArgs...)
	if p.logFile, err = os.Create(p.logPath); err != nil {
		return nil, fmt.Errorf("start server: %w", err)
	}
	p.cmd = exec.Command(opts.Executable, args...)
	p.cmd.Stdout, p.cmd.Stderr = p.logFile, p.logFile
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		p.logFile.Close()
		return nil, fmt.Errorf("start server: %w", err)
	}
	go func() { _ = p.cmd.Wait(); close(p.exited) }()
	return p, nil
}

// stop ends the server and its plugins: SIGTERM to its process group,
// SIGKILL after 10 seconds.
func (p *serverProcess) stop() {
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-p.exited
	}
	// Plugins left behind by a server that died first.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	p.logFile.Close()
}

// waitReady waits until the server answers the admin API.
func (p *serverProcess) waitReady(ctx context.Context, timeout time.Duration) (relayv1.AdminClient, context.Context, func(), error) {
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-p.exited:
			return nil, nil, nil, fmt.Errorf("the server exited at start; see %s:\n%s", p.logPath, tail(p.logPath, 20))
		case <-ctx.Done():
			return nil, nil, nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, nil, nil, fmt.Errorf("the server was not ready within %s; see %s", timeout, p.logPath)
		}
		ca, err := os.ReadFile(p.caBundle)
		if err != nil {
			continue
		}
		tok, err := os.ReadFile(filepath.Join(p.dataDir, "admin-token"))
		if err != nil || len(bytes.TrimSpace(tok)) == 0 {
			continue
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(ca) {
			continue
		}
		conn, err := grpc.NewClient(p.relay, grpc.WithTransportCredentials(credentials.NewTLS(
			pki.ClientTLSConfig(pki.ClientTLSOptions{RootCAs: pool, ServerName: "127.0.0.1"}))))
		if err != nil {
			return nil, nil, nil, fmt.Errorf("dial server: %w", err)
		}
		actx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+strings.TrimSpace(string(tok)))
		admin := relayv1.NewAdminClient(conn)
		cctx, cancel := context.WithTimeout(actx, 2*time.Second)
		_, err = admin.GetStatus(cctx, &relayv1.GetStatusRequest{})
		cancel()
		if err != nil {
			conn.Close()
			continue
		}
		return admin, actx, func() { conn.Close() }, nil
	}
}

func tail(path string, lines int) string {
	data, _ := os.ReadFile(path)
	ls := strings.Split(strings.TrimSpace(string(data)), "\n")
	return strings.Join(ls[max(len(ls)-lines, 0):], "\n")
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// pluginBinaries finds the plugin binaries, or builds them from the source
// tree.
func pluginBinaries(ctx context.Context, opts Options, work string) (map[string]string, error) {
	dirs := []string{opts.Plugins}
	if opts.Plugins == "" {
		dirs = append(dirs, filepath.Dir(opts.Executable))
	}
	if found, ok := pluginhost.FindBinaries(Plugins, dirs...); ok {
		return found, nil
	}
	if opts.Plugins != "" {
		return nil, fmt.Errorf("--plugins %s does not hold meshrelay-plugin-{%s}", opts.Plugins, strings.Join(Plugins, ","))
	}
	root, err := sourceRoot()
	if err != nil {
		return nil, err
	}
	found, err := pluginhost.BuildBinaries(ctx, root, filepath.Join(work, "bin"), Plugins)
	if err != nil {
		return nil, fmt.Errorf("%w (or pass --plugins)", err)
	}
	return found, nil
}

// sourceRoot walks up from the working directory to the meshrelay module.
func sourceRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if data, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil &&
			bytes.Contains(data, []byte("module github.com/meshrelay/meshrelay\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no plugin binaries: pass --plugins DIR or run from the meshrelay source tree")
		}
		dir = parent
	}
}
