package testenv

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// process is a server running as a child of the test binary, in its own
// process group, with stdout and stderr appended to a log file.
type process struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{} // closed when the process has exited
	waitErr error         // valid once done is closed
}

var (
	liveMu sync.Mutex
	live   = map[*process]struct{}{}
)

// startProcess starts the binary at path with args, appending its output to
// logPath. The process is killed together with the test binary (see
// sysProcAttr) and by killAll.
func startProcess(name, logPath, path string, args ...string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	fmt.Fprintf(logFile, "=== %s %s %s\n", time.Now().Format(time.RFC3339Nano), path, strings.Join(args, " "))
	cmd := exec.Command(path, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	liveMu.Lock()
	live[p] = struct{}{}
	liveMu.Unlock()
	go func() {
		p.waitErr = cmd.Wait()
		logFile.Close()
		liveMu.Lock()
		delete(live, p)
		liveMu.Unlock()
		close(p.done)
	}()
	return p, nil
}

// kill sends SIGKILL to the process group and waits for the process to exit.
// It is safe to call more than once.
func (p *process) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	killGroup(p.cmd.Process.Pid)
	<-p.done
}

// exitErr returns a non-nil error if the process has exited.
func (p *process) exitErr() error {
	select {
	case <-p.done:
		if p.waitErr == nil {
			return fmt.Errorf("%s exited", p.name)
		}
		return fmt.Errorf("%s exited: %w", p.name, p.waitErr)
	default:
		return nil
	}
}

// waitReady polls ready until it succeeds, the process exits, or timeout
// passes.
func (p *process) waitReady(timeout time.Duration, ready func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := ready()
		if err == nil {
			return nil
		}
		if exit := p.exitErr(); exit != nil {
			return exit
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %v: %w", p.name, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// killAll kills every process started by this package that is still
// running.
func killAll() {
	liveMu.Lock()
	ps := make([]*process, 0, len(live))
	for p := range live {
		ps = append(ps, p)
	}
	liveMu.Unlock()
	for _, p := range ps {
		p.kill()
	}
}

// maxLogDump bounds how much of each log is written to a failing test's log.
const maxLogDump = 64 << 10

// logTail returns at most the last max bytes of the file at path.
func logTail(path string, max int64) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return "", err
	}
	prefix := ""
	if info.Size() > max {
		if _, err := f.Seek(-max, io.SeekEnd); err != nil {
			return "", err
		}
		prefix = fmt.Sprintf("[... first %d bytes omitted ...]\n", info.Size()-max)
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return "", err
	}
	return prefix + string(b), nil
}

// dumpLogOnFailure writes the end of the log at path to the test log when
// the test has failed by the time its cleanups run.
func dumpLogOnFailure(t testing.TB, name, path string) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		tail, err := logTail(path, maxLogDump)
		if errors.Is(err, os.ErrNotExist) {
			return
		}
		if err != nil {
			t.Logf("testenv: read %s log: %v", name, err)
			return
		}
		t.Logf("testenv: %s log (%s):\n%s", name, path, tail)
	})
}
