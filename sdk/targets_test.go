package sdk

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
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

// reader is a Translator whose targets read their own cluster's Services,
// and every cluster's when all is set; wait, when set, runs first.
type reader struct {
	all  bool
	wait func(req *Request) error
}

func (*reader) Describe() Description {
	return Description{Name: "reader", Version: "1", Backends: []string{"b"}, OutputKinds: []string{"/ConfigMap"}}
}

func (r *reader) TranslateTarget(_ context.Context, req *Request, resp *Response) error {
	if r.wait != nil {
		if err := r.wait(req); err != nil {
			return err
		}
	}
	clusters := []*Cluster{req.Target}
	if r.all {
		clusters = req.Fleet.Clusters()
	}
	for _, c := range clusters {
		for _, s := range c.Services() {
			resp.Emit(map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": c.Name + "-" + s.Name, "namespace": s.Namespace}})
		}
	}
	return nil
}

// decodedState reports whether cluster cd holds decoded objects, and how
// many kinds it decoded.
func decodedState(cd *clusterData) (held bool, decodes int) {
	cd.mu.Lock()
	defer cd.mu.Unlock()
	return cd.cache != nil, cd.decodes
}

func readerInputs(clusters ...string) []*translatorv1.ClusterInput {
	var ins []*translatorv1.ClusterInput
	for _, c := range clusters {
		ins = append(ins, &translatorv1.ClusterInput{Cluster: c, Upserts: []*snapshotv1.Resource{svcRes("ns", "x", 0), svcRes("ns", "y", 0)}})
	}
	return ins
}

// TestDecodedInputsDroppedWithTheirTarget computes target b only once a's
// outputs were sent: by then a's decoded Services are gone, although the
// update has not ended, since no other target read them.
func TestDecodedInputsDroppedWithTheirTarget(t *testing.T) {
	sent := make(chan struct{})
	var aHeld bool
	var aDecodes int
	r := &reader{wait: func(req *Request) error {
		if req.Target.Name != "b" {
			return nil
		}
		select {
		case <-sent:
		case <-time.After(10 * time.Second):
			return errors.New("a's outputs were not sent")
		}
		a, _ := req.Fleet.Cluster("a")
		aHeld, aDecodes = decodedState(a.d)
		return nil
	}}
	s := newSession(r, r.Describe())
	opened := false
	ans := runWatched(t, s, update{full: true, clusters: readerInputs("a", "b")}, func(m *translatorv1.TranslateResponse) {
		if out := m.GetOutput(); out.GetCluster() == "a" && !opened {
			opened = true
			close(sent)
		}
	})
	if e := ans.done.GetError(); e != "" {
		t.Fatalf("Done error = %q, want none", e)
	}
	if aHeld || aDecodes != 1 {
		t.Errorf("while b was computed, a held decoded objects: %v after %d decodes; want dropped after 1", aHeld, aDecodes)
	}
}

// TestDecodedInputsKeptForEveryReader has every target read every
// cluster's Services. Only the cluster of the target computed first is
// dropped (no other target had read it yet), and decoded once more by the
// readers after; every other cluster decodes once, however the targets
// interleave. Dropping each cluster with its own target regardless would
// decode nearly every cluster twice.
func TestDecodedInputsKeptForEveryReader(t *testing.T) {
	names := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	r := &reader{all: true}
	s := newSession(r, r.Describe())
	var mu sync.Mutex
	var fleet *fleetData
	r.wait = func(req *Request) error {
		mu.Lock()
		fleet = req.Fleet.d
		mu.Unlock()
		return nil
	}
	ans := run(t, s, update{full: true, clusters: readerInputs(names...)})
	if e := ans.done.GetError(); e != "" {
		t.Fatalf("Done error = %q, want none", e)
	}
	if len(ans.outputs) != len(names) {
		t.Fatalf("sent %d sets, want %d", len(ans.outputs), len(names))
	}
	total := 0
	for _, n := range names {
		held, decodes := decodedState(fleet.byName[n])
		if held {
			t.Errorf("cluster %s still holds decoded objects after the update", n)
		}
		total += decodes
	}
	if total > len(names)+1 {
		t.Errorf("%d clusters read by every target decoded %d times in all, want at most %d", len(names), total, len(names)+1)
	}
}

// TestReleaserKeepsWhatOthersRead drives the releaser through targets
// computed in a known order: a cluster is dropped with its own target
// unless another target read it first, and nothing is dropped after a
// fleet-wide read.
func TestReleaserKeepsWhatOthersRead(t *testing.T) {
	fleet := &fleetData{byName: map[string]*clusterData{}}
	for _, n := range []string{"a", "b", "c", "d", "e"} {
		cd := newClusterData(n, false, nil, nil, map[snapshot.ID][]byte{{Kind: "Service", Version: "v1", Namespace: "ns", Name: "s"}: []byte(`{}`)})
		cd.services()
		fleet.byName[n] = cd
	}
	reads := func(rs ...read) *readSet { return &readSet{reads: rs} }
	services := func(cluster string) read { return read{op: readObjects, cluster: cluster, kind: "Service"} }
	rl := newReleaser(fleet)
	rl.computed("a", reads(services("a"), read{op: readLabels, cluster: "c"}))
	rl.computed("b", reads(services("b"), services("c")))
	rl.computed("c", reads(services("c")))
	rl.computed("d", reads(services("d"), read{op: readSelect, name: "[]"}))
	rl.computed("e", reads(services("e")))
	for n, want := range map[string]bool{"a": false, "b": false, "c": true, "d": true, "e": true} {
		if held, _ := decodedState(fleet.byName[n]); held != want {
			t.Errorf("cluster %s holds its decoded objects: %v, want %v", n, held, want)
		}
	}
}

// panicking panics computing the target named in it.
type panicking struct{ target string }

func (panicking) Describe() Description {
	return Description{Name: "panicking", Version: "1", Backends: []string{"b"}, OutputKinds: []string{"/ConfigMap"}}
}

func (p panicking) TranslateTarget(_ context.Context, req *Request, resp *Response) error {
	if req.Target.Name == p.target {
		panic("boom")
	}
	resp.Emit(map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "out", "namespace": "ns"}})
	return nil
}

// A target that panics fails the update with its stack, whether it is
// the update's only target (computed on the session's goroutine) or one
// of several (computed by workers), and the next update is served.
func TestATargetThatPanicsFailsTheUpdate(t *testing.T) {
	input := func(cluster string, version int) *translatorv1.ClusterInput {
		return &translatorv1.ClusterInput{Cluster: cluster, Upserts: []*snapshotv1.Resource{svcRes("ns", "s", version)}}
	}
	s := newSession(panicking{target: "bad"}, panicking{}.Describe())
	if a := run(t, s, update{full: true, clusters: []*translatorv1.ClusterInput{input("a", 0), input("b", 0)}}); a.done.GetError() != "" {
		t.Fatalf("full update failed: %s", a.done.GetError())
	}
	for _, clusters := range [][]*translatorv1.ClusterInput{
		{input("bad", 0)},
		{input("a", 1), input("b", 1), input("bad", 1)},
	} {
		a := run(t, s, update{clusters: clusters})
		if e := a.done.GetError(); !strings.Contains(e, `translate target "bad" panicked: boom`) || !strings.Contains(e, "goroutine") {
			t.Errorf("%d clusters changed with bad among them: Done error %q, want bad's panic and its stack", len(clusters), e)
		}
		if a := run(t, s, update{full: true, clusters: []*translatorv1.ClusterInput{input("a", 2), input("b", 2)}}); a.done.GetError() != "" || len(a.outputs) != 2 {
			t.Fatalf("after the panic, a full update: error %q, %d clusters answered, want 2", a.done.GetError(), len(a.outputs))
		}
	}
}
