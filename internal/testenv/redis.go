package testenv

import (
	"bufio"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const redisHint = installHint + ", which installs the Debian package redis-server"

// redisReadyTimeout bounds how long a starting redis-server may take to
// answer PING, including loading its append-only file.
const redisReadyTimeout = 20 * time.Second

// RedisOption configures StartRedis.
type RedisOption func(*redisOptions)

type redisOptions struct {
	persist bool
	args    []string
}

// RedisPersistence makes the server keep its data in an append-only file
// synced on every write, so that what was written before Stop is there again
// after Start.
func RedisPersistence() RedisOption {
	return func(o *redisOptions) { o.persist = true }
}

// RedisArgs passes extra command-line arguments to redis-server, such as
// "--maxmemory", "1mb".
func RedisArgs(args ...string) RedisOption {
	return func(o *redisOptions) { o.args = append(o.args, args...) }
}

// Redis is a redis-server started by StartRedis. Its methods are safe for
// concurrent use.
type Redis struct {
	name    string // for logs and errors: "redis-server", "redis-sentinel"
	binary  string
	dir     string
	logPath string
	config  string // a config file passed before the arguments, or ""
	port    int
	busPort int // the Redis Cluster bus port, 0 outside a cluster
	args    []string

	mu   sync.Mutex
	proc *process // nil while stopped
}

// RedisServer returns the redis-server binary StartRedis runs, for tests
// that run it themselves (the chaos soak kills and restarts its own). If
// it is not installed the test is skipped, or fails when Required.
func RedisServer(t testing.TB) string {
	t.Helper()
	binary, err := lookPath("MESHRELAY_REDIS_SERVER", "redis-server", redisHint)
	if err != nil {
		skipOrFatal(t, err)
	}
	return binary
}

// StartRedis starts a redis-server on a free 127.0.0.1 port with its own
// temporary directory, and stops it when the test ends. Without
// RedisPersistence it keeps nothing on disk.
//
// If redis-server is not installed the test is skipped, or fails when
// Required.
func StartRedis(t testing.TB, opts ...RedisOption) *Redis {
	t.Helper()
	var o redisOptions
	for _, opt := range opts {
		opt(&o)
	}
	r := newRedis(t, "redis-server", "redis.log")
	r.args = append(r.args, "--save", "", "--protected-mode", "yes")
	if o.persist {
		r.args = append(r.args, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		r.args = append(r.args, "--appendonly", "no")
	}
	r.args = append(r.args, o.args...)
	r.launch(t)
	return r
}

// newRedis prepares a stopped server with its own temporary directory,
// logging to logName there, and the arguments every server takes. The log
// is written to the test log if the test fails, and the server is stopped
// when the test ends.
func newRedis(t testing.TB, name, logName string) *Redis {
	t.Helper()
	binary := RedisServer(t)
	dir := t.TempDir()
	r := &Redis{name: name, binary: binary, dir: dir, logPath: filepath.Join(dir, logName)}
	r.args = []string{
		"--bind", "127.0.0.1",
		"--dir", dir,
		"--daemonize", "no",
		"--loglevel", "notice",
	}
	dumpLogOnFailure(t, name, r.logPath)
	t.Cleanup(r.Stop)
	return r
}

// launch starts r on free ports, retrying on others if a port was taken in
// the meantime.
func (r *Redis) launch(t testing.TB) {
	t.Helper()
	for attempt := 0; ; attempt++ {
		var err error
		if r.port, err = freePort(); err != nil {
			t.Fatalf("start %s: %v", r.name, err)
		}
		if r.busPort != 0 {
			if r.busPort, err = freePort(); err != nil {
				t.Fatalf("start %s: %v", r.name, err)
			}
		}
		err = r.start()
		if err == nil {
			return
		}
		if attempt == 2 {
			t.Fatalf("start %s: %v", r.name, err)
		}
		t.Logf("testenv: start %s on port %d: %v; retrying on another port", r.name, r.port, err)
	}
}

// Addr returns the server's host:port.
func (r *Redis) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(r.port))
}

// URL returns a redis:// URL for database 0, as accepted by
// redis.ParseURL.
func (r *Redis) URL() string {
	return "redis://" + r.Addr() + "/0"
}

// Dir returns the server's working directory, where it keeps its data.
func (r *Redis) Dir() string {
	return r.dir
}

// Stop kills the server with SIGKILL, as a crash would, and waits for it to
// exit. Clients see connection errors until Start. Stop on a stopped server
// does nothing.
func (r *Redis) Stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc != nil {
		r.proc.kill()
		r.proc = nil
	}
}

// Start restarts a stopped server on the same port and data directory and
// waits until it answers PING. Start on a running server does nothing.
func (r *Redis) Start() error {
	if err := r.start(); err != nil {
		return fmt.Errorf("start %s: %w", r.name, err)
	}
	return nil
}

func (r *Redis) start() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc != nil {
		if r.proc.exitErr() == nil {
			return nil
		}
		r.proc = nil
	}
	var args []string
	if r.config != "" {
		args = append(args, r.config)
	}
	args = append(args, "--port", strconv.Itoa(r.port))
	if r.busPort != 0 {
		args = append(args, "--cluster-port", strconv.Itoa(r.busPort))
	}
	args = append(args, r.args...)
	p, err := startProcess(r.name, r.logPath, r.binary, args...)
	if err != nil {
		return err
	}
	if err := p.waitReady(redisReadyTimeout, func() error { return redisPing(r.Addr()) }); err != nil {
		p.kill()
		return err
	}
	r.proc = p
	return nil
}

// Running reports whether the server process is running.
func (r *Redis) Running() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.proc != nil && r.proc.exitErr() == nil
}

// redisPing sends PING to the server at addr and expects PONG; a server still
// loading its data answers with an error instead.
func redisPing(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(time.Second)); err != nil {
		return err
	}
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if line = strings.TrimSpace(line); line != "+PONG" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}
