package sdk

import (
	"errors"
	"io"
	"runtime/metrics"
	"testing"

	snapshotv1 "github.com/meshrelay/meshrelay/proto/snapshot/v1"
	translatorv1 "github.com/meshrelay/meshrelay/proto/translator/v1"
	"github.com/meshrelay/meshrelay/sdk/protocol"
)

// forcedCollections returns how many garbage collections the process
// forced so far (runtime.GC, debug.FreeOSMemory).
func forcedCollections() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/forced:gc-cycles"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// A plugin process whose session ends (the host dropped a revision at the
// end of a staged rollout) hands the session's memory back before the
// stream ends, instead of keeping it until a collection minutes later.
func TestServerFreesAnEndedSessionsMemory(t *testing.T) {
	f := &fake{}
	srv := newServer(f, f.Describe())
	srv.ownProcess = true
	conn, stop, err := protocol.ServeInMemory("fake", srv)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	stream, err := translatorv1.NewTranslatorClient(conn).Translate(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// A full update, whose end frees its peak, then an incremental one:
	// once the second is done, the first one's collection is over.
	for _, m := range []*translatorv1.TranslateRequest{
		{Msg: &translatorv1.TranslateRequest_Begin{Begin: &translatorv1.Begin{Generation: 1, Full: true}}},
		{Msg: &translatorv1.TranslateRequest_Cluster{Cluster: &translatorv1.ClusterInput{Cluster: "east", Upserts: []*snapshotv1.Resource{svcRes("ns", "a", 1<<20)}}}},
		{Msg: &translatorv1.TranslateRequest_Commit{Commit: &translatorv1.Commit{Generation: 1}}},
		{Msg: &translatorv1.TranslateRequest_Begin{Begin: &translatorv1.Begin{Generation: 2}}},
		{Msg: &translatorv1.TranslateRequest_Cluster{Cluster: &translatorv1.ClusterInput{Cluster: "east", Upserts: []*snapshotv1.Resource{svcRes("ns", "b", 1)}}}},
		{Msg: &translatorv1.TranslateRequest_Commit{Commit: &translatorv1.Commit{Generation: 2}}},
	} {
		if err := stream.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("no Done for the second update: %v", err)
		}
		if resp.GetDone().GetGeneration() == 2 {
			break
		}
	}
	before := forcedCollections()
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("the session ended with %v, want EOF", err)
	}
	if after := forcedCollections(); after == before {
		t.Errorf("no collection forced when the session ended (%d before and after), want its memory handed back", before)
	}
}
