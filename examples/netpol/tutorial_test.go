package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshrelay/meshrelay/core/agent"
	"github.com/meshrelay/meshrelay/core/agent/discovery"
	"github.com/meshrelay/meshrelay/core/agent/sink"
	"github.com/meshrelay/meshrelay/core/pluginhost"
	"github.com/meshrelay/meshrelay/core/server"
	"github.com/meshrelay/meshrelay/core/store"
	"github.com/meshrelay/meshrelay/core/store/memory"
)

const tutorialPolicy = `apiVersion: policy.meshrelay.io/v1alpha1
kind: AccessPolicy
metadata: {name: api-from-frontend, namespace: shop}
spec:
  destinationSelectors:
  - {namespaces: [shop], names: [api]}
  from:
  - namespaces: [shop]
  ports: [80]
`

// TestTutorial follows the README's steps after the golden test: build the
// plugin, install it (recording its sha256), load it into a real server,
// connect an agent, and see the NetworkPolicy arrive in the cluster.
func TestTutorial(t *testing.T) {
	work := t.TempDir()
	bin := filepath.Join(work, "meshrelay-plugin-netpol")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	pluginDir := filepath.Join(work, "plugins")
	entry, err := pluginhost.Install(pluginDir, bin, "")
	if err != nil {
		t.Fatalf("install: %v", err)
	}
	if entry.Name != "netpol" || len(entry.SHA256) != 64 {
		t.Fatalf("installed %+v", entry)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	host, err := pluginhost.New(pluginDir, nil, pluginhost.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	if err := host.Start(ctx); err != nil {
		t.Fatal(err)
	}
	var translators []pluginhost.Translator
	for _, p := range host.Plugins() {
		translators = append(translators, p)
	}
	srv, st, _ := startServer(ctx, t, work, translators, nil)
	done := make(chan error, 1)

	// Register east and run its agent over the example's cluster directory.
	token := register(t, st, "east")
	tokenFile := filepath.Join(work, "east.token")
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	aopts := agent.DefaultOptions()
	aopts.Cluster, aopts.Server, aopts.ServerName = "east", srv.Addr(), "127.0.0.1"
	aopts.TokenFile, aopts.CAFile, aopts.StateDir = tokenFile, srv.CABundlePath(), filepath.Join(work, "agent")
	out := filepath.Join(work, "out")
	a, err := agent.New(aopts, discovery.NewDir(filepath.Join("testdata", "east"), discovery.DirOptions{}), agent.Sinks{sink.NewDir(out)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	go func() { done <- a.Run(ctx) }()

	deadline := time.Now().Add(30 * time.Second)
	for {
		files, _ := filepath.Glob(filepath.Join(out, "netpol", "*"))
		if len(files) == 1 {
			data, err := os.ReadFile(files[0])
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(data), "kind: NetworkPolicy") || !strings.Contains(string(data), "meshrelay.io/policies: AccessPolicy/shop/api-from-frontend") {
				t.Fatalf("the cluster got:\n%s", data)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no NetworkPolicy reached the cluster within 30s (files: %v)", files)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	<-done
}

// startServer runs a server on the memory store with translators and the
// tutorial's policy in work/policies until the test ends (ctx must end
// first); mod, when set, changes its options. It returns the server, its
// store and the policy's file.
func startServer(ctx context.Context, t *testing.T, work string, translators []pluginhost.Translator, mod func(*server.Options)) (*server.Server, store.Store, string) {
	t.Helper()
	policies := filepath.Join(work, "policies")
	if err := os.MkdirAll(policies, 0o755); err != nil {
		t.Fatal(err)
	}
	policyFile := filepath.Join(policies, "api.yaml")
	if err := os.WriteFile(policyFile, []byte(tutorialPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	st := memory.New()
	opts := server.DefaultOptions()
	opts.ListenAddr, opts.AdminAddr, opts.DataDir = "127.0.0.1:0", "", filepath.Join(work, "server")
	if mod != nil {
		mod(&opts)
	}
	srv, err := server.New(ctx, opts, server.Deps{Store: st, Translators: translators, Policies: server.NewDirPolicies(policies, nil)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() { <-done })
	return srv, st, policyFile
}

// register records a cluster with a token in the store, as `meshrelay
// cluster register` does through the admin API.
func register(t *testing.T, st store.Store, name string) string {
	t.Helper()
	tok, err := pkiToken()
	if err != nil {
		t.Fatal(err)
	}
	if err := st.PutCluster(context.Background(), store.Cluster{Name: name, TokenHash: pkiHash(tok), Registered: time.Now()}); err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestReadmeCode checks that the README shows the example's own code:
// each Go block, cut at its lines of "...", appears piece by piece in the
// example's Go files.
func TestReadmeCode(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var src strings.Builder
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src.Write(data)
	}
	blocks := goBlocks(string(readme))
	if len(blocks) == 0 {
		t.Fatal("README.md has no Go code")
	}
	for i, b := range blocks {
		for _, piece := range pieces(b) {
			if !strings.Contains(src.String(), piece) {
				t.Errorf("Go block %d of README.md is not the example's code:\n%s", i+1, piece)
			}
		}
	}
}

// goBlocks returns the contents of the markdown's ```go blocks.
func goBlocks(markdown string) []string {
	var out []string
	var block []string
	in := false
	for _, line := range strings.Split(markdown, "\n") {
		switch {
		case !in && strings.TrimSpace(line) == "```go":
			in, block = true, nil
		case in && strings.TrimSpace(line) == "```":
			in = false
			out = append(out, strings.Join(block, "\n"))
		case in:
			block = append(block, line)
		}
	}
	return out
}

// pieces cuts a code block at its lines of "...", which stand for code the
// README leaves out, and returns the non-empty pieces.
func pieces(block string) []string {
	var out []string
	var cur []string
	flush := func() {
		if p := strings.Trim(strings.Join(cur, "\n"), "\n"); strings.TrimSpace(p) != "" {
			out = append(out, p)
		}
		cur = nil
	}
	for _, line := range strings.Split(block, "\n") {
		if strings.TrimSpace(line) == "..." {
			flush()
			continue
		}
		cur = append(cur, line)
	}
	flush()
	return out
}
