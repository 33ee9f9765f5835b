package layering

import (
	"os/exec"
	"strings"
	"testing"
)

// imports returns the module's import graph (non-test imports between its
// own packages), paths relative to the module.
func imports(t *testing.T) map[string][]string {
	t.Helper()
	module, root := module(t)
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list ./...: %v", err)
	}
	graph := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		from, ok := relative(module, fields[0])
		if !ok {
			continue
		}
		graph[from] = nil
		for _, imp := range fields[1:] {
			if to, ok := relative(module, imp); ok {
				graph[from] = append(graph[from], to)
			}
		}
	}
	if len(graph) < 30 {
		t.Fatalf("go list found %d packages, want the whole module", len(graph))
	}
	return graph
}

// module returns the module's path and directory.
func module(t *testing.T) (path, dir string) {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Path}} {{.Dir}}").Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	path, dir, _ = strings.Cut(strings.TrimSpace(string(out)), " ")
	return path, dir
}

func moduleRoot(t *testing.T) string {
	_, dir := module(t)
	return dir
}

// relative returns a package's path inside the module.
func relative(module, path string) (string, bool) {
	return strings.CutPrefix(path, module+"/")
}

func TestModuleFollowsLayers(t *testing.T) {
	graph := imports(t)
	for _, v := range Violations(graph) {
		t.Error(v)
	}
	for pkg := range graph {
		if _, ok := rank(layers, pkg); !ok {
			t.Errorf("package %s is in no layer: add it to internal/layering", pkg)
		}
	}
}

func TestCheck(t *testing.T) {
	tests := map[string]struct {
		edge Edge
		ok   bool
	}{
		"core names a plugin":             {Edge{"core/agent/xds", "plugins/envoy"}, false},
		"core names a plugin's internals": {Edge{"core/engine", "plugins/internal/envoyroute"}, false},
		"plugin imports core":             {Edge{"plugins/istio", "core/store"}, false},
		"example imports core":            {Edge{"examples/netpol", "core/pki"}, false},
		"sdk imports core":                {Edge{"sdk", "core/pluginhost"}, false},
		"sdk imports a tool":              {Edge{"sdk/sdktest", "internal/offline"}, false},
		"plugin imports a test helper":    {Edge{"plugins/cilium", "internal/testenv"}, false},
		"api imports sdk":                 {Edge{"api/snapshot", "sdk"}, false},
		"api imports core":                {Edge{"api/meta", "core/store"}, false},
		"api imports a test helper":       {Edge{"api/xds", "internal/testutil"}, false},
		"proto imports api":               {Edge{"proto/relay/v1", "api/snapshot"}, false},
		"server imports the agent":        {Edge{"core/server", "core/agent/discovery"}, false},
		"agent imports the server":        {Edge{"core/agent/sink", "core/server"}, false},
		"store imports the engine":        {Edge{"core/store", "core/engine"}, false},
		"engine imports the server":       {Edge{"core/engine", "core/server"}, false},
		"core imports a tool":             {Edge{"core/server", "internal/demo"}, false},
		"a tool imports cmd":              {Edge{"internal/demo", "cmd/meshrelay"}, false},
		"cmd imports cmd":                 {Edge{"cmd/meshrelay", "cmd/meshrelay-plugin-istio"}, false},
		"unknown package":                 {Edge{"core/server", "newtop/thing"}, false},
		"unknown core package":            {Edge{"core/server", "core/newthing"}, false},
		"agent imports the xds codec":     {Edge{"core/agent/xds", "api/xds"}, true},
		"plugin imports the xds codec":    {Edge{"plugins/envoy", "api/xds"}, true},
		"plugin imports its internals":    {Edge{"plugins/envoy", "plugins/internal/envoyroute"}, true},
		"plugin imports sdk":              {Edge{"plugins/istio", "sdk"}, true},
		"api imports api and proto":       {Edge{"api/snapshot", "proto/snapshot/v1"}, true},
		"server imports the manifests":    {Edge{"core/server", "core/manifest"}, true},
		"agent imports the manifests":     {Edge{"core/agent/discovery", "core/manifest"}, true},
		"ui imports the server":           {Edge{"core/ui", "core/server"}, true},
		"pluginhost imports sdk":          {Edge{"core/pluginhost", "sdk/protocol"}, true},
		"a tool imports core":             {Edge{"internal/offline", "core/agent/discovery"}, true},
		"cmd imports a tool":              {Edge{"cmd/meshrelay", "internal/bench"}, true},
		"a tool imports a test helper":    {Edge{"internal/bench", "internal/tcpproxy"}, true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := Check(tc.edge)
			if (err == nil) != tc.ok {
				t.Errorf("Check(%s → %s) = %v, want allowed %v", tc.edge.From, tc.edge.To, err, tc.ok)
			}
		})
	}
}

// A graph with one upward import among allowed ones fails, naming it.
func TestViolationsOfSyntheticGraph(t *testing.T) {
	graph := map[string][]string{
		"api/snapshot":   {"proto/snapshot/v1"},
		"sdk":            {"api/snapshot", "proto/translator/v1"},
		"plugins/envoy":  {"sdk", "api/xds"},
		"core/agent/xds": {"api/xds", "plugins/envoy"},
		"core/server":    {"core/engine", "core/manifest"},
	}
	got := Violations(graph)
	if len(got) != 1 || !strings.Contains(got[0], "core/agent/xds imports plugins/envoy") {
		t.Errorf("Violations() = %q, want one naming core/agent/xds imports plugins/envoy", got)
	}
}
