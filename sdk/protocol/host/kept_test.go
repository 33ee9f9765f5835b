package host_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/meshrelay/meshrelay/api/snapshot"
	snapshotv1 "github.com/meshrelay/meshrelay/proto/snapshot/v1"
	translatorv1 "github.com/meshrelay/meshrelay/proto/translator/v1"
	"github.com/meshrelay/meshrelay/sdk"
	"github.com/meshrelay/meshrelay/sdk/protocol"
	"github.com/meshrelay/meshrelay/sdk/protocol/host"
	"google.golang.org/grpc"
)

// perService emits a ConfigMap per Service of its target, and counts the
// targets it computed.
type perService struct {
	mu       sync.Mutex
	computed []string
}

func (*perService) Describe() sdk.Description {
	return sdk.Description{Name: "per-service", Version: "1", Backends: []string{"b"}, OutputKinds: []string{"/ConfigMap"}}
}

func (p *perService) TranslateTarget(_ context.Context, req *sdk.Request, resp *sdk.Response) error {
	p.mu.Lock()
	p.computed = append(p.computed, req.Target.Name)
	p.mu.Unlock()
	for _, s := range req.Target.Services() {
		resp.Emit(map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": s.Name, "namespace": s.Namespace},
			"data": map[string]any{"cluster": req.Target.Name}})
	}
	return nil
}

// takeComputed returns the targets computed since the last call, sorted.
func (p *perService) takeComputed() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.computed
	p.computed = nil
	slices.Sort(c)
	return c
}

// watching records every answer message its sessions receive.
type watching struct {
	translatorv1.TranslatorClient
	mu  sync.Mutex
	got []*translatorv1.TranslateResponse
}

func (w *watching) Translate(ctx context.Context, opts ...grpc.CallOption) (translatorv1.Translator_TranslateClient, error) {
	st, err := w.TranslatorClient.Translate(ctx, opts...)
	return watchedStream{st, w}, err
}

// take returns the output parts received since the last call.
func (w *watching) take() []*translatorv1.ClusterOutput {
	w.mu.Lock()
	defer w.mu.Unlock()
	var outs []*translatorv1.ClusterOutput
	for _, m := range w.got {
		if o := m.GetOutput(); o != nil {
			outs = append(outs, o)
		}
	}
	w.got = nil
	return outs
}

type watchedStream struct {
	translatorv1.Translator_TranslateClient
	w *watching
}

func (s watchedStream) Recv() (*translatorv1.TranslateResponse, error) {
	m, err := s.Translator_TranslateClient.Recv()
	if m != nil {
		s.w.mu.Lock()
		s.w.got = append(s.w.got, m)
		s.w.mu.Unlock()
	}
	return m, err
}

// delivery holds the sets delivered, as the engine's store does.
type delivery map[[2]string]*snapshot.Snapshot

func (d delivery) get(cluster, backend string) (*snapshot.Snapshot, bool) {
	s, ok := d[[2]string{cluster, backend}]
	return s, ok
}

// deliver keeps res's sets.
func (d delivery) deliver(t *testing.T, res host.Result) {
	t.Helper()
	for _, o := range res.Outputs {
		s, err := snapshot.New(0, o.Resources)
		if err != nil {
			t.Fatal(err)
		}
		d[[2]string{o.Cluster, o.Backend}] = s
	}
}

func service(t *testing.T, name string) snapshot.Resource {
	t.Helper()
	r, err := snapshot.FromJSON(fmt.Appendf(nil, `{"apiVersion":"v1","kind":"Service","metadata":{"namespace":"ns","name":%q}}`, name))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// cluster returns a cluster holding Services of the names given.
func cluster(t *testing.T, services ...string) host.Cluster {
	t.Helper()
	var rs []snapshot.Resource
	for _, s := range services {
		rs = append(rs, service(t, s))
	}
	in, err := snapshot.New(0, rs)
	if err != nil {
		t.Fatal(err)
	}
	return host.Cluster{Input: in}
}

// configMaps returns what perService emits in cluster for services.
func configMaps(cluster string, services ...string) []string {
	var out []string
	for _, s := range services {
		out = append(out, fmt.Sprintf(`ns/%s {"cluster":%q}`, s, cluster))
	}
	return out
}

// summary returns a set's resources as "namespace/name data".
func summary(t *testing.T, res host.Result, cluster string) []string {
	t.Helper()
	for _, o := range res.Outputs {
		if o.Cluster != cluster {
			continue
		}
		var out []string
		for _, r := range o.Resources {
			var cm struct {
				Data map[string]string `json:"data"`
			}
			if err := r.Decode(&cm); err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprintf(`%s/%s {"cluster":%q}`, r.ID.Namespace, r.ID.Name, cm.Data["cluster"]))
			if r.Hash != sha256.Sum256(r.Body) {
				t.Errorf("%s: hash is not its body's", r.ID)
			}
		}
		slices.Sort(out)
		return out
	}
	return nil
}

// partNames returns the resources the parts name kept and those they
// send, as "cluster/name", sorted.
func partNames(outs []*translatorv1.ClusterOutput) (kept, sent []string) {
	for _, o := range outs {
		for _, id := range o.GetKept() {
			kept = append(kept, o.GetCluster()+"/"+id.GetName())
		}
		for _, r := range o.GetResources() {
			sent = append(sent, o.GetCluster()+"/"+r.GetId().GetName())
		}
	}
	slices.Sort(kept)
	slices.Sort(sent)
	return kept, sent
}

// openWatched opens a session with translator tr served in process,
// whose answers w records, and returns translate, which hands the session
// a view with the sets delivered so far, then delivers its answer there,
// as the engine does.
func openWatched(t *testing.T, name string, tr sdk.Translator) (s *host.Session, w *watching, delivered delivery, translate func(host.View) host.Result) {
	t.Helper()
	conn, stop, err := sdk.ServeInProcess(tr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	w = &watching{TranslatorClient: translatorv1.NewTranslatorClient(conn)}
	if s, err = host.Open(w, name, []string{"b"}, host.DefaultMaxOutputBytes); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	delivered = delivery{}
	translate = func(v host.View) host.Result {
		t.Helper()
		v.Delivered = delivered.get
		res, err := s.Translate(context.Background(), v)
		if err != nil {
			t.Fatal(err)
		}
		delivered.deliver(t, res)
		return res
	}
	return s, w, delivered, translate
}

// A set sent again carries what changed and names the rest kept; the
// session takes the kept resources from the set delivered, and the answer
// is the whole set. When the delivered set no longer holds a kept
// resource as the plugin last answered it, the session asks for the
// cluster's sets whole in a second round, and the answer is still right.
func TestSessionTakesKeptResourcesFromTheSetDelivered(t *testing.T) {
	p := &perService{}
	s, w, delivered, translate := openWatched(t, "per-service", p)
	ctx := context.Background()

	res := translate(host.View{Clusters: map[string]host.Cluster{"east": cluster(t, "a", "b"), "west": cluster(t, "c")}})
	if kept, _ := partNames(w.take()); kept != nil || !slices.Equal(summary(t, res, "east"), configMaps("east", "a", "b")) {
		t.Fatalf("full update: kept %v, east %v", kept, summary(t, res, "east"))
	}
	p.takeComputed()

	// east gains a Service: only its ConfigMap is sent.
	res = translate(host.View{Clusters: map[string]host.Cluster{"east": cluster(t, "a", "b", "d"), "west": cluster(t, "c")}})
	kept, sent := partNames(w.take())
	if !slices.Equal(kept, []string{"east/a", "east/b"}) || !slices.Equal(sent, []string{"east/d"}) {
		t.Errorf("east's set sent again kept %v and sent %v, want a and b kept, d sent", kept, sent)
	}
	if got := summary(t, res, "east"); !slices.Equal(got, configMaps("east", "a", "b", "d")) || len(res.Outputs) != 1 {
		t.Errorf("the answer holds %d sets, east's %v", len(res.Outputs), got)
	}

	// Another writer changed a resource of east's set delivered: a kept
	// resource is not there as answered, and east is asked for whole.
	other := snapshot.Resource{ID: snapshot.ID{Version: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "a"}, Body: []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns"},"data":{"cluster":"other"}}`)}
	other.Hash = sha256.Sum256(other.Body)
	changed := delivered[[2]string{"east", "b"}].Resources()
	changed[slices.IndexFunc(changed, func(r snapshot.Resource) bool { return r.ID == other.ID })] = other
	held, err := snapshot.New(0, changed)
	if err != nil {
		t.Fatal(err)
	}
	delivered[[2]string{"east", "b"}] = held
	p.takeComputed()
	res = translate(host.View{Clusters: map[string]host.Cluster{"east": cluster(t, "a", "b", "d", "e"), "west": cluster(t, "c")}})
	parts := w.take()
	if got := summary(t, res, "east"); !slices.Equal(got, configMaps("east", "a", "b", "d", "e")) || len(res.Outputs) != 1 {
		t.Errorf("after the delivered set changed, the answer holds %d sets, east's %v", len(res.Outputs), got)
	}
	if !slices.Equal(res.Resent, []string{"east"}) {
		t.Errorf("the answer names %v asked for whole, want east", res.Resent)
	}
	if got := p.takeComputed(); !slices.Equal(got, []string{"east", "east"}) {
		t.Errorf("computed %v, want east twice: the update, and the set asked for whole", got)
	}
	if kept, sent := partNames(parts[len(parts)-1:]); kept != nil || !slices.Equal(sent, []string{"east/a", "east/b", "east/d", "east/e"}) {
		t.Errorf("the set asked for whole kept %v and sent %v", kept, sent)
	}

	// Without Delivered, nothing is kept.
	res, err = s.Translate(ctx, host.View{Clusters: map[string]host.Cluster{"east": cluster(t, "a", "b", "d", "e", "f"), "west": cluster(t, "c")}})
	if err != nil {
		t.Fatal(err)
	}
	if kept, sent := partNames(w.take()); kept != nil || len(sent) != 5 {
		t.Errorf("without Delivered the set kept %v and sent %v", kept, sent)
	}
	if got := summary(t, res, "east"); !slices.Equal(got, configMaps("east", "a", "b", "d", "e", "f")) {
		t.Errorf("without Delivered east's set is %v", got)
	}
}

// keeper answers every update with cluster east's set: whole on a full
// update unless keepsOnFull, and otherwise naming its one resource kept;
// when silent, with nothing changed. Its Done says it takes same_targets
// when takesSame is set. It records every Begin.
type keeper struct {
	translatorv1.UnimplementedTranslatorServer
	keepsOnFull, silent, takesSame bool
	begins                         []*translatorv1.Begin
}

func (k *keeper) Translate(stream grpc.BidiStreamingServer[translatorv1.TranslateRequest, translatorv1.TranslateResponse]) error {
	id := &snapshotv1.ResourceID{Version: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "a"}
	for {
		req, err := stream.Recv()
		if err != nil {
			return nil
		}
		switch m := req.GetMsg().(type) {
		case *translatorv1.TranslateRequest_Begin:
			k.begins = append(k.begins, m.Begin)
		case *translatorv1.TranslateRequest_Commit:
			out := &translatorv1.ClusterOutput{Cluster: "east", Backend: "b", Kept: []*snapshotv1.ResourceID{id}}
			if k.begins[len(k.begins)-1].GetFull() && !k.keepsOnFull {
				out = &translatorv1.ClusterOutput{Cluster: "east", Backend: "b", Resources: []*snapshotv1.Resource{{Id: id,
					Body: []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns"}}`)}}}
			}
			answer := []*translatorv1.TranslateResponse{
				{Msg: &translatorv1.TranslateResponse_Output{Output: out}},
				{Msg: &translatorv1.TranslateResponse_Done{Done: &translatorv1.Done{Generation: m.Commit.GetGeneration(), TakesSameTargets: k.takesSame}}},
			}
			if k.silent {
				answer = answer[1:]
			}
			for _, m := range answer {
				if err := stream.Send(m); err != nil {
					return err
				}
			}
		}
	}
}

// openKeeper opens a session with k served in memory.
func openKeeper(t *testing.T, k *keeper) *host.Session { return openServed(t, "keeper", k) }

// openServed opens a session with the plugin name, of backend "b",
// served in memory by srv.
func openServed(t *testing.T, name string, srv translatorv1.TranslatorServer) *host.Session {
	t.Helper()
	conn, stop, err := protocol.ServeInMemory(name, srv)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	s, err := host.Open(translatorv1.NewTranslatorClient(conn), name, []string{"b"}, host.DefaultMaxOutputBytes)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// A plugin may name resources kept only where the update allows it: a
// full update never does.
func TestKeptOnAFullUpdateBreaksTheProtocol(t *testing.T) {
	k := &keeper{keepsOnFull: true}
	s := openKeeper(t, k)
	view := host.View{Clusters: map[string]host.Cluster{"east": cluster(t, "a")}, Delivered: delivery{}.get}
	if _, err := s.Translate(context.Background(), view); !errors.Is(err, host.ErrProtocol) {
		t.Fatalf("kept on a full update: %v, want a protocol error", err)
	}
	if len(k.begins) != 1 || k.begins[0].GetKeptAllowed() {
		t.Errorf("a full update's Begin allowed kept: %v", k.begins)
	}
}

// A set whose kept resources the host does not hold is asked for whole,
// in a round that allows no kept; keeping again there breaks the
// protocol, and the session asks no third time.
func TestKeptInTheWholeRoundBreaksTheProtocol(t *testing.T) {
	k := &keeper{}
	s := openKeeper(t, k)
	ctx := context.Background()
	empty := delivery{}
	if _, err := s.Translate(ctx, host.View{Clusters: map[string]host.Cluster{"east": cluster(t, "a")}, Delivered: empty.get}); err != nil {
		t.Fatal(err)
	}
	// Nothing was delivered: the kept resource is not held.
	_, err := s.Translate(ctx, host.View{Clusters: map[string]host.Cluster{"east": cluster(t, "a", "b")}, Delivered: empty.get})
	if !errors.Is(err, host.ErrProtocol) {
		t.Fatalf("kept in the round that asks for the set whole: %v, want a protocol error", err)
	}
	if len(k.begins) != 3 {
		t.Fatalf("%d updates, want 3: full, the change, the set asked for whole", len(k.begins))
	}
	if b := k.begins[1]; !b.GetKeptAllowed() || len(b.GetResend()) != 0 {
		t.Errorf("the change's Begin: kept allowed %v, resend %v", b.GetKeptAllowed(), b.GetResend())
	}
	if b := k.begins[2]; b.GetKeptAllowed() || !slices.Equal(b.GetResend(), []string{"east"}) {
		t.Errorf("the second round's Begin: kept allowed %v, resend %v; want east whole", b.GetKeptAllowed(), b.GetResend())
	}
}
