package testenv

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// inMain is set while Main runs a package's tests.
var inMain atomic.Bool

// shared holds the servers started by SharedKube for the whole package.
var shared struct {
	once sync.Once
	dir  string
	kube *Kube
	err  error
}

// Main runs a package's tests and then stops the servers they shared and
// removes their files. If a test failed, the end of each shared server's log
// is written to stderr. Call it from TestMain; it does not return:
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
//
// Main also stops the servers when the test binary is interrupted. Servers
// started by StartRedis and StartKube belong to their test and are stopped
// when it ends, with or without Main.
func Main(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	inMain.Store(true)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		s, ok := <-sig
		if !ok {
			return
		}
		fmt.Fprintf(os.Stderr, "testenv: %v: stopping test servers\n", s)
		stopShared(false)
		os.Exit(1)
	}()
	defer signal.Stop(sig)

	code := 1
	defer func() { stopShared(code != 0) }()
	code = m.Run()
	return code
}

// stopShared stops the shared servers and every other server still running,
// first writing their logs to stderr if dumpLogs is set.
func stopShared(dumpLogs bool) {
	if k := shared.kube; k != nil {
		if dumpLogs {
			for _, name := range []string{"etcd", "kube-apiserver"} {
				path := filepath.Join(k.dir, name+".log")
				if tail, err := logTail(path, maxLogDump); err == nil {
					fmt.Fprintf(os.Stderr, "testenv: shared %s log (%s):\n%s\n", name, path, tail)
				}
			}
		}
		k.Stop()
	}
	killAll()
	if shared.dir != "" {
		os.RemoveAll(shared.dir)
	}
}

// SharedKube returns the API server shared by every test of the package,
// starting it on first use exactly like StartKube with no options. Tests
// must not Stop it, and should keep their objects apart, for instance in a
// Namespace from CreateNamespace. More CRDs can be installed with
// InstallCRDs; they are then visible to every later test.
//
// SharedKube requires the package's TestMain to call Main, which stops the
// server after the last test. If the server cannot start, every test that
// asks for it is skipped or fails, as with StartKube.
func SharedKube(t testing.TB) *Kube {
	t.Helper()
	if !inMain.Load() {
		t.Fatal("testenv: SharedKube needs the package's TestMain to call testenv.Main(m)")
	}
	shared.once.Do(func() {
		start := time.Now()
		shared.kube, shared.err = startShared()
		if shared.err == nil {
			t.Logf("testenv: shared kube-apiserver %s ready in %v", shared.kube.config.Host, time.Since(start).Round(time.Millisecond))
		}
	})
	if shared.err != nil {
		skipOrFatal(t, shared.err)
	}
	return shared.kube
}

func startShared() (*Kube, error) {
	dir, err := os.MkdirTemp("", "meshrelay-testenv-")
	if err != nil {
		return nil, fmt.Errorf("start shared kube: %w", err)
	}
	shared.dir = dir
	o := newKubeOptions(nil)
	k, err := startKube(dir, o)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), crdEstablishTimeout+30*time.Second)
	defer cancel()
	if err := k.installCRDs(ctx, o.crds...); err != nil {
		k.Stop()
		return nil, err
	}
	return k, nil
}
