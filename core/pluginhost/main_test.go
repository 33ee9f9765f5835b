package pluginhost

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// Test plugins are built once per test binary, from testdata/faulty.
var testPlugins struct {
	once sync.Once
	dir  string
	err  error
}

// pluginBinary returns the path of the faulty test plugin built with the
// given mode and name.
func pluginBinary(t testing.TB, mode, name string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds test plugins")
	}
	testPlugins.once.Do(func() {
		testPlugins.dir, testPlugins.err = os.MkdirTemp("", "pluginhost-test-")
	})
	if testPlugins.err != nil {
		t.Fatal(testPlugins.err)
	}
	bin := filepath.Join(testPlugins.dir, mode+"-"+name)
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	cmd := exec.Command("go", "build", "-o", bin, "-ldflags", fmt.Sprintf("-X main.mode=%s -X main.name=%s", mode, name), "./testdata/faulty")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build test plugin %s: %v\n%s", mode, err, out)
	}
	return bin
}

func TestMain(m *testing.M) {
	if bin := os.Getenv("PLUGINHOST_TEST_ORPHAN"); bin != "" {
		os.Exit(orphan(bin))
	}
	code := m.Run()
	if testPlugins.dir != "" {
		os.RemoveAll(testPlugins.dir)
	}
	os.Exit(code)
}

// orphan starts a plugin, prints its pid and exits without killing it:
// the plugin must notice and exit by itself.
func orphan(bin string) int {
	sum, err := fileSHA256(bin)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	p, err := launch(context.Background(), "orphan", bin, sum, DefaultOptions(), slog.New(slog.DiscardHandler))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(p.client.ReattachConfig().Pid)
	return 0
}
