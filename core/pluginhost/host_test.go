package pluginhost

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/internal/testutil"
)

// installRaw puts a binary into dir under name with a lock entry, without
// starting it, as a lock file written by an older install would.
func installRaw(t *testing.T, dir, bin, name string) Entry {
	t.Helper()
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	path := BinaryPrefix + name
	if err := os.WriteFile(filepath.Join(dir, path), data, 0o755); err != nil {
		t.Fatal(err)
	}
	sum, err := fileSHA256(filepath.Join(dir, path))
	if err != nil {
		t.Fatal(err)
	}
	entries, err := List(dir)
	if err != nil {
		t.Fatal(err)
	}
	e := Entry{Name: name, Version: "1.0.0", Protocol: 1, Backends: []string{"test"}, SHA256: sum, Path: path, Installed: time.Now().UTC()}
	if err := writeLock(dir, append(entries, e)); err != nil {
		t.Fatal(err)
	}
	return e
}

func testOptions() Options {
	o := DefaultOptions()
	o.BackoffBase = 10 * time.Millisecond
	o.BackoffMax = 100 * time.Millisecond
	o.CallTimeout = 20 * time.Second
	return o
}

func newHost(t *testing.T, dir string, opts Options, logger *slog.Logger) *Host {
	t.Helper()
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	h, err := New(dir, logger, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func service(ns, name string) snapshot.Resource {
	r, err := snapshot.FromJSON([]byte(fmt.Sprintf(`{"apiVersion":"v1","kind":"Service","metadata":{"namespace":%q,"name":%q},"spec":{"selector":{"app":%q}}}`, ns, name, name)))
	if err != nil {
		panic(err)
	}
	return r
}

// views numbers the views view returns.
var views atomic.Int64

// view returns a fleet of the clusters, each with one Service whose name
// differs from any earlier view's, so that a session sends every cluster
// of it and a plugin answers every one.
func view(clusters ...string) View {
	return with(View{}, clusters...)
}

// with returns v with more clusters (see view), the others as they were.
func with(v View, clusters ...string) View {
	out := View{Clusters: maps.Clone(v.Clusters)}
	if out.Clusters == nil {
		out.Clusters = map[string]Cluster{}
	}
	n := views.Add(1)
	for _, c := range clusters {
		in, err := snapshot.New(uint64(n), []snapshot.Resource{service("default", fmt.Sprintf("svc-%s-%d", c, n))})
		if err != nil {
			panic(err)
		}
		out.Clusters[c] = Cluster{Input: in, Meshes: []string{"istio"}}
	}
	return out
}

func mustPlugin(t *testing.T, h *Host, name string) *Plugin {
	t.Helper()
	p, ok := h.Plugin(name)
	if !ok {
		t.Fatalf("plugin %q not found", name)
	}
	return p
}

// waitGone waits until the process has exited (or is a zombie).
func waitGone(t *testing.T, pid int) {
	t.Helper()
	testutil.Eventually(t, fmt.Sprintf("process %d to exit", pid), func() bool { return !alive(pid) })
}

func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	state, ok := procState(pid)
	return ok && state != 'Z'
}

// procState returns a process's state as /proc shows it ('R', 'S', 'T',
// 'Z'...); false when it cannot be read.
func procState(pid int) (byte, bool) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// The state follows the command name in parentheses.
	s := string(stat)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2], true
	}
	return '?', true
}

// stop sends a process SIGSTOP and waits until it is stopped: the signal
// is delivered asynchronously, and a process not yet stopped still
// answers. It sends SIGCONT when the test ends.
func stop(t *testing.T, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	testutil.Eventually(t, fmt.Sprintf("process %d to stop", pid), func() bool {
		state, _ := procState(pid)
		return state == 'T' || state == 't'
	})
}

// works checks that a plugin answers a view of two clusters with one
// output per cluster, and returns the view and the answer.
func works(t *testing.T, tr Translator) (View, Result) {
	t.Helper()
	v := view("east", "west")
	res, err := tr.Translate(context.Background(), v)
	if err != nil {
		t.Fatalf("%s: Translate = %v", tr.Name(), err)
	}
	if len(res.Outputs) != 2 {
		t.Fatalf("%s: Translate gave %d outputs, want 2: %+v", tr.Name(), len(res.Outputs), res.Outputs)
	}
	return v, res
}

// worksAfresh checks that a plugin works and that its session sent the
// view in full: a new session, after a crash, a kill or a refused answer.
func worksAfresh(t *testing.T, tr Translator) View {
	t.Helper()
	v, res := works(t, tr)
	if !res.Full {
		t.Errorf("%s: the update after the session was lost was a delta, want the whole view", tr.Name())
	}
	return v
}

func TestInstallListVerifyRemove(t *testing.T) {
	bin := pluginBinary(t, "sdk", "good")
	dir := t.TempDir()
	e, err := InstallContext(t.Context(), dir, bin, "", nil) // a nil logger discards the plugin's output
	if err != nil {
		t.Fatalf("Install = %v", err)
	}
	if e.Name != "good" || e.Version != "1.0.0" || e.Protocol != 1 || len(e.Backends) != 1 || e.Backends[0] != "test" || e.Path != "meshrelay-plugin-good" {
		t.Errorf("Install = %+v", e)
	}
	entries, err := List(dir)
	if err != nil || len(entries) != 1 || entries[0].SHA256 != e.SHA256 {
		t.Fatalf("List = %+v, %v", entries, err)
	}
	if err := Verify(dir); err != nil {
		t.Errorf("Verify = %v", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, e.Path), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("tampered"))
	f.Close()
	if err := Verify(dir); !errors.Is(err, ErrChecksum) || !strings.Contains(err.Error(), e.SHA256) {
		t.Errorf("Verify after tampering = %v, want a checksum error naming %s", err, e.SHA256)
	}
	if err := Remove(dir, "good"); err != nil {
		t.Fatal(err)
	}
	if entries, _ := List(dir); len(entries) != 0 {
		t.Errorf("List after Remove = %+v", entries)
	}
	if _, err := os.Stat(filepath.Join(dir, e.Path)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("binary still there after Remove: %v", err)
	}
	if err := Remove(dir, "good"); err == nil {
		t.Error("Remove of a missing plugin succeeded")
	}
}

func TestInstallURL(t *testing.T) {
	bin := pluginBinary(t, "sdk", "good")
	sum, err := fileSHA256(bin)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.ServeFile(w, r, bin) }))
	defer srv.Close()
	dir := t.TempDir()
	if _, err := Install(dir, srv.URL+"/good", ""); err == nil || !strings.Contains(err.Error(), "needs the binary's sha256") {
		t.Errorf("Install(URL, no sum) = %v", err)
	}
	wrong := strings.Repeat("0", 64)
	if _, err := Install(dir, srv.URL+"/good", wrong); !errors.Is(err, ErrChecksum) {
		t.Errorf("Install(URL, wrong sum) = %v, want ErrChecksum", err)
	}
	e, err := Install(dir, srv.URL+"/good", sum)
	if err != nil || e.SHA256 != sum {
		t.Fatalf("Install(URL) = %+v, %v", e, err)
	}
	works(t, mustPlugin(t, newHost(t, dir, testOptions(), nil), "good"))
}

func TestWrongChecksum(t *testing.T) {
	dir := t.TempDir()
	e, err := Install(dir, pluginBinary(t, "sdk", "good"), "")
	if err != nil {
		t.Fatal(err)
	}
	installRaw(t, dir, pluginBinary(t, "sdk", "other"), "other")
	// Replace the binary after install: the host must refuse to start it.
	if err := os.WriteFile(filepath.Join(dir, e.Path), []byte("#!/bin/sh\necho replaced\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	h := newHost(t, dir, testOptions(), nil)
	_, err = mustPlugin(t, h, "good").Translate(context.Background(), view("east"))
	if !errors.Is(err, ErrChecksum) {
		t.Fatalf("Translate = %v, want ErrChecksum", err)
	}
	t.Logf("error: %v", err)
	for _, want := range []string{`"good"`, e.SHA256, "sha256"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	if mustPlugin(t, h, "good").Starts() != 1 || mustPlugin(t, h, "good").Pid() != 0 {
		t.Error("a plugin with a wrong checksum runs")
	}
	works(t, mustPlugin(t, h, "other"))
}

func TestUnsupportedProtocol(t *testing.T) {
	dir := t.TempDir()
	_, err := Install(dir, pluginBinary(t, "v2", "future"), "")
	if !errors.Is(err, ErrUnsupportedProtocol) {
		t.Fatalf("Install(v2 plugin) = %v, want ErrUnsupportedProtocol", err)
	}
	t.Logf("error: %v", err)
	if entries, _ := List(dir); len(entries) != 0 {
		t.Errorf("refused plugin is in the lock file: %+v", entries)
	}
	// Installed by other means, it is refused at start too.
	installRaw(t, dir, pluginBinary(t, "v2", "future"), "future")
	_, err = mustPlugin(t, newHost(t, dir, testOptions(), nil), "future").Translate(context.Background(), view("east"))
	if !errors.Is(err, ErrUnsupportedProtocol) {
		t.Fatalf("Translate(v2 plugin) = %v, want ErrUnsupportedProtocol", err)
	}
}

func TestCrashAtStart(t *testing.T) {
	dir := t.TempDir()
	if _, err := Install(dir, pluginBinary(t, "crash-start", "crashy"), ""); err == nil {
		t.Fatal("Install of a plugin that cannot start succeeded")
	}
	installRaw(t, dir, pluginBinary(t, "crash-start", "crashy"), "crashy")
	installRaw(t, dir, pluginBinary(t, "sdk", "good"), "good")
	h := newHost(t, dir, testOptions(), nil)
	crashy := mustPlugin(t, h, "crashy")
	_, err := crashy.Translate(context.Background(), view("east"))
	if err == nil || !strings.Contains(err.Error(), `"crashy"`) || !strings.Contains(err.Error(), "boom: faulty plugin cannot start") {
		t.Fatalf("Translate = %v, want an error with the plugin's name and stderr", err)
	}
	t.Logf("error: %v", err)
	// The next attempt waits out the backoff and fails again.
	if _, err := crashy.Translate(context.Background(), view("east")); err == nil || crashy.Starts() != 2 {
		t.Fatalf("second Translate = %v after %d starts", err, crashy.Starts())
	}
	works(t, mustPlugin(t, h, "good"))
}

func TestStdoutBeforeHandshake(t *testing.T) {
	dir := t.TempDir()
	installRaw(t, dir, pluginBinary(t, "stdout", "chatty"), "chatty")
	installRaw(t, dir, pluginBinary(t, "sdk", "good"), "good")
	h := newHost(t, dir, testOptions(), nil)
	_, err := mustPlugin(t, h, "chatty").Translate(context.Background(), view("east"))
	if err == nil || !strings.Contains(err.Error(), "stdout before the handshake") || !strings.Contains(err.Error(), "hello from a plugin that prints") {
		t.Fatalf("Translate = %v, want a clear stdout error", err)
	}
	t.Logf("error: %v", err)
	works(t, mustPlugin(t, h, "good"))
}

func TestCrashMidSession(t *testing.T) {
	dir := t.TempDir()
	installRaw(t, dir, pluginBinary(t, "raw", "faulty"), "faulty")
	installRaw(t, dir, pluginBinary(t, "sdk", "good"), "good")
	h := newHost(t, dir, testOptions(), nil)
	p := mustPlugin(t, h, "faulty")
	v, _ := works(t, p)
	pid := p.Pid()
	_, err := p.Translate(context.Background(), with(v, "crash"))
	if err == nil || !strings.Contains(err.Error(), "crashed") || !strings.Contains(err.Error(), "faulty plugin crashes on purpose") {
		t.Fatalf("Translate(crash) = %v, want a crash error", err)
	}
	t.Logf("error: %v", err)
	waitGone(t, pid)
	v = worksAfresh(t, p)
	if p.Starts() != 2 || p.Pid() == pid || p.Pid() == 0 {
		t.Errorf("after restart: %d starts, pid %d (was %d)", p.Starts(), p.Pid(), pid)
	}
	// Deltas work again.
	res, err := p.Translate(context.Background(), with(v, "north"))
	if err != nil || len(res.Outputs) != 1 || res.Outputs[0].Cluster != "north" {
		t.Fatalf("Translate(delta) after restart = %+v, %v", res, err)
	}
	works(t, mustPlugin(t, h, "good"))
}

func TestHang(t *testing.T) {
	dir := t.TempDir()
	installRaw(t, dir, pluginBinary(t, "raw", "faulty"), "faulty")
	opts := testOptions()
	opts.CallTimeout = 2 * time.Second
	h := newHost(t, dir, opts, nil)
	p := mustPlugin(t, h, "faulty")
	v, _ := works(t, p)
	pid := p.Pid()
	_, err := p.Translate(context.Background(), with(v, "hang"))
	if err == nil || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("Translate(hang) = %v, want a timeout that killed the plugin", err)
	}
	t.Logf("error: %v", err)
	waitGone(t, pid)
	worksAfresh(t, p)
}

// TestSteadyCallOutlivesCallTimeout gives plugins views that take them
// longer in all than the call timeout, in steps far shorter than it:
// taking a large view part by part (the host's sends wait on the plugin)
// and computing many targets one at a time (the SDK sends each target's
// outputs as it has them). Neither plugin is taken as hung: the call
// timeout measures silence, not size, and the answer is taken.
func TestSteadyCallOutlivesCallTimeout(t *testing.T) {
	const callTimeout = 1500 * time.Millisecond
	tests := map[string]struct {
		mode string
		view View
	}{
		// 60 parts of 0.9 MB, 50ms each (slowPart): 3s; the host can be
		// at most gRPC's largest flow-control window (16 MiB) ahead.
		"a large view taken part by part": {mode: "raw", view: bulky(60, 900<<10)},
		// 12 targets of 250ms (slowTarget), one at a time: 3s.
		"targets computed one at a time": {mode: "sdk", view: view(slowClusters(12)...)},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			installRaw(t, dir, pluginBinary(t, tc.mode, "steady"), "steady")
			opts := testOptions()
			opts.CallTimeout = callTimeout
			p := mustPlugin(t, newHost(t, dir, opts, nil), "steady")
			works(t, p)
			pid := p.Pid()
			start := time.Now()
			res, err := p.Translate(context.Background(), with(tc.view, "east"))
			if err != nil {
				t.Fatalf("Translate(%d clusters) = %v, want an answer", len(tc.view.Clusters)+1, err)
			}
			t.Logf("answered in %s with a call timeout of %s", time.Since(start).Round(time.Millisecond), callTimeout)
			if got, want := len(res.Outputs), len(tc.view.Clusters)+1; got != want {
				t.Errorf("Translate gave %d outputs, want %d", got, want)
			}
			if p.Starts() != 1 || p.Pid() != pid {
				t.Errorf("the plugin was restarted: %d starts, pid %d (was %d)", p.Starts(), p.Pid(), pid)
			}
		})
	}
}

// slowClusters returns the names of n clusters the faulty test plugin is
// slow on.
func slowClusters(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("slow-%02d", i)
	}
	return names
}

// bulky returns a view of n clusters the faulty test plugin is slow on,
// each with one Service of about size bytes: one part each.
func bulky(n, size int) View {
	v := View{Clusters: map[string]Cluster{}}
	for _, name := range slowClusters(n) {
		r, err := snapshot.FromJSON([]byte(fmt.Sprintf(`{"apiVersion":"v1","kind":"Service","metadata":{"namespace":"ns","name":"svc","annotations":{"pad":%q}}}`, strings.Repeat(name[len(name)-1:], size))))
		if err != nil {
			panic(err)
		}
		in, err := snapshot.New(1, []snapshot.Resource{r})
		if err != nil {
			panic(err)
		}
		v.Clusters[name] = Cluster{Input: in}
	}
	return v
}

// TestChatterIsNoProgress gives a plugin that answers with diagnostics
// and empty output parts forever: they bring its answer no closer to an
// end, so the call timeout kills it as it kills a silent one.
func TestChatterIsNoProgress(t *testing.T) {
	_, p := watchedFaulty(t, 2*time.Second, time.Hour)
	pid := p.Pid()
	_, err := p.Translate(context.Background(), view("chatter"))
	if err == nil || !strings.Contains(err.Error(), "no progress for 2s") {
		t.Fatalf("Translate(chatter) = %v, want the call timeout", err)
	}
	waitGone(t, pid)
	worksAfresh(t, p)
}

// TestStoppedPluginIsKilled stops a plugin process (SIGSTOP), as a frozen
// or swapped-out process would be: the call times out and the host kills
// the process without waiting for an answer it will never give, then
// starts a new one.
func TestStoppedPluginIsKilled(t *testing.T) {
	dir := t.TempDir()
	installRaw(t, dir, pluginBinary(t, "sdk", "good"), "good")
	opts := testOptions()
	opts.CallTimeout = time.Second
	h := newHost(t, dir, opts, nil)
	p := mustPlugin(t, h, "good")
	works(t, p)
	pid := p.Pid()
	stop(t, pid)
	done := make(chan error, 1)
	go func() {
		_, err := p.Translate(context.Background(), view("east"))
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "killed") {
			t.Fatalf("Translate on a stopped plugin = %v, want a timeout that killed it", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Translate on a stopped plugin did not return within 30s: the host waits for the plugin to agree to exit")
	}
	waitGone(t, pid)
	worksAfresh(t, p)
	if p.Pid() == pid {
		t.Errorf("the plugin runs as pid %d still", pid)
	}
}

// TestWatchKillsIdleStoppedPlugin stops a plugin while nothing calls it:
// no call can time out, so only the host's health watch can find it, and
// it must kill it (the next call starts a new one) while leaving a
// healthy plugin alone.
func TestWatchKillsIdleStoppedPlugin(t *testing.T) {
	dir := t.TempDir()
	installRaw(t, dir, pluginBinary(t, "sdk", "good"), "good")
	installRaw(t, dir, pluginBinary(t, "raw", "faulty"), "faulty")
	opts := testOptions()
	opts.HealthInterval, opts.HealthTimeout = 100*time.Millisecond, time.Second
	h := newHost(t, dir, opts, nil)
	stopped, healthy := mustPlugin(t, h, "good"), mustPlugin(t, h, "faulty")
	works(t, stopped)
	works(t, healthy)
	pid, healthyPid := stopped.Pid(), healthy.Pid()
	stop(t, pid)
	watch(t, h)
	waitGone(t, pid)
	if healthy.Pid() != healthyPid || healthy.Starts() != 1 {
		t.Errorf("the healthy plugin was restarted: pid %d (was %d), %d starts", healthy.Pid(), healthyPid, healthy.Starts())
	}
	worksAfresh(t, stopped)
}

// TestWatchKillsPluginStoppedDuringCall stops a plugin while a call
// waits on it: the watch's health check, which gRPC serves beside the
// call, finds it long before the call timeout, kills it and the call
// returns saying why.
func TestWatchKillsPluginStoppedDuringCall(t *testing.T) {
	h, p := watchedFaulty(t, 10*time.Minute, 100*time.Millisecond)
	pid := p.Pid()
	done := make(chan error, 1)
	go func() {
		_, err := p.Translate(context.Background(), view("hang"))
		done <- err
	}()
	waitCallInFlight(t, p)
	stop(t, pid)
	watch(t, h)
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "failed its health check during the call") {
			t.Fatalf("Translate on a plugin stopped during the call = %v, want the health check's kill", err)
		}
		t.Logf("error: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("the call on a stopped plugin did not end within a minute")
	}
	waitGone(t, pid)
	worksAfresh(t, p)
}

// TestWatchLeavesBusyPluginToCallTimeout runs the watch beside a call that
// hangs in a plugin that is alive: the plugin answers its health checks,
// so only the call timeout ends the call.
func TestWatchLeavesBusyPluginToCallTimeout(t *testing.T) {
	h, p := watchedFaulty(t, 2*time.Second, 50*time.Millisecond)
	watch(t, h)
	_, err := p.Translate(context.Background(), view("hang"))
	if err == nil || !strings.Contains(err.Error(), "no progress for 2s") {
		t.Fatalf("Translate(hang) with the watch running = %v, want the call timeout", err)
	}
}

// watchedFaulty starts the faulty plugin on a host with the given call
// timeout and health interval (each check may take a second).
func watchedFaulty(t *testing.T, callTimeout, healthInterval time.Duration) (*Host, *Plugin) {
	t.Helper()
	dir := t.TempDir()
	installRaw(t, dir, pluginBinary(t, "raw", "faulty"), "faulty")
	opts := testOptions()
	opts.CallTimeout = callTimeout
	opts.HealthInterval, opts.HealthTimeout = healthInterval, time.Second
	h := newHost(t, dir, opts, nil)
	p := mustPlugin(t, h, "faulty")
	works(t, p)
	return h, p
}

// watch runs h.Watch until the test ends.
func watch(t *testing.T, h *Host) {
	ctx, cancel := context.WithCancel(context.Background())
	watched := make(chan struct{})
	go func() { h.Watch(ctx); close(watched) }()
	t.Cleanup(func() { cancel(); <-watched })
}

// waitCallInFlight waits until a call holds p.
func waitCallInFlight(t *testing.T, p *Plugin) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for p.mu.TryLock() {
		p.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatal("no call started within 15s")
		}
		<-tick.C
	}
}

func TestRefusedOutputs(t *testing.T) {
	tests := map[string]string{
		"malformed": "not valid JSON",
		"noname":    "has no name",
		"ghost":     `cluster "nonexistent", which is not in the fleet view`,
		"huge":      "larger than max",
	}
	dir := t.TempDir()
	installRaw(t, dir, pluginBinary(t, "raw", "faulty"), "faulty")
	installRaw(t, dir, pluginBinary(t, "sdk", "good"), "good")
	h := newHost(t, dir, testOptions(), nil)
	p := mustPlugin(t, h, "faulty")
	for cluster, want := range tests {
		t.Run(cluster, func(t *testing.T) {
			v, _ := works(t, p)
			starts := p.Starts()
			res, err := p.Translate(context.Background(), with(v, cluster))
			if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), `"faulty"`) {
				t.Fatalf("Translate(%s) = %+v, %v; want an error containing %q", cluster, res, err, want)
			}
			t.Logf("error: %v", err)
			if len(res.Outputs) != 0 {
				t.Errorf("Translate(%s) passed on outputs: %+v", cluster, res.Outputs)
			}
			worksAfresh(t, p)
			if p.Starts() != starts {
				t.Errorf("a plugin that answered badly was restarted; it still runs and only its session is reset")
			}
			works(t, mustPlugin(t, h, "good"))
		})
	}
	works(t, p)
}

func TestLargeOutputInParts(t *testing.T) {
	dir := t.TempDir()
	installRaw(t, dir, pluginBinary(t, "raw", "faulty"), "faulty")
	p := mustPlugin(t, newHost(t, dir, testOptions(), nil), "faulty")
	res, err := p.Translate(context.Background(), view("big-20"))
	if err != nil {
		t.Fatalf("Translate(20 MB) = %v", err)
	}
	if len(res.Outputs) != 1 {
		t.Fatalf("got %d outputs, want 1", len(res.Outputs))
	}
	size := 0
	for _, r := range res.Outputs[0].Resources {
		size += len(r.Body)
	}
	if n := len(res.Outputs[0].Resources); n != 40 || size < 20<<20 {
		t.Errorf("got %d resources of %d bytes, want 40 of at least 20 MiB", n, size)
	}
}

func TestLargeInput(t *testing.T) {
	dir := t.TempDir()
	installRaw(t, dir, pluginBinary(t, "sdk", "good"), "good")
	p := mustPlugin(t, newHost(t, dir, testOptions(), nil), "good")
	var rs []snapshot.Resource
	for i := range 2000 {
		r, err := snapshot.FromJSON([]byte(fmt.Sprintf(`{"apiVersion":"v1","kind":"Service","metadata":{"namespace":"ns","name":"svc-%04d","annotations":{"pad":%q}}}`, i, strings.Repeat("p", 10<<10))))
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	in, err := snapshot.New(1, rs)
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Translate(context.Background(), View{Clusters: map[string]Cluster{"east": {Input: in}}})
	if err != nil {
		t.Fatalf("Translate(20 MB input) = %v", err)
	}
	if len(res.Outputs) != 1 || !strings.Contains(string(res.Outputs[0].Resources[0].Body), "ns/svc-1999") {
		t.Errorf("the plugin did not see every input")
	}
}

func TestPluginLogsReachHostLogger(t *testing.T) {
	dir := t.TempDir()
	installRaw(t, dir, pluginBinary(t, "raw", "faulty"), "faulty")
	rec := newRecorder()
	p := mustPlugin(t, newHost(t, dir, testOptions(), slog.New(rec)), "faulty")
	works(t, p)
	p.Close()
	var found bool
	for _, r := range rec.all() {
		if r.Message == "translating" && r.Level == slog.LevelWarn && r.attrs["plugin"] == "faulty" && r.attrs["generation"] == "1" {
			found = true
		}
	}
	if !found {
		t.Errorf("the plugin's warning did not reach the host logger with its level and plugin attribute; got %+v", rec.all())
	}
}

type record struct {
	Message string
	Level   slog.Level
	attrs   map[string]string
}

// recorder is a slog.Handler that keeps every record. The handlers
// WithAttrs derives share one log, so its records and its lock are shared.
type recorder struct {
	log  *recordLog
	with []slog.Attr
}

type recordLog struct {
	mu      sync.Mutex
	records []record
}

func newRecorder() *recorder { return &recorder{log: &recordLog{}} }

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	attrs := map[string]string{}
	for _, a := range r.with {
		attrs[a.Key] = a.Value.String()
	}
	rec.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.String(); return true })
	r.log.mu.Lock()
	defer r.log.mu.Unlock()
	r.log.records = append(r.log.records, record{Message: rec.Message, Level: rec.Level, attrs: attrs})
	return nil
}
func (r *recorder) WithAttrs(as []slog.Attr) slog.Handler {
	return &recorder{log: r.log, with: append(append([]slog.Attr(nil), r.with...), as...)}
}
func (r *recorder) WithGroup(string) slog.Handler { return r }
func (r *recorder) all() []record {
	r.log.mu.Lock()
	defer r.log.mu.Unlock()
	return append([]record(nil), r.log.records...)
}

func TestCloseKillsEveryPlugin(t *testing.T) {
	dir := t.TempDir()
	installRaw(t, dir, pluginBinary(t, "raw", "faulty"), "faulty")
	installRaw(t, dir, pluginBinary(t, "sdk", "good"), "good")
	h := newHost(t, dir, testOptions(), nil)
	if err := h.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, p := range h.Plugins() {
		pids = append(pids, p.Pid())
	}
	if err := h.Check(context.Background()); err != nil {
		t.Fatalf("Check = %v", err)
	}
	h.Close()
	for _, pid := range pids {
		if pid == 0 {
			t.Fatal("a plugin did not start")
		}
		waitGone(t, pid)
	}
	if _, err := h.Plugins()[0].Translate(context.Background(), view("east")); err == nil {
		t.Error("Translate after Close succeeded")
	}
}

func TestPluginExitsWhenHostDies(t *testing.T) {
	bin := pluginBinary(t, "sdk", "good")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "PLUGINHOST_TEST_ORPHAN="+bin)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = testWriter{t}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	if err := cmd.Wait(); err != nil {
		t.Fatalf("host process: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("host process printed %q", line)
	}
	waitGone(t, pid)
}
