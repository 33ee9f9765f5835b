package pluginhost

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestLockFileRefusesPathsOutsideTheDirectory(t *testing.T) {
	tests := map[string]bool{
		"meshrelay-plugin-istio": true,
		"sub/plugin":             true,
		"/usr/bin/evil":          false,
		"../evil":                false,
		"sub/../../evil":         false,
		"":                       false,
	}
	for path, ok := range tests {
		t.Run(path, func(t *testing.T) {
			dir := t.TempDir()
			lock := `{"plugins":[{"name":"p","path":"` + path + `","sha256":"00"}]}`
			if err := os.WriteFile(filepath.Join(dir, LockFile), []byte(lock), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := List(dir)
			if (err == nil) != ok {
				t.Fatalf("List with binary path %q = %v, want accepted %v", path, err, ok)
			}
		})
	}
}

func TestPluginEnvironmentIsMinimal(t *testing.T) {
	t.Setenv("MESHRELAY_TEST_SECRET", "s3cret")
	t.Setenv("REDIS_PASSWORD", "s3cret")
	t.Setenv("GOGC", "50")
	env := pluginEnv("istio")
	for _, kv := range env {
		if strings.Contains(kv, "s3cret") {
			t.Fatalf("plugin environment carries the server's secret: %q", kv)
		}
	}
	if !slices.Contains(env, "MESHRELAY_PLUGIN_NAME=istio") {
		t.Errorf("plugin environment %v lacks its name", env)
	}
	if p, ok := os.LookupEnv("PATH"); ok && !slices.Contains(env, "PATH="+p) {
		t.Errorf("plugin environment %v lacks PATH", env)
	}
	// An operator tunes the plugins' garbage collector as the server's.
	if !slices.Contains(env, "GOGC=50") {
		t.Errorf("plugin environment %v lacks the server's GOGC", env)
	}
}
