package host_test

import (
	"context"
	"slices"
	"testing"

	translatorv1 "github.com/meshrelay/meshrelay/proto/translator/v1"
	"github.com/meshrelay/meshrelay/sdk/protocol"
	"github.com/meshrelay/meshrelay/sdk/protocol/host"
	"google.golang.org/grpc"
)

// beginRecorder answers every update with nothing changed, and says it
// takes same_targets when takes is set.
type beginRecorder struct {
	translatorv1.UnimplementedTranslatorServer
	takes  bool
	begins []*translatorv1.Begin
}

func (r *beginRecorder) Translate(stream grpc.BidiStreamingServer[translatorv1.TranslateRequest, translatorv1.TranslateResponse]) error {
	for {
		req, err := stream.Recv()
		if err != nil {
			return nil
		}
		switch m := req.GetMsg().(type) {
		case *translatorv1.TranslateRequest_Begin:
			r.begins = append(r.begins, m.Begin)
		case *translatorv1.TranslateRequest_Commit:
			done := &translatorv1.Done{Generation: m.Commit.GetGeneration(), TakesSameTargets: r.takes}
			if err := stream.Send(&translatorv1.TranslateResponse{Msg: &translatorv1.TranslateResponse_Done{Done: done}}); err != nil {
				return err
			}
		}
	}
}

// The targets are sent again only when they changed, and only to a
// plugin that said it takes same_targets; a full update always sends them.
func TestSessionSendsTheTargetsOnlyWhenTheyChanged(t *testing.T) {
	for _, takes := range []bool{true, false} {
		r := &beginRecorder{takes: takes}
		conn, stop, err := protocol.ServeInMemory("recorder", r)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(stop)
		s, err := host.Open(translatorv1.NewTranslatorClient(conn), "recorder", []string{"b"}, host.DefaultMaxOutputBytes)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		ctx := context.Background()
		views := []host.View{
			{Scoped: true, Targets: []string{"east"}, Clusters: map[string]host.Cluster{"east": cluster(t, "a"), "west": cluster(t, "b")}},
			{Scoped: true, Targets: []string{"east"}, Clusters: map[string]host.Cluster{"east": cluster(t, "a", "c"), "west": cluster(t, "b")}},
			{Scoped: true, Targets: []string{"east", "west"}, Clusters: map[string]host.Cluster{"east": cluster(t, "a", "c"), "west": cluster(t, "b")}},
			{Scoped: true, Targets: []string{"east", "west"}, Clusters: map[string]host.Cluster{"east": cluster(t, "a", "c"), "west": cluster(t, "b", "d")}},
		}
		for _, v := range views {
			if _, err := s.Translate(ctx, v); err != nil {
				t.Fatal(err)
			}
		}
		type begin struct {
			targets []string
			same    bool
		}
		want := []begin{{[]string{"east"}, false}, {nil, true}, {[]string{"east", "west"}, false}, {nil, true}}
		if !takes {
			want = []begin{{[]string{"east"}, false}, {[]string{"east"}, false}, {[]string{"east", "west"}, false}, {[]string{"east", "west"}, false}}
		}
		var got []begin
		for _, b := range r.begins {
			got = append(got, begin{b.GetTargets(), b.GetSameTargets()})
		}
		if !slices.EqualFunc(got, want, func(a, b begin) bool { return a.same == b.same && slices.Equal(a.targets, b.targets) }) {
			t.Errorf("a plugin that takes same_targets: %v; the Begins were %+v, want %+v", takes, got, want)
		}
	}
}
