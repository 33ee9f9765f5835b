package main

import (
	"encoding/json"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/meshrelay/meshrelay/core/pluginhost"
)

// The publish-and-install loop through the CLI, against a real registry:
// keygen, push two platforms signed, install refused without a trusted
// key and accepted with one, install --from-lock into a clean directory,
// pull --to a layout and install from it.
func TestPluginPushInstallFromLock(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	reg := strings.TrimPrefix(srv.URL, "http://")
	work := t.TempDir()
	key := filepath.Join(work, "acme")
	if out, err := run(t, "plugin", "keygen", "--out", key); err != nil {
		t.Fatalf("plugin keygen: %v\n%s", err, out)
	}
	dist := filepath.Join(work, "dist")
	if err := os.MkdirAll(dist, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(istioPluginDir(t), "meshrelay-plugin-istio")
	if err := os.Symlink(bin, filepath.Join(dist, "meshrelay-plugin-istio-"+runtime.GOOS+"-"+runtime.GOARCH)); err != nil {
		t.Fatal(err)
	}
	other := "linux-arm64"
	if runtime.GOOS+"-"+runtime.GOARCH == other {
		other = "linux-amd64"
	}
	if err := os.WriteFile(filepath.Join(dist, "meshrelay-plugin-istio-"+other), []byte("stand-in"), 0o755); err != nil {
		t.Fatal(err)
	}
	repo := "oci://" + reg + "/plugins/meshrelay-plugin-istio"
	out, err := run(t, "plugin", "push", dist, repo, "--sign-key", key+".key", "--plain-http", "--log-level", "error")
	if err != nil || !strings.Contains(out, "signed") {
		t.Fatalf("plugin push: %v\n%s", err, out)
	}
	ref := repo + ":" + pluginVersion(t, bin)

	dir := filepath.Join(work, "plugins")
	if out, err := run(t, "plugin", "install", ref, "--plugin-dir", dir, "--plain-http"); err == nil || !strings.Contains(err.Error(), "no key is trusted") {
		t.Fatalf("plugin install without a trusted key = %v\n%s", err, out)
	}
	if out, err := run(t, "plugin", "install", ref, "--plugin-dir", dir, "--plain-http", "--verify-key", key+".pub", "--log-level", "error"); err != nil {
		t.Fatalf("plugin install: %v\n%s", err, out)
	}
	clean := filepath.Join(work, "clean")
	if out, err := run(t, "plugin", "install", "--from-lock", "--lock", filepath.Join(dir, pluginhost.LockFile),
		"--plugin-dir", clean, "--plain-http", "--verify-key", key+".pub"); err != nil {
		t.Fatalf("plugin install --from-lock: %v\n%s", err, out)
	}
	if out, err := run(t, "plugin", "verify", "--plugin-dir", clean); err != nil {
		t.Fatalf("plugin verify after --from-lock: %v\n%s", err, out)
	}
	layout := filepath.Join(work, "layout")
	if out, err := run(t, "plugin", "pull", ref, "--to", layout, "--plain-http", "--verify-key", key+".pub"); err != nil {
		t.Fatalf("plugin pull: %v\n%s", err, out)
	}
	if out, err := run(t, "plugin", "install", "oci-layout://"+layout+":"+pluginVersion(t, bin), "--plugin-dir", filepath.Join(work, "airgapped"),
		"--verify-key", key+".pub", "--log-level", "error"); err != nil {
		t.Fatalf("plugin install oci-layout://: %v\n%s", err, out)
	}
}

// pluginVersion is the version the installed plugin at bin declared.
func pluginVersion(t *testing.T, bin string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(filepath.Dir(bin), pluginhost.LockFile))
	if err != nil {
		t.Fatal(err)
	}
	var lock struct{ Plugins []pluginhost.Entry }
	if err := json.Unmarshal(data, &lock); err != nil || len(lock.Plugins) == 0 {
		t.Fatalf("lock file: %v", err)
	}
	return lock.Plugins[0].Version
}
