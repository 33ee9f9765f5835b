package agent

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/agent/discovery"
	"github.com/meshrelay/meshrelay/internal/testenv"
	"github.com/meshrelay/meshrelay/internal/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// inputRecorder is a KindSource recording the kinds declared to it.
type inputRecorder struct {
	mu    sync.Mutex
	kinds []string
	calls int
}

func (r *inputRecorder) Run(ctx context.Context, _ func(*snapshot.Snapshot)) error {
	<-ctx.Done()
	return nil
}

func (r *inputRecorder) DeclareInputKinds(kinds []snapshot.GroupKind) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.kinds = nil
	for _, k := range kinds {
		r.kinds = append(r.kinds, k.String())
	}
	r.calls++
	return nil
}

func (r *inputRecorder) get() ([]string, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.kinds), r.calls
}

// The input kinds of a Welcome reach the source and the state directory;
// a restarted agent tells its source those kinds before it hears from any
// server. No kinds, or kinds that are not group/Kind, change nothing.
func TestInputKindsKeptAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	first := &inputRecorder{}
	a := stateAgent(t, dir, first, nil)
	a.declareInputKinds([]string{"networking.istio.io/DestinationRule", "/Service"}, true)
	want := []string{"/Service", "networking.istio.io/DestinationRule"}
	if got, _ := first.get(); !slices.Equal(got, want) {
		t.Fatalf("source was told %v, want %v", got, want)
	}
	a.declareInputKinds(nil, true)
	a.declareInputKinds([]string{"/Service", "networking.istio.io/v1/DestinationRule"}, true)
	a.declareInputKinds(want, true)
	if got, calls := first.get(); !slices.Equal(got, want) || calls != 1 || !slices.Equal(a.InputKinds(), want) {
		t.Fatalf("after no kinds, bad kinds and the same kinds: source has %v (%d calls), agent %v; want %v told once", got, calls, a.InputKinds(), want)
	}
	if _, err := os.Stat(filepath.Join(dir, inputKindsFile)); err != nil {
		t.Fatalf("input kinds not kept in the state directory: %v", err)
	}

	second := &inputRecorder{}
	restarted := stateAgent(t, dir, second, nil)
	restarted.loadInputKinds()
	if got, _ := second.get(); !slices.Equal(got, want) || !slices.Equal(restarted.InputKinds(), want) {
		t.Errorf("after a restart the source was told %v and the agent has %v, want %v", got, restarted.InputKinds(), want)
	}

	if err := os.WriteFile(filepath.Join(dir, inputKindsFile), []byte("[not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	broken := &inputRecorder{}
	stateAgent(t, dir, broken, nil).loadInputKinds()
	if got, calls := broken.get(); calls != 0 {
		t.Errorf("a broken kinds file told the source %v, want nothing", got)
	}
}

// An agent restarted with its state directory discovers the custom
// resources of the kinds it kept, from a real kube-apiserver, while no
// server answers it.
func TestRestartedAgentDiscoversKeptKinds(t *testing.T) {
	k := testenv.SharedKube(t)
	ns := k.CreateNamespace(t)
	drs := schema.GroupVersionResource{Group: "networking.istio.io", Version: "v1", Resource: "destinationrules"}
	_, err := k.Dynamic(t).Resource(drs).Namespace(ns).Create(t.Context(), &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "networking.istio.io/v1", "kind": "DestinationRule",
		"metadata": map[string]any{"name": "reviews"}, "spec": map[string]any{"host": "reviews"},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	testutil.WriteFile(t, filepath.Join(dir, inputKindsFile), `["networking.istio.io/DestinationRule"]`)
	src, err := discovery.NewKube(k.Config(), discovery.KubeOptions{Filter: discovery.Filter{IncludeNamespaces: []string{ns}}})
	if err != nil {
		t.Fatal(err)
	}
	a := stateAgent(t, dir, src, nil)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	dr := snapshot.ID{Group: "networking.istio.io", Version: "v1", Kind: "DestinationRule", Namespace: ns, Name: "reviews"}
	testutil.Eventually(t, "the kept kind is discovered", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.current == nil {
			return false
		}
		_, ok := a.current.Get(dr)
		return ok
	})
	if a.Stats.Connects.Load() != 0 {
		t.Errorf("the agent connected to a server that does not exist")
	}
}
