package sdk

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/meshrelay/meshrelay/api/snapshot"
	snapshotv1 "github.com/meshrelay/meshrelay/proto/snapshot/v1"
	translatorv1 "github.com/meshrelay/meshrelay/proto/translator/v1"
)

// gated computes each target after the outputs of the targets in its
// after were sent, or fails when they were not within a while: a target
// that waits for another's outputs can only be computed if the session
// sends each target's outputs as soon as it has them.
type gated struct {
	after map[string][]string
	sent  map[string]chan struct{}
	fail  map[string]bool
}

func newGated(clusters ...string) *gated {
	g := &gated{after: map[string][]string{}, sent: map[string]chan struct{}{}, fail: map[string]bool{}}
	for _, c := range clusters {
		g.sent[c] = make(chan struct{})
	}
	return g
}

func (*gated) Describe() Description {
	return Description{Name: "gated", Version: "1", Backends: []string{"b"}, OutputKinds: []string{"/ConfigMap"}}
}

func (g *gated) TranslateTarget(ctx context.Context, req *Request, resp *Response) error {
	for _, c := range g.after[req.Target.Name] {
		select {
		case <-g.sent[c]:
		case <-time.After(10 * time.Second):
			return fmt.Errorf("the outputs of %s were not sent before %s was computed", c, req.Target.Name)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if g.fail[req.Target.Name] {
		return errors.New("cannot")
	}
	for _, s := range req.Target.Services() {
		resp.Emit(map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": s.Name, "namespace": s.Namespace}})
	}
	return nil
}

// runGated sends one update to s and returns its answer; the gate of a
// cluster opens when its outputs were sent.
func runGated(t *testing.T, s *session, g *gated, full bool, clusters ...*translatorv1.ClusterInput) answer {
	t.Helper()
	opened := map[string]bool{}
	return runWatched(t, s, update{full: full, clusters: clusters}, func(m *translatorv1.TranslateResponse) {
		out := m.GetOutput()
		if out == nil {
			return
		}
		if ch, ok := g.sent[out.GetCluster()]; ok && !out.GetMore() && !opened[out.GetCluster()] {
			close(ch)
			opened[out.GetCluster()] = true
		}
	})
}

// TestTargetOutputsSentAsComputed checks that the session sends a
// target's outputs while other targets are still being computed, so that
// a host sees an answer of many targets progress.
func TestTargetOutputsSentAsComputed(t *testing.T) {
	g := newGated("a", "b")
	g.after["b"] = []string{"a"}
	g.after["c"] = []string{"b"}
	s := newSession(g, g.Describe())
	a := runGated(t, s, g, true,
		&translatorv1.ClusterInput{Cluster: "a", Upserts: []*snapshotv1.Resource{svcRes("ns", "x", 0)}},
		&translatorv1.ClusterInput{Cluster: "b", Upserts: []*snapshotv1.Resource{svcRes("ns", "y", 0)}},
		&translatorv1.ClusterInput{Cluster: "c", Upserts: []*snapshotv1.Resource{svcRes("ns", "z", 0)}},
	)
	if e := a.done.GetError(); e != "" {
		t.Fatalf("Done error = %q, want none", e)
	}
	if len(a.outputs) != 3 {
		t.Errorf("full update sent %v, want a, b and c", a.outputs)
	}
}

// TestFailedUpdateSendsStreamedSetsAgain fails a target after another
// target's outputs were sent: the host drops the whole answer, so the
// next update, even a delta, sends those outputs again.
func TestFailedUpdateSendsStreamedSetsAgain(t *testing.T) {
	g := newGated()
	s := newSession(g, g.Describe())
	svc := func(name string) []*snapshotv1.Resource { return []*snapshotv1.Resource{svcRes("ns", name, 0)} }
	runGated(t, s, g, true, &translatorv1.ClusterInput{Cluster: "a", Upserts: svc("x")}, &translatorv1.ClusterInput{Cluster: "b", Upserts: svc("x")})

	g.sent["a"] = make(chan struct{})
	g.after["b"] = []string{"a"}
	g.fail["b"] = true
	a := runGated(t, s, g, false, &translatorv1.ClusterInput{Cluster: "a", Upserts: svc("y")}, &translatorv1.ClusterInput{Cluster: "b", Upserts: svc("y")})
	if a.done.GetError() == "" || len(a.outputs["a"]) != 2 {
		t.Fatalf("answer = %+v, want a's new set, then Done with an error", a)
	}

	g.fail["b"], g.after["b"], g.sent = false, nil, map[string]chan struct{}{}
	a = runGated(t, s, g, false)
	if e := a.done.GetError(); e != "" {
		t.Fatalf("Done error = %q after recovery, want none", e)
	}
	if len(a.outputs["a"]) != 2 || len(a.outputs["b"]) != 2 {
		t.Errorf("after recovery sent %v, want a's and b's sets of 2 objects: the host dropped the failed answer", a.outputs)
	}
}

// hashOutputs tells sets apart by every identity, size and body: sets
// that differ in any one field, or only in where one field ends and the
// next begins, hash differently.
func TestHashOutputsTellsSetsApart(t *testing.T) {
	base := Output{ID: snapshot.ID{Group: "networking.istio.io", Version: "v1", Kind: "VirtualService", Namespace: "ns", Name: "a"}, Body: []byte(`{"a":1}`)}
	variants := []func(o *Output){
		func(o *Output) { o.Group = "security.istio.io" },
		func(o *Output) { o.Version = "v1beta1" },
		func(o *Output) { o.Kind = "DestinationRule" },
		func(o *Output) { o.Namespace = "other" },
		func(o *Output) { o.Name = "b" },
		func(o *Output) { o.Body = []byte(`{"a":2}`) },
		func(o *Output) { o.Namespace, o.Name = "n", "sa" }, // the same characters, split elsewhere
	}
	seen := map[[32]byte]int{hashOutputs([]Output{base}): -1}
	for i, change := range variants {
		o := base
		change(&o)
		h := hashOutputs([]Output{o})
		if j, dup := seen[h]; dup {
			t.Errorf("variant %d hashes as variant %d", i, j)
		}
		seen[h] = i
	}
	two := []Output{base, base}
	two[1].Name = "b"
	if hashOutputs(two) == hashOutputs(two[:1]) || hashOutputs(two) != hashOutputs(slices.Clone(two)) {
		t.Error("a set's hash does not follow its members")
	}
}
