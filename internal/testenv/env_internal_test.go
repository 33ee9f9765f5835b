package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestNamespaceName(t *testing.T) {
	tests := map[string]struct {
		testName, want string
	}{
		"simple":    {"TestFoo", "testfoo-abc123"},
		"subtest":   {"TestFoo/bar_baz#01", "testfoo-bar-baz-01-abc123"},
		"all punct": {"///", "test-abc123"},
		"long": {
			strings.Repeat("a", 100),
			strings.Repeat("a", 56) + "-abc123",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := namespaceName(tc.testName, "abc123"); got != tc.want {
				t.Errorf("namespaceName(%q) = %q, want %q", tc.testName, got, tc.want)
			}
		})
	}
}

func TestRepoRoot(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatalf("RepoRoot: %v", err)
	}
	if mod, err := readModulePath(filepath.Join(root, "go.mod")); err != nil || mod != modulePath {
		t.Errorf("module at RepoRoot() %s = %q, %v, want %q", root, mod, err, modulePath)
	}
}

// recorder is a testing.TB that records how a test ended instead of ending
// the real one.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Skipf(format string, args ...any) {
	r.skipped = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (r *recorder) Fatal(args ...any) {
	r.failed = fmt.Sprint(args...)
	runtime.Goexit()
}

// run calls f with r in a goroutine and waits for it to return or end the
// test.
func (r *recorder) run(f func(testing.TB)) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
}

func TestMissingBinary(t *testing.T) {
	tests := map[string]struct {
		env      map[string]string
		wantFail bool
	}{
		"local skips":    {env: map[string]string{"CI": "", "MESHRELAY_REQUIRE_TESTENV": ""}},
		"CI fails":       {env: map[string]string{"CI": "true", "MESHRELAY_REQUIRE_TESTENV": ""}, wantFail: true},
		"required fails": {env: map[string]string{"CI": "", "MESHRELAY_REQUIRE_TESTENV": "1"}, wantFail: true},
		"CI=false skips": {env: map[string]string{"CI": "false", "MESHRELAY_REQUIRE_TESTENV": ""}},
	}
	missing := filepath.Join(t.TempDir(), "no-such-binary")
	starts := map[string]struct {
		env   string
		start func(testing.TB)
		hint  string
	}{
		"redis": {"MESHRELAY_REDIS_SERVER", func(tb testing.TB) { StartRedis(tb) }, "redis-server"},
		"etcd":  {"MESHRELAY_ETCD", func(tb testing.TB) { StartKube(tb) }, "etcd-server"},
		"kube":  {"MESHRELAY_KUBE_APISERVER", func(tb testing.TB) { StartKube(tb) }, "tools/kube"},
	}
	for sname, s := range starts {
		for name, tc := range tests {
			t.Run(sname+"/"+name, func(t *testing.T) {
				for k, v := range tc.env {
					t.Setenv(k, v)
				}
				t.Setenv(s.env, missing)
				if sname == "kube" {
					// Let etcd be found so that the missing kube-apiserver is reported.
					if _, err := os.Stat("/usr/bin/etcd"); err != nil {
						if Required() {
							t.Fatal("etcd not installed: run make testdeps")
						}
						t.Skip("etcd not installed")
					}
					t.Setenv("MESHRELAY_ETCD", "/usr/bin/etcd")
				}
				r := &recorder{TB: t}
				r.run(s.start)
				got := r.skipped
				if tc.wantFail {
					got = r.failed
				}
				if got == "" {
					t.Fatalf("skipped = %q, failed = %q; want wantFail=%v", r.skipped, r.failed, tc.wantFail)
				}
				for _, want := range []string{"make testdeps", s.hint} {
					if !strings.Contains(got, want) {
						t.Errorf("message %q does not mention %q", got, want)
					}
				}
			})
		}
	}
}
