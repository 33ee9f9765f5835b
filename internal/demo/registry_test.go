package demo

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshrelay/meshrelay/core/pluginhost"
)

// The demo's --plugins oci:// publishes a plugin to the registry it starts
// and installs it from there, signature verified: the lock names the
// registry, the index digest and the binary's sha256, and the host runs it.
func TestInstallThroughRegistry(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"istio"}
	bins, ok := pluginhost.FindBinaries(names, filepath.Join(root, "bin"))
	if !ok {
		if bins, err = pluginhost.BuildBinaries(context.Background(), root, t.TempDir(), names); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	var said strings.Builder
	say := func(format string, args ...any) { said.WriteString(strings.TrimSpace(format) + "\n") }
	if err := installThroughRegistry(context.Background(), names, bins, dir, slog.New(slog.DiscardHandler), say); err != nil {
		t.Fatalf("installThroughRegistry = %v", err)
	}
	entries, err := pluginhost.List(dir)
	if err != nil || len(entries) != 1 {
		t.Fatalf("List = %+v, %v", entries, err)
	}
	e := entries[0]
	if !strings.HasPrefix(e.Source, "oci://127.0.0.1:") || !strings.HasPrefix(e.Digest, "sha256:") || e.Platforms[pluginhost.HostPlatform()] != e.SHA256 {
		t.Errorf("lock entry = %+v, want one from the loopback registry with its index digest and sha256", e)
	}
	if err := pluginhost.Verify(dir); err != nil {
		t.Errorf("Verify = %v", err)
	}
	h, err := pluginhost.New(dir, slog.New(slog.DiscardHandler), pluginhost.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.Start(context.Background()); err != nil {
		t.Fatalf("Start = %v", err)
	}
}
