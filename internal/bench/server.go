package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/meshrelay/meshrelay/core/store"
	storeredis "github.com/meshrelay/meshrelay/core/store/redis"
	"github.com/meshrelay/meshrelay/internal/adminclient"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
)

// serverProcess is one `meshrelay server` child: a replica.
type serverProcess struct {
	index      int
	id         string // --server-id
	exe        string
	args       []string
	relay      string
	metrics    string // --metrics-addr
	dataDir    string
	caBundle   string
	adminToken string // the admin token file it reads
	logPath    string

	// cmdMu guards the process, which restart replaces.
	cmdMu   sync.Mutex
	cmd     *exec.Cmd
	logFile *os.File
	exited  chan struct{}

	// The admin API, once waitReady succeeded.
	admin      relayv1.AdminClient
	adminCtx   context.Context
	closeAdmin func()

	mu      sync.Mutex
	killed  bool
	server  ProcStats // the last figures read, kept once killed
	plugins ProcStats
}

// replicaNames returns the --server-id and the data directory (under the
// work directory) of replica i of n. A lone replica keeps the names the
// benchmark always used.
func replicaNames(i, n int) (id, dir string) {
	if n == 1 {
		return "bench", "server"
	}
	return fmt.Sprintf("bench-%d", i), fmt.Sprintf("server-%d", i)
}

func (p *serverProcess) pid() int {
	p.cmdMu.Lock()
	defer p.cmdMu.Unlock()
	return p.cmd.Process.Pid
}

// done returns a channel closed when the current process exited.
func (p *serverProcess) done() <-chan struct{} {
	p.cmdMu.Lock()
	defer p.cmdMu.Unlock()
	return p.exited
}

func (p *serverProcess) port() int {
	_, port, _ := net.SplitHostPort(p.relay)
	n, _ := strconv.Atoi(port)
	return n
}

// sample returns the figures of the server process and of its plugins (its
// child processes), read from /proc; once the replica was killed, the last
// figures read before.
func (p *serverProcess) sample() (server, plugins ProcStats) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.killed {
		return p.server, p.plugins
	}
	if ps, err := readProc(p.pid()); err == nil {
		p.server = ps
	}
	p.plugins = pluginStats(p.pid())
	return p.server, p.plugins
}

// cpu returns the CPU seconds of the server and its plugins so far.
func (p *serverProcess) cpu() float64 {
	s, pl := p.sample()
	return s.CPUSeconds + pl.CPUSeconds
}

// startServer runs replica i of n as `meshrelay server` on free loopback
// ports, in its own process group so its plugins stop with it, on store
// (opts.Store when empty). extra flags come before opts.ServerArgs.
func startServer(opts Options, work, store string, i, n int, extra ...string) (*serverProcess, error) {
	relay, err := freePort()
	if err != nil {
		return nil, err
	}
	metrics, err := freePort()
	if err != nil {
		return nil, err
	}
	id, dir := replicaNames(i, n)
	p := &serverProcess{
		index: i, id: id, exe: opts.Executable, relay: relay, metrics: metrics,
		dataDir: filepath.Join(work, dir), logPath: filepath.Join(work, dir+".log"),
	}
	p.caBundle = filepath.Join(p.dataDir, "ca-bundle.crt")
	p.adminToken = filepath.Join(p.dataDir, "admin-token")
	p.args = []string{"server",
		"--listen", relay, "--metrics-addr", metrics, "--server-id", id,
		"--data-dir", p.dataDir, "--store", cmp.Or(store, opts.Store),
		"--plugin-dir", filepath.Join(work, "plugins"),
		"--config-source", "dir:" + filepath.Join(work, "policies"),
		"--san", "127.0.0.1", "--log-format", "json", "--log-level", "warn",
	}
	p.args = append(p.args, extra...)
	p.args = append(p.args, opts.ServerArgs...)
	if err := p.launch(); err != nil {
		return nil, err
	}
	return p, nil
}

// launch starts the server process with p's command line, its output
// appended to its log.
func (p *serverProcess) launch() error {
	logFile, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("start server: %w", err)
	}
	cmd := exec.Command(p.exe, p.args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("start server: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	p.cmdMu.Lock()
	p.cmd, p.logFile, p.exited = cmd, logFile, exited
	p.cmdMu.Unlock()
	return nil
}

// restart starts a killed replica again on the same ports, data directory
// and store, and waits until its admin API answers.
func (p *serverProcess) restart(ctx context.Context, timeout time.Duration) error {
	p.cmdMu.Lock()
	p.logFile.Close()
	p.cmdMu.Unlock()
	if err := p.launch(); err != nil {
		return err
	}
	p.mu.Lock()
	p.killed = false
	p.mu.Unlock()
	deadline := time.Now().Add(timeout)
	for {
		cctx, cancel := context.WithTimeout(p.adminCtx, 2*time.Second)
		_, err := p.admin.GetStatus(cctx, &relayv1.GetStatusRequest{})
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-p.done():
			return fmt.Errorf("replica %s exited after its restart; see %s", p.id, p.logPath)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("replica %s did not answer within %s of its restart: %w", p.id, timeout, err)
		}
	}
}

// signal sends sig to the replica's process group: the server and its
// plugins.
func (p *serverProcess) signal(sig syscall.Signal) error {
	return syscall.Kill(-p.pid(), sig)
}

// goroutines reads go_goroutines from the replica's /metrics.
func (p *serverProcess) goroutines(ctx context.Context) (int, error) {
	return scrapeGauge(ctx, "http://"+p.metrics+"/metrics", "go_goroutines")
}

// stop ends the server and its plugins: SIGTERM to its process group,
// SIGKILL after 10 seconds.
func (p *serverProcess) stop() {
	if p.closeAdmin != nil {
		p.closeAdmin()
	}
	pgid, exited := p.pid(), p.done()
	// A paused replica must run to stop.
	_ = syscall.Kill(-pgid, syscall.SIGCONT)
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-exited
	}
	// Plugins left behind by a server that died first.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	p.cmdMu.Lock()
	p.logFile.Close()
	p.cmdMu.Unlock()
}

// kill ends the replica without warning, as a lost machine would: SIGKILL
// to the server and its plugins. Its figures are read just before.
func (p *serverProcess) kill() {
	p.sample()
	p.mu.Lock()
	p.killed = true
	p.mu.Unlock()
	exited := p.done()
	_ = p.signal(syscall.SIGKILL)
	<-exited
}

func (p *serverProcess) isKilled() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.killed
}

// waitReady waits until the server answers the admin API, and keeps an
// admin client.
func (p *serverProcess) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-p.done():
			return fmt.Errorf("the server exited at start; see %s:\n%s", p.logPath, tail(p.logPath, 20))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the server was not ready within %s; see %s", timeout, p.logPath)
		}
		c, err := adminclient.Dial(adminclient.Options{
			Addr: p.relay, CAFile: p.caBundle, ServerName: "127.0.0.1", TokenFile: p.adminToken,
			// The fleet's status grows with the fleet.
			MaxResponse: 1 << 30,
		})
		if err != nil {
			continue // the token or the CA bundle is not written yet
		}
		actx := c.Context(ctx)
		cctx, cancel := context.WithTimeout(actx, 2*time.Second)
		_, err = c.GetStatus(cctx, &relayv1.GetStatusRequest{})
		cancel()
		if err != nil {
			c.Close()
			continue
		}
		p.admin, p.adminCtx, p.closeAdmin = c, actx, func() { c.Close() }
		return nil
	}
}

// served counts the agents connected to this replica, as its admin API
// reports them.
func (p *serverProcess) served() (int, error) {
	st, err := p.admin.ListClusters(p.adminCtx, &relayv1.ListClustersRequest{})
	if err != nil {
		return 0, fmt.Errorf("list clusters of %s: %w", p.id, err)
	}
	n := 0
	for _, c := range st.GetClusters() {
		if c.GetConnected() && c.GetReplica() == p.id {
			n++
		}
	}
	return n, nil
}

// replicaSet is the server replicas of a run, replica 0 first.
type replicaSet []*serverProcess

// startReplicas starts opts.Replicas servers on one store and waits until
// each answers. Replica 0 starts alone on the store, which must be empty,
// and creates the CA (kept in the store, its key sealed), the admin token
// and the CA key's encryption key (in its data directory); once the CA is
// in the store the others start, reading it from there and the admin
// token and the encryption key from replica 0's files, as replicas of one
// installation do.
func startReplicas(ctx context.Context, opts Options, work string, stores []string, say func(string, ...any)) (replicaSet, error) {
	var rs replicaSet
	storeOf := func(i int) string {
		if i < len(stores) {
			return stores[i]
		}
		return opts.Store
	}
	first, err := startServer(opts, work, storeOf(0), 0, opts.Replicas)
	if err != nil {
		return nil, err
	}
	rs = append(rs, first)
	fail := func(err error) (replicaSet, error) {
		rs.stop()
		return nil, err
	}
	say("server pid %d listening on %s; logs in %s", first.pid(), first.relay, first.logPath)
	if err := first.waitReady(ctx, opts.Timeout); err != nil {
		return fail(err)
	}
	if st, err := first.admin.ListClusters(first.adminCtx, &relayv1.ListClustersRequest{}); err == nil && len(st.GetClusters()) > 0 {
		return fail(fmt.Errorf("the store already holds %d clusters; run against an empty store", len(st.GetClusters())))
	}
	if opts.Replicas == 1 {
		return rs, nil
	}
	if err := waitStoredCA(ctx, opts, opts.Timeout); err != nil {
		return fail(err)
	}
	for i := 1; i < opts.Replicas; i++ {
		p, err := startServer(opts, work, storeOf(i), i, opts.Replicas, "--admin-token-file", first.adminToken,
			"--ca-key-encryption-key-file", filepath.Join(first.dataDir, "ca-key-encryption-key"))
		if err != nil {
			return fail(err)
		}
		p.adminToken = first.adminToken
		rs = append(rs, p)
		say("server pid %d listening on %s; logs in %s", p.pid(), p.relay, p.logPath)
	}
	for _, p := range rs[1:] {
		if err := p.waitReady(ctx, opts.Timeout); err != nil {
			return fail(err)
		}
	}
	return rs, nil
}

// waitStoredCA waits until the CA replica 0 created is in the Redis store,
// so that the other replicas share it instead of each creating its own.
func waitStoredCA(ctx context.Context, opts Options, timeout time.Duration) error {
	ropts, err := storeredis.ParseURL(opts.Store)
	if err != nil {
		return fmt.Errorf("--store: %w", err)
	}
	ropts.Logger = opts.Logger
	st, err := storeredis.New(ctx, ropts)
	if err != nil {
		return err
	}
	defer st.Close()
	deadline := time.Now().Add(timeout)
	for {
		_, _, err := st.GetCA(ctx)
		if err == nil {
			return nil
		}
		if !errors.Is(err, store.ErrNotFound) || time.Now().After(deadline) {
			return fmt.Errorf("wait for replica 0's CA in the store: %w", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (rs replicaSet) stop() {
	var wg sync.WaitGroup
	for _, p := range rs {
		wg.Go(p.stop)
	}
	wg.Wait()
}

// ports returns the replicas' relay ports.
func (rs replicaSet) ports() []int {
	out := make([]int, len(rs))
	for i, p := range rs {
		out[i] = p.port()
	}
	return out
}

// cpu returns the CPU seconds of every replica and its plugins so far; a
// killed replica counts what it used until it was killed.
func (rs replicaSet) cpu() float64 {
	var sum float64
	for _, p := range rs {
		sum += p.cpu()
	}
	return sum
}

// totals sums the replicas' figures: the servers' and the plugins'.
func (rs replicaSet) totals() (server, plugins ProcStats) {
	for _, p := range rs {
		s, pl := p.sample()
		server = server.plus(s)
		plugins = plugins.plus(pl)
	}
	return server, plugins
}

// relays returns the replicas' relay addresses starting with replica
// first's, then the others in turn: the server list of an agent of replica
// first, which moves to the next one when its stream fails.
func (rs replicaSet) relays(first int) string {
	addrs := make([]string, 0, len(rs))
	for k := range rs {
		addrs = append(addrs, rs[(first+k)%len(rs)].relay)
	}
	return strings.Join(addrs, ",")
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
