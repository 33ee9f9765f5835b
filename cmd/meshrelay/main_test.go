package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshrelay/meshrelay/core/server"
	"github.com/meshrelay/meshrelay/core/store/memory"
	"github.com/spf13/cobra"
)

// Every command documents itself: a short line and, when it does
// something, examples.
func TestEveryCommandHasHelpAndExamples(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden || c.Name() == "help" || c.Name() == "completion" || strings.HasPrefix(c.CommandPath(), "meshrelay completion") {
			return
		}
		if c.Short == "" {
			t.Errorf("%q has no short help", c.CommandPath())
		}
		if c.Runnable() && c.Example == "" {
			t.Errorf("%q has no examples", c.CommandPath())
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCommand())
}

func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

// The CLI's --insecure sends the admin token in plain text: only to a
// loopback server.
func TestInsecureOnlyToLoopback(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "admin-token")
	if err := os.WriteFile(tokenFile, []byte("tok"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := run(t, "cluster", "list", "--insecure", "--server", "meshrelay.example.com:9900", "--admin-token-file", tokenFile)
	if err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Fatalf("cluster list --insecure to a remote server = %v, want refused", err)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"no-such-command"},
		{"server", "--no-such-flag"},
		{"cluster", "register"},
	} {
		_, err := run(t, args...)
		if err == nil || !isUsageError(err) {
			t.Errorf("meshrelay %v = %v, want a usage error (exit 2)", args, err)
		}
	}
	_, err := run(t, "status", "-o", "xml", "--admin-token-file", "/nonexistent")
	if err == nil {
		t.Error("status with an unreadable token succeeded")
	}
}

// The admin commands against a real server: register prints a token,
// list and status read the registry, deregister revokes.
func TestClusterCommands(t *testing.T) {
	dir := t.TempDir()
	opts := server.DefaultOptions()
	opts.ListenAddr, opts.AdminAddr, opts.DataDir = "127.0.0.1:0", "", dir
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := server.New(ctx, opts, server.Deps{Store: memory.New()})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	defer func() { cancel(); <-done }()
	admin := []string{"--server", srv.Addr(), "--server-name", "127.0.0.1", "--ca-file", srv.CABundlePath(), "--admin-token-file", filepath.Join(dir, "admin-token")}

	out, err := run(t, append([]string{"cluster", "register", "east"}, admin...)...)
	if err != nil || !strings.HasPrefix(strings.TrimSpace(out), "mrt_") {
		t.Fatalf("cluster register = %q, %v; want a token", out, err)
	}
	out, err = run(t, append([]string{"cluster", "list", "-o", "json"}, admin...)...)
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Clusters []struct {
			Name      string `json:"name"`
			Connected bool   `json:"connected"`
		} `json:"clusters"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list.Clusters) != 1 || list.Clusters[0].Name != "east" {
		t.Fatalf("cluster list -o json = %s (%v)", out, err)
	}
	out, err = run(t, append([]string{"cluster", "list"}, admin...)...)
	if err != nil || !strings.Contains(out, "east") || !strings.Contains(out, "disconnected") {
		t.Fatalf("cluster list = %q, %v", out, err)
	}
	if out, err = run(t, append([]string{"status"}, admin...)...); err != nil || !strings.Contains(out, "Server ") || !strings.Contains(out, "east") {
		t.Fatalf("status = %q, %v", out, err)
	}
	if _, err := run(t, append([]string{"cluster", "deregister", "east"}, admin...)...); err != nil {
		t.Fatal(err)
	}
	out, err = run(t, append([]string{"cluster", "list"}, admin...)...)
	if err != nil || !strings.Contains(out, "revoked") {
		t.Fatalf("cluster list after deregister = %q, %v", out, err)
	}
	if _, err := run(t, append([]string{"cluster", "deregister", "nowhere"}, admin...)...); err == nil {
		t.Error("deregistering an unknown cluster succeeded")
	}
	bad := append([]string{"cluster", "list"}, admin...)
	token := filepath.Join(t.TempDir(), "wrong")
	if err := os.WriteFile(token, []byte("mrt_wrong"), 0o600); err != nil {
		t.Fatal(err)
	}
	bad[len(bad)-1] = token
	if _, err := run(t, bad...); err == nil {
		t.Error("cluster list with a wrong admin token succeeded")
	}
}

// plugin verify exits 3 when a binary changed after install.
func TestPluginVerifyExitCode(t *testing.T) {
	dir := t.TempDir()
	lock := `{"plugins":[{"name":"x","version":"1","protocol":1,"backends":["x"],"sha256":"` + strings.Repeat("0", 64) + `","path":"meshrelay-plugin-x","installed":"` + time.Now().Format(time.RFC3339) + `"}]}`
	if err := os.WriteFile(filepath.Join(dir, "plugins.lock.json"), []byte(lock), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "meshrelay-plugin-x"), []byte("changed"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := run(t, "plugin", "verify", "--plugin-dir", dir)
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != 3 {
		t.Fatalf("plugin verify of a changed binary = %v, want exit code 3", err)
	}
}

// Cluster labels through the CLI against a real server: set at register,
// changed with cluster label (KEY=VALUE, KEY-), shown by get clusters
// (-L columns, -o wide, -l filter) and describe cluster; malformed
// arguments are usage errors, invalid labels the server's refusal.
func TestClusterLabelCommands(t *testing.T) {
	dir := t.TempDir()
	opts := server.DefaultOptions()
	opts.ListenAddr, opts.AdminAddr, opts.DataDir = "127.0.0.1:0", "", dir
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := server.New(ctx, opts, server.Deps{Store: memory.New()})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	defer func() { cancel(); <-done }()
	admin := []string{"--server", srv.Addr(), "--server-name", "127.0.0.1", "--ca-file", srv.CABundlePath(), "--admin-token-file", filepath.Join(dir, "admin-token")}
	cli := func(args ...string) (string, error) { return run(t, append(args, admin...)...) }

	for _, args := range [][]string{
		{"cluster", "register", "east", "--label", "region=eu-west", "--label", "env=prod"},
		{"cluster", "register", "west", "--label", "region=us-east"},
		{"cluster", "register", "central"},
	} {
		if out, err := cli(args...); err != nil {
			t.Fatalf("meshrelay %v: %v\n%s", args, err, out)
		}
	}
	out, err := cli("cluster", "label", "west", "tier=gold", "env=prod")
	if err != nil || !strings.Contains(out, "env=prod,region=us-east,tier=gold") {
		t.Fatalf("cluster label west = %q, %v; want its labels printed", out, err)
	}
	if out, err = cli("cluster", "label", "east", "env-"); err != nil || !strings.Contains(out, "region=eu-west") || strings.Contains(out, "env=") {
		t.Fatalf("cluster label east env- = %q, %v", out, err)
	}

	out, err = cli("get", "clusters", "-l", "region", "-L", "region,tier")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "REGION") || !strings.Contains(lines[0], "TIER") || strings.Contains(out, "central") {
		t.Fatalf("get clusters -l region -L region,tier =\n%s\nwant REGION and TIER columns, east and west only", out)
	}
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		region, tier := f[len(f)-2], f[len(f)-1]
		if got := f[0] + " " + region + " " + tier; got != "east eu-west -" && got != "west us-east gold" {
			t.Errorf("get clusters -L row %q: cluster, region, tier = %q", l, got)
		}
	}
	if out, err = cli("get", "clusters", "-l", "env=prod", "-o", "wide"); err != nil || !strings.Contains(out, "LABELS") || !strings.Contains(out, "env=prod,region=us-east,tier=gold") || strings.Contains(out, "east ") {
		t.Fatalf("get clusters -l env=prod -o wide =\n%s(%v)\nwant west only, with its labels", out, err)
	}
	if out, err = cli("describe", "cluster", "west"); err != nil || !strings.Contains(out, "Labels: env=prod,region=us-east,tier=gold") {
		t.Fatalf("describe cluster west =\n%s(%v)\nwant its labels", out, err)
	}

	for _, args := range [][]string{
		{"cluster", "label", "west"},
		{"cluster", "label", "west", "tier"},
		{"cluster", "label", "west", "=gold"},
		{"cluster", "register", "north", "--label", "tier-"},
	} {
		var ee *exitError
		if _, err := cli(args...); err == nil || !isUsageError(err) && !(errors.As(err, &ee) && ee.code == 2) {
			t.Errorf("meshrelay %v = %v, want a usage error (exit 2)", args, err)
		}
	}
	if _, err := cli("cluster", "label", "west", "bad key=x"); err == nil || !strings.Contains(err.Error(), `label key "bad key"`) {
		t.Errorf("cluster label with an invalid key = %v, want the server's refusal naming it", err)
	}
	if _, err := cli("cluster", "label", "nowhere", "a=b"); err == nil {
		t.Error("labelling an unknown cluster succeeded")
	}
	out, err = run(t, append(append([]string{"__complete", "cluster", "label"}, admin...), "")...)
	if err != nil || !strings.Contains(out, "east") || !strings.Contains(out, "central") {
		t.Errorf("completing cluster label's NAME = %q, %v; want the registered clusters", out, err)
	}
}
