package pluginhost

import (
	"context"
	"log/slog"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestInitInstallStart follows the plugin author's loop: scaffold a
// project against this checkout (offline: the only proxy is the local
// module cache), whose go.mod and go.sum suffice (no -mod=mod) and
// whose test passes as generated; install the directory, which builds it;
// and start the installed plugin through go-plugin and translate with it.
// Then publish it as an author does — make release, push, signed, to a
// real registry — and install it from there, as a user does, and run it.
// make release builds only this platform here (PLATFORMS=GOOS/GOARCH):
// cross-building the default three costs minutes of CPU and proves
// nothing more; TestOCIPushInstallLock covers several platforms.
func TestInitInstallStart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	modcache, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("GOPROXY", "file://"+filepath.Join(strings.TrimSpace(string(modcache)), "cache", "download"))
	t.Setenv("GOSUMDB", "off")
	t.Setenv("GOWORK", "off")
	t.Setenv("GOFLAGS", "")
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "meshrelay-plugin-acme")
	if err := Scaffold(ctx, dir, "acme", "example.com/meshrelay-plugin-acme", root); err != nil {
		t.Fatalf("Scaffold = %v", err)
	}
	if err := Scaffold(ctx, dir, "acme", "example.com/x", root); err == nil {
		t.Error("Scaffold overwrote an existing project")
	}
	if err := Scaffold(ctx, t.TempDir(), "Bad_Name", "example.com/x", ""); err == nil {
		t.Error("Scaffold accepted an invalid name")
	}
	for _, args := range [][]string{{"vet", "./..."}, {"test", "./..."}} {
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s in the scaffolded project: %v\n%s", strings.Join(args, " "), err, out)
		}
	}

	pluginDir := t.TempDir()
	e, err := InstallContext(ctx, pluginDir, dir, "", slog.New(slog.DiscardHandler))
	if err != nil || e.Name != "acme" || !slices.Equal(e.OutputKinds, []string{"/ConfigMap"}) || len(e.InputKinds) != 0 {
		t.Fatalf("InstallContext(project directory) = %+v, %v", e, err)
	}
	h := newHost(t, pluginDir, testOptions(), nil)
	if err := h.Start(ctx); err != nil {
		t.Fatalf("Start = %v", err)
	}
	p := mustPlugin(t, h, "acme")
	if _, err := p.Translate(ctx, view("east")); err != nil {
		t.Fatalf("Translate with the installed plugin = %v", err)
	}
	if p.Pid() == 0 {
		t.Error("the installed plugin runs in no process")
	}

	release := exec.Command("make", "release", "PLATFORMS="+HostPlatform())
	release.Dir = dir
	if out, err := release.CombinedOutput(); err != nil {
		t.Fatalf("make release: %v\n%s", err, out)
	}
	bins, err := ReleaseBinaries([]string{filepath.Join(dir, "dist")})
	if err != nil || len(bins) != 1 {
		t.Fatalf("ReleaseBinaries(dist) = %v, %v", bins, err)
	}
	reg, _ := startRegistry(t)
	key := newTestKey(t)
	ref := "oci://" + reg + "/acme/meshrelay-plugin-acme:0.1.0"
	if _, err := Push(ctx, ref, bins, PushOptions{Registry: loopback, SignKey: key.private}); err != nil {
		t.Fatalf("Push(dist) = %v", err)
	}
	fromRegistry := t.TempDir()
	e, err = InstallOCI(ctx, fromRegistry, ref, OCIOptions{Registry: loopback, VerifyKeys: []PublicKey{key.public}})
	if err != nil || e.Name != "acme" || e.Source != ref {
		t.Fatalf("InstallOCI(%s) = %+v, %v", ref, e, err)
	}
	h = newHost(t, fromRegistry, testOptions(), nil)
	if err := h.Start(ctx); err != nil {
		t.Fatalf("Start with the plugin from the registry = %v", err)
	}
	if _, err := mustPlugin(t, h, "acme").Translate(ctx, view("east")); err != nil {
		t.Fatalf("Translate with the plugin from the registry = %v", err)
	}
}
