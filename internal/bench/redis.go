package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// redisProcess is the redis-server the chaos soak runs, kills and starts
// again: it keeps nothing on disk, so it comes back empty and the
// replicas refill it from memory.
type redisProcess struct {
	binary  string
	port    int
	dir     string
	logPath string
	// args are extra arguments; config, when set, is a configuration
	// file given first (a Sentinel's, which it rewrites).
	args   []string
	config string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	up     bool // answered PING since the last kill
}

// startRedisProcess starts binary (redis-server) on a free loopback port
// with its working directory under work, and waits until it answers.
func startRedisProcess(ctx context.Context, binary, work string) (*redisProcess, error) {
	r, err := newRedisProcess(binary, work, "redis")
	if err != nil {
		return nil, err
	}
	return r, r.start(ctx)
}

// newRedisProcess prepares a redis-server on a free loopback port, in
// work/name with its log in work/name.log.
func newRedisProcess(binary, work, name string) (*redisProcess, error) {
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	_, portText, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(portText)
	r := &redisProcess{binary: binary, port: port, dir: filepath.Join(work, name), logPath: filepath.Join(work, name+".log")}
	if err := os.MkdirAll(r.dir, 0o700); err != nil {
		return nil, fmt.Errorf("start redis: %w", err)
	}
	return r, nil
}

// Addr returns host:port.
func (r *redisProcess) Addr() string { return "127.0.0.1:" + strconv.Itoa(r.port) }

// URL returns the redis:// URL of database 0.
func (r *redisProcess) URL() string { return "redis://" + r.Addr() + "/0" }

// start runs the server (again) on its port and waits until it answers
// PING.
func (r *redisProcess) start(ctx context.Context) error {
	log, err := os.OpenFile(r.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("start redis: %w", err)
	}
	defer log.Close()
	var args []string
	if r.config != "" {
		args = append(args, r.config)
	}
	args = append(args, "--port", strconv.Itoa(r.port), "--bind", "127.0.0.1", "--dir", r.dir,
		"--daemonize", "no", "--protected-mode", "yes")
	if r.config == "" {
		args = append(args, "--save", "", "--appendonly", "no")
	}
	cmd := exec.Command(r.binary, append(args, r.args...)...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis (%s): %w", r.binary, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	r.mu.Lock()
	r.cmd, r.exited = cmd, exited
	r.mu.Unlock()
	c := goredis.NewClient(&goredis.Options{Addr: r.Addr(), MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := c.Ping(pctx).Err()
		cancel()
		if err == nil {
			r.mu.Lock()
			r.up = true
			r.mu.Unlock()
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("redis exited at start; see %s", r.logPath)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis did not answer within 30s: %w", err)
		}
	}
}

// pid returns the server's process id.
func (r *redisProcess) pid() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cmd.Process.Pid
}

// kill ends the server with SIGKILL, as a crash would, and waits for it.
func (r *redisProcess) kill() {
	r.mu.Lock()
	cmd, exited := r.cmd, r.exited
	r.up = false
	r.mu.Unlock()
	_ = cmd.Process.Kill()
	<-exited
}

// isUp reports whether the server answered since it was last killed.
func (r *redisProcess) isUp() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.up
}

// stop ends the server for good.
func (r *redisProcess) stop() { r.kill() }
