package testenv

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// modulePath is the module whose go.mod marks the repository root.
const modulePath = "github.com/meshrelay/meshrelay"

// installHint tells a developer how to get every server binary.
const installHint = "run `make testdeps` (bash hack/testdeps.sh)"

var (
	rootOnce sync.Once
	rootDir  string
	rootErr  error
)

// RepoRoot returns the root of the meshrelay repository: the nearest directory
// at or above the working directory whose go.mod declares the module
// github.com/meshrelay/meshrelay. Tests run in their package's directory, so
// this finds the root from any package.
func RepoRoot() (string, error) {
	rootOnce.Do(func() {
		rootDir, rootErr = findRepoRoot()
	})
	return rootDir, rootErr
}

func findRepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find repository root: %w", err)
	}
	for {
		if mod, err := readModulePath(filepath.Join(dir, "go.mod")); err == nil && mod == modulePath {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("find repository root: no go.mod for module %s above the working directory", modulePath)
		}
		dir = parent
	}
}

// readModulePath returns the module path declared in the go.mod file at path.
func readModulePath(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if rest, ok := strings.CutPrefix(line, "module"); ok && rest != "" && (rest[0] == ' ' || rest[0] == '\t') {
			return strings.Trim(strings.TrimSpace(rest), `"`), nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("%s: no module directive", path)
}

// repoPath resolves p against the repository root unless it is absolute.
func repoPath(p string) (string, error) {
	if filepath.IsAbs(p) {
		return p, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, p), nil
}

// MissingError reports that a server binary needed by a test is not
// installed. Hint says how to install it.
type MissingError struct {
	Binary string
	Hint   string
}

func (e *MissingError) Error() string {
	return fmt.Sprintf("%s not found: %s", e.Binary, e.Hint)
}

// Required reports whether a missing server binary fails a test rather than
// skipping it: when CI is true or MESHRELAY_REQUIRE_TESTENV is set to a true
// value.
func Required() bool {
	for _, name := range []string{"MESHRELAY_REQUIRE_TESTENV", "CI"} {
		if v, err := strconv.ParseBool(os.Getenv(name)); err == nil && v {
			return true
		}
	}
	return false
}

// skipOrFatal ends the test because of err: a MissingError skips it unless
// Required; any other error fails it.
func skipOrFatal(t testing.TB, err error) {
	t.Helper()
	var missing *MissingError
	if errors.As(err, &missing) && !Required() {
		t.Skipf("testenv: %v (set CI=true or MESHRELAY_REQUIRE_TESTENV=1 to fail instead)", err)
	}
	t.Fatalf("testenv: %v", err)
}

// lookPath finds a server binary: the path in the environment variable env if
// set, else name in PATH.
func lookPath(env, name, hint string) (string, error) {
	if p := os.Getenv(env); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", &MissingError{Binary: p + " (from " + env + ")", Hint: hint}
		}
		return p, nil
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", &MissingError{Binary: name, Hint: hint}
	}
	return p, nil
}

// kubeAPIServerPath finds kube-apiserver: MESHRELAY_KUBE_APISERVER if set,
// else bin/kube-apiserver in the repository.
func kubeAPIServerPath() (string, error) {
	const hint = installHint + ", which builds it from tools/kube: " +
		"cd tools/kube && go build -o ../../bin/kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver"
	if p := os.Getenv("MESHRELAY_KUBE_APISERVER"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", &MissingError{Binary: p + " (from MESHRELAY_KUBE_APISERVER)", Hint: hint}
		}
		return p, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	p := filepath.Join(root, "bin", "kube-apiserver")
	if _, err := os.Stat(p); err != nil {
		return "", &MissingError{Binary: p, Hint: hint}
	}
	return p, nil
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago. A
// server started on it may still lose a race with another process, which
// callers handle by retrying with a new port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
