package agent

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/meshrelay/meshrelay/api/snapshot"
)

// kindRecorder is a KindSink recording the kinds declared to it.
type kindRecorder struct {
	mu       sync.Mutex
	declared map[string][]string
	calls    int
}

func (r *kindRecorder) Apply(context.Context, string, *snapshot.Snapshot, bool) (map[snapshot.ID]error, error) {
	return nil, nil
}

func (r *kindRecorder) DeclareKinds(backend string, kinds []snapshot.GroupKind) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.declared == nil {
		r.declared = map[string][]string{}
	}
	var names []string
	for _, k := range kinds {
		names = append(names, k.String())
	}
	r.declared[backend] = names
	r.calls++
	return nil
}

func (r *kindRecorder) get(backend string) ([]string, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.declared[backend], r.calls
}

// stateAgent is an agent of cluster east, never connected, keeping its
// state in stateDir.
func stateAgent(t *testing.T, stateDir string, src Source, sinks Sinks) *Agent {
	t.Helper()
	opts := DefaultOptions()
	opts.Cluster, opts.Server, opts.Insecure, opts.StateDir = "east", "127.0.0.1:1", true, stateDir
	a, err := New(opts, src, sinks, nil)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// The kinds the server declares reach the sink and the state directory; a
// restarted agent tells its sinks those kinds before it hears from any
// server. No kinds, or kinds that are not group/Kind, change nothing.
func TestOutputKindsKeptAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	first := &kindRecorder{}
	a := stateAgent(t, dir, nil, Sinks{first})
	a.declareKinds("netpol", []string{"networking.k8s.io/NetworkPolicy", "/ConfigMap"}, true)
	want := []string{"/ConfigMap", "networking.k8s.io/NetworkPolicy"}
	if got, _ := first.get("netpol"); !slices.Equal(got, want) {
		t.Fatalf("sink was told %v, want %v", got, want)
	}
	a.declareKinds("netpol", nil, true)
	a.declareKinds("netpol", []string{"/ConfigMap", "networking.k8s.io/v1/NetworkPolicy"}, true)
	if got, calls := first.get("netpol"); !slices.Equal(got, want) || calls != 1 || !slices.Equal(a.OutputKinds("netpol"), want) {
		t.Fatalf("after no kinds and bad kinds: sink has %v (%d calls), agent %v; want %v told once", got, calls, a.OutputKinds("netpol"), want)
	}
	if _, err := os.Stat(filepath.Join(dir, kindsFile)); err != nil {
		t.Fatalf("kinds not kept in the state directory: %v", err)
	}

	second := &kindRecorder{}
	restarted := stateAgent(t, dir, nil, Sinks{second, &fixedSink{}})
	restarted.loadKinds()
	if got, _ := second.get("netpol"); !slices.Equal(got, want) || !slices.Equal(restarted.OutputKinds("netpol"), want) {
		t.Errorf("after a restart the sink was told %v and the agent has %v, want %v", got, restarted.OutputKinds("netpol"), want)
	}

	if err := os.WriteFile(filepath.Join(dir, kindsFile), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	broken := stateAgent(t, dir, nil, Sinks{&kindRecorder{}})
	broken.loadKinds()
	if got := broken.OutputKinds("netpol"); len(got) != 0 {
		t.Errorf("a broken kinds file gave %v, want nothing", got)
	}
}

// The agent keeps the kinds of at most maxKindBackends backends.
func TestOutputKindsBoundedBackends(t *testing.T) {
	a := stateAgent(t, "", nil, Sinks{&kindRecorder{}})
	for i := range maxKindBackends + 5 {
		a.declareKinds("b"+string(rune('a'+i%26))+string(rune('a'+i/26)), []string{"/ConfigMap"}, true)
	}
	a.mu.Lock()
	n := len(a.kinds)
	a.mu.Unlock()
	if n != maxKindBackends {
		t.Errorf("kept the kinds of %d backends, want %d", n, maxKindBackends)
	}
}
