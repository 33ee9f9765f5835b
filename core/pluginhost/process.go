package pluginhost

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/hashicorp/go-plugin"
	translatorv1 "github.com/meshrelay/meshrelay/proto/translator/v1"
	"github.com/meshrelay/meshrelay/sdk/protocol"
	"github.com/meshrelay/meshrelay/sdk/protocol/host"
	"google.golang.org/grpc/health/grpc_health_v1"
)

// ErrChecksum is wrapped by the error of starting or verifying a plugin
// whose file does not hash to the sum in the lock file.
var ErrChecksum = errors.New("plugin checksum mismatch")

// ErrUnsupportedProtocol is wrapped by the error of starting a plugin that
// speaks no protocol version this host supports.
var ErrUnsupportedProtocol = errors.New("plugin speaks no supported protocol version")

// process is one running plugin process.
type process struct {
	client  *plugin.Client
	cmd     *exec.Cmd
	proto   *protocol.Client
	desc    *translatorv1.DescribeResponse
	stderr  *tail
	version int
	// unhealthy is set when the health watch killed the process during a
	// call, so that the call's error says why.
	unhealthy atomic.Bool
}

// fileSHA256 returns the hex SHA-256 of a file.
func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// checkSum compares a file's SHA-256 with the expected hex sum.
func checkSum(name, path, want string) error {
	got, err := fileSHA256(path)
	if err != nil {
		return fmt.Errorf("plugin %q: %w", name, err)
	}
	if !strings.EqualFold(got, want) {
		return fmt.Errorf("plugin %q: %w: %s has sha256 %s, the lock file expects %s", name, ErrChecksum, path, got, want)
	}
	return nil
}

// pluginEnvKeep are the variables of the server's environment a plugin
// gets; everything else (store passwords, tokens, cloud credentials) stays
// with the server. go-plugin adds its own handshake variables.
var pluginEnvKeep = []string{"MESHRELAY_PLUGIN_LOG_LEVEL", "PATH", "TMPDIR", "TZ", "LANG", "LC_ALL", "GOCOVERDIR", "GODEBUG", "GOGC", "GOMAXPROCS", "GOMEMLIMIT"}

// pluginEnv returns a plugin process's environment.
func pluginEnv(name string) []string {
	env := []string{"MESHRELAY_PLUGIN_NAME=" + name}
	for _, k := range pluginEnvKeep {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// launch starts a plugin binary whose SHA-256 must be sum, negotiates the
// protocol and describes it. name is used in logs and errors.
//
// The sum is checked once, by go-plugin's SecureConfig as it executes the
// file: hashing a plugin binary of tens of megabytes is most of what a
// server's start costs, so it is not hashed a second time beforehand.
func launch(ctx context.Context, name, path, sum string, opts Options, logger *slog.Logger) (*process, error) {
	rawSum, err := hex.DecodeString(sum)
	if err != nil {
		return nil, fmt.Errorf("plugin %q: sha256 %q is not hex: %w", name, sum, err)
	}
	stderr := &tail{max: 4096}
	cmd := exec.Command(path)
	cmd.Env = pluginEnv(name)
	cfg := protocol.ClientConfig(cmd, rawSum)
	cfg.SkipHostEnv = true
	cfg.StartTimeout = opts.StartTimeout
	cfg.Logger = hclogFor(logger)
	cfg.Stderr = stderr
	cfg.SyncStdout = &lineLogger{logger: logger, msg: "plugin wrote to stdout"}
	cfg.SyncStderr = io.MultiWriter(&lineLogger{logger: logger, msg: "plugin wrote to stderr"}, stderr)
	client := plugin.NewClient(cfg)
	p, err := dispense(ctx, client, name)
	if err != nil {
		// Kill waits for the plugin's output to be read, so the error can quote it.
		client.Kill()
		return nil, startError(name, path, sum, err, stderr)
	}
	p.stderr, p.cmd = stderr, cmd
	return p, nil
}

// startedBadly marks errors after the handshake, which startError
// passes on unchanged.
type startedBadly struct{ err error }

func (e *startedBadly) Error() string { return e.err.Error() }
func (e *startedBadly) Unwrap() error { return e.err }

func dispense(ctx context.Context, client *plugin.Client, name string) (*process, error) {
	rpc, err := client.Client()
	if err != nil {
		return nil, err
	}
	raw, err := rpc.Dispense(protocol.PluginName)
	if err != nil {
		return nil, &startedBadly{fmt.Errorf("start plugin %q: dispense: %w", name, err)}
	}
	pc, ok := raw.(*protocol.Client)
	if !ok {
		return nil, &startedBadly{fmt.Errorf("start plugin %q: dispensed %T", name, raw)}
	}
	p := &process{client: client, proto: pc, version: client.NegotiatedVersion()}
	if err := p.ping(ctx); err != nil {
		return nil, &startedBadly{fmt.Errorf("start plugin %q: health check: %w", name, err)}
	}
	if p.desc, err = host.Describe(ctx, pc.Translator); err != nil {
		return nil, &startedBadly{fmt.Errorf("start plugin %q: %w", name, err)}
	}
	return p, nil
}

// startError explains why go-plugin could not start a plugin.
func startError(name, path, sum string, err error, stderr *tail) error {
	var sb *startedBadly
	if errors.As(err, &sb) {
		return sb.err
	}
	msg := err.Error()
	lower := strings.ToLower(msg)
	switch {
	case errors.Is(err, plugin.ErrChecksumsDoNotMatch):
		got, _ := fileSHA256(path)
		return fmt.Errorf("start plugin %q: %w: %s has sha256 %s, the lock file expects %s", name, ErrChecksum, path, got, sum)
	case strings.Contains(msg, "Failed to read any lines from plugin's stdout"), strings.Contains(msg, "plugin exited before we could connect"):
		err = errors.New("the plugin exited before the handshake")
	case strings.Contains(msg, "Unrecognized remote plugin message"):
		first, _, _ := strings.Cut(strings.TrimPrefix(msg, "Unrecognized remote plugin message: "), "\n")
		return fmt.Errorf("start plugin %q: it wrote %q to stdout before the handshake; a plugin must write nothing to stdout (log to stderr)", name, first)
	case strings.Contains(lower, "incompatible api version"):
		first, _, _ := strings.Cut(msg, "\n")
		return fmt.Errorf("start plugin %q: %w (host supports %v): %s", name, ErrUnsupportedProtocol, protocol.Supported(), first)
	}
	if out := stderr.String(); out != "" {
		return fmt.Errorf("start plugin %q: %w; its stderr ends with:\n%s", name, err, out)
	}
	return fmt.Errorf("start plugin %q: %w", name, err)
}

func (p *process) kill() { p.client.Kill() }

// forceKill kills a plugin that failed (hung, crashed, unhealthy) with
// SIGKILL before go-plugin's kill, which first asks the plugin to exit and
// waits for its answer: a stopped or frozen process never answers, and the
// host would wait forever.
func (p *process) forceKill() {
	p.signalKill()
	p.client.Kill()
}

// signalKill sends SIGKILL to the process and returns at once.
func (p *process) signalKill() {
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Kill()
	}
}

func (p *process) exited() bool { return p.client.Exited() }

// ping asks the plugin's gRPC health service whether it serves, within
// ctx: go-plugin's own Ping has no deadline, and a stopped process would
// never answer it.
func (p *process) ping(ctx context.Context) error {
	rpc, err := p.client.Client()
	if err != nil {
		return err
	}
	gc, ok := rpc.(*plugin.GRPCClient)
	if !ok {
		return fmt.Errorf("plugin speaks %T, not gRPC", rpc)
	}
	resp, err := grpc_health_v1.NewHealthClient(gc.Conn).Check(ctx, &grpc_health_v1.HealthCheckRequest{Service: plugin.GRPCServiceName})
	if err != nil {
		return err
	}
	if st := resp.GetStatus(); st != grpc_health_v1.HealthCheckResponse_SERVING {
		return fmt.Errorf("plugin reports %s", st)
	}
	return nil
}

// backends returns the described backends, sorted.
func (p *process) backends() []string {
	b := slices.Clone(p.desc.GetBackends())
	slices.Sort(b)
	return b
}

// sortedSet returns ss sorted, without duplicates, in a new slice.
func sortedSet(ss []string) []string {
	out := slices.Clone(ss)
	slices.Sort(out)
	return slices.Compact(out)
}
