package host_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/meshrelay/meshrelay/api/snapshot"
	snapshotv1 "github.com/meshrelay/meshrelay/proto/snapshot/v1"
	translatorv1 "github.com/meshrelay/meshrelay/proto/translator/v1"
	"github.com/meshrelay/meshrelay/sdk"
	"github.com/meshrelay/meshrelay/sdk/protocol/host"
	"google.golang.org/grpc"
)

// everywhere emits a ConfigMap per Service of its target that names the
// Service only: every cluster with the Service gets the same object.
type everywhere struct{}

func (everywhere) Describe() sdk.Description {
	return sdk.Description{Name: "everywhere", Version: "1", Backends: []string{"b"}, OutputKinds: []string{"/ConfigMap"}}
}

func (everywhere) TranslateTarget(_ context.Context, req *sdk.Request, resp *sdk.Response) error {
	for _, s := range req.Target.Services() {
		resp.Emit(map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": s.Name, "namespace": s.Namespace},
			"data": map[string]any{"service": s.Name}})
	}
	return nil
}

// sameNames returns the resources the parts name as sent earlier in the
// answer, as "cluster/name", sorted.
func sameNames(outs []*translatorv1.ClusterOutput) []string {
	var sent []*snapshotv1.Resource
	for _, o := range outs {
		sent = append(sent, o.GetResources()...)
	}
	var out []string
	for _, o := range outs {
		for _, n := range o.GetSame() {
			out = append(out, o.GetCluster()+"/"+sent[n].GetId().GetName())
		}
	}
	slices.Sort(out)
	return out
}

// A resource the answer already sent for another cluster is named, not
// sent again, and the session assembles every set whole from the
// resources it received, holding each body once, with its hash; a later
// update does the same with what changed.
func TestSessionTakesBodiesTheAnswerSentBefore(t *testing.T) {
	_, w, _, translate := openWatched(t, "everywhere", everywhere{})
	check := func(res host.Result, want map[string][]string) {
		t.Helper()
		bodies := map[string][]byte{} // the first body seen of each name
		got := map[string][]string{}
		for _, o := range res.Outputs {
			for _, r := range o.Resources {
				var cm struct {
					Metadata struct{ Name string } `json:"metadata"`
					Data     map[string]string     `json:"data"`
				}
				if err := r.Decode(&cm); err != nil {
					t.Fatal(err)
				}
				if cm.Metadata.Name != r.ID.Name || cm.Data["service"] != r.ID.Name {
					t.Errorf("%s/%s: body %s", o.Cluster, r.ID.Name, r.Body)
				}
				if r.Hash != sha256.Sum256(r.Body) {
					t.Errorf("%s/%s: hash is not its body's", o.Cluster, r.ID.Name)
				}
				if b, ok := bodies[r.ID.Name]; ok && unsafe.SliceData(b) != unsafe.SliceData(r.Body) {
					t.Errorf("%s/%s: the body is held twice", o.Cluster, r.ID.Name)
				}
				bodies[r.ID.Name] = r.Body
				got[o.Cluster] = append(got[o.Cluster], r.ID.Name)
			}
		}
		for c, names := range want {
			if g := got[c]; !slices.Equal(slices.Sorted(slices.Values(g)), names) {
				t.Errorf("cluster %s's set holds %v, want %v", c, g, names)
			}
		}
	}

	// sentOnce checks that the parts sent each body of names once and
	// named it by that body everywhere else, and return what they kept.
	sentOnce := func(parts []*translatorv1.ClusterOutput, names map[string]int) []string {
		t.Helper()
		kept, sent := partNames(parts)
		count := map[string]int{}
		for _, cs := range [][]string{sent, sameNames(parts)} {
			for _, cn := range cs {
				count[cn[strings.Index(cn, "/")+1:]]++
			}
		}
		var sentNames []string
		for _, cn := range sent {
			sentNames = append(sentNames, cn[strings.Index(cn, "/")+1:])
		}
		slices.Sort(sentNames)
		if want := slices.Sorted(maps.Keys(names)); !slices.Equal(sentNames, want) {
			t.Errorf("the answer sent the bodies of %v (%v), want each of %v once", sentNames, sent, want)
		}
		if !maps.Equal(count, names) {
			t.Errorf("the answer sent or named %v, want %v", count, names)
		}
		return kept
	}

	res := translate(host.View{Clusters: map[string]host.Cluster{"east": cluster(t, "a", "b"), "north": cluster(t, "a"), "west": cluster(t, "a", "b")}})
	sentOnce(w.take(), map[string]int{"a": 3, "b": 2})
	check(res, map[string][]string{"east": {"a", "b"}, "north": {"a"}, "west": {"a", "b"}})

	// Every cluster gains Service c: its body is sent once, the rest kept.
	res = translate(host.View{Clusters: map[string]host.Cluster{"east": cluster(t, "a", "b", "c"), "north": cluster(t, "a", "c"), "west": cluster(t, "a", "b", "c")}})
	if kept := sentOnce(w.take(), map[string]int{"c": 3}); !slices.Equal(kept, []string{"east/a", "east/b", "north/a", "west/a", "west/b"}) {
		t.Errorf("the change kept %v", kept)
	}
	check(res, map[string][]string{"east": {"a", "b", "c"}, "north": {"a", "c"}, "west": {"a", "b", "c"}})
}

// answerer answers every update with the output parts it is given.
type answerer struct {
	translatorv1.UnimplementedTranslatorServer
	parts []*translatorv1.ClusterOutput
}

func (a *answerer) Translate(stream grpc.BidiStreamingServer[translatorv1.TranslateRequest, translatorv1.TranslateResponse]) error {
	for {
		req, err := stream.Recv()
		if err != nil {
			return nil
		}
		c := req.GetCommit()
		if c == nil {
			continue
		}
		for _, p := range a.parts {
			if err := stream.Send(&translatorv1.TranslateResponse{Msg: &translatorv1.TranslateResponse_Output{Output: p}}); err != nil {
				return err
			}
		}
		if err := stream.Send(&translatorv1.TranslateResponse{Msg: &translatorv1.TranslateResponse_Done{Done: &translatorv1.Done{Generation: c.GetGeneration()}}}); err != nil {
			return err
		}
	}
}

// A plugin that names a resource the answer did not send, or not yet, or
// names one twice in a set, breaks the protocol, and the session takes
// none of the answer.
func TestSameResourceThatIsNotThereBreaksTheProtocol(t *testing.T) {
	a := &snapshotv1.Resource{Id: &snapshotv1.ResourceID{Version: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "a"},
		Body: []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns"}}`)}
	for _, tc := range []struct {
		name  string
		parts []*translatorv1.ClusterOutput
	}{
		{"a resource not sent", []*translatorv1.ClusterOutput{
			{Cluster: "east", Backend: "b", Resources: []*snapshotv1.Resource{a}},
			{Cluster: "west", Backend: "b", Same: []uint32{1}},
		}},
		{"a resource named before it is sent", []*translatorv1.ClusterOutput{
			{Cluster: "east", Backend: "b", Same: []uint32{0}},
			{Cluster: "west", Backend: "b", Resources: []*snapshotv1.Resource{a}},
		}},
		{"a resource sent and named", []*translatorv1.ClusterOutput{
			{Cluster: "east", Backend: "b", Resources: []*snapshotv1.Resource{a}, Same: []uint32{0}},
		}},
		{"a resource named twice", []*translatorv1.ClusterOutput{
			{Cluster: "east", Backend: "b", Resources: []*snapshotv1.Resource{a}},
			{Cluster: "west", Backend: "b", Same: []uint32{0, 0}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openServed(t, "answerer", &answerer{parts: tc.parts})
			view := host.View{Clusters: map[string]host.Cluster{"east": cluster(t, "a"), "west": cluster(t, "a")}}
			res, err := s.Translate(context.Background(), view)
			if !errors.Is(err, host.ErrProtocol) {
				t.Fatalf("Translate = %v, %v; want a protocol error", res.Outputs, err)
			}
		})
	}

	// The same answer, well formed, is taken.
	s := openServed(t, "answerer", &answerer{parts: []*translatorv1.ClusterOutput{
		{Cluster: "east", Backend: "b", Resources: []*snapshotv1.Resource{a}},
		{Cluster: "west", Backend: "b", Same: []uint32{0}},
	}})
	res, err := s.Translate(context.Background(), host.View{Clusters: map[string]host.Cluster{"east": cluster(t, "a"), "west": cluster(t, "a")}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Outputs) != 2 || !slices.EqualFunc(res.Outputs[0].Resources, res.Outputs[1].Resources, func(x, y snapshot.Resource) bool {
		return x.ID == y.ID && string(x.Body) == string(y.Body) && x.Hash == y.Hash
	}) {
		t.Errorf("outputs %+v, want east's set in west too", res.Outputs)
	}
}
