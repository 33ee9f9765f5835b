package server

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/meshrelay/meshrelay/core/snapshot"
	"github.com/meshrelay/meshrelay/core/store/memory"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	snapshotv1 "github.com/meshrelay/meshrelay/proto/snapshot/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// fakeStream feeds recorded agent messages to a stream's receive loop.
type fakeStream struct {
	grpc.ServerStream
	ctx  context.Context
	msgs []*relayv1.AgentMessage
}

func (f *fakeStream) Context() context.Context          { return f.ctx }
func (f *fakeStream) Send(*relayv1.ServerMessage) error { return nil }
func (f *fakeStream) Recv() (*relayv1.AgentMessage, error) {
	if len(f.msgs) == 0 {
		return nil, io.EOF
	}
	m := f.msgs[0]
	f.msgs = f.msgs[1:]
	return m, nil
}

// FuzzAgentMessages feeds arbitrary agent messages to the server's handling
// of a stream: nothing may panic, and whatever the server accepts as the
// cluster's input must be a consistent snapshot.
func FuzzAgentMessages(f *testing.F) {
	svc, _ := snapshot.NewResource(snapshot.ID{Version: "v1", Kind: "Service", Namespace: "ns", Name: "a"}, []byte(`{"spec":{}}`))
	full, _ := snapshot.New(1, []snapshot.Resource{svc})
	seed := func(ms ...*relayv1.AgentMessage) {
		var data [][]byte
		for _, m := range ms {
			b, err := proto.Marshal(m)
			if err != nil {
				f.Fatal(err)
			}
			data = append(data, b)
		}
		for len(data) < 2 {
			data = append(data, nil)
		}
		f.Add(data[0], data[1])
	}
	input := func(d *snapshotv1.Delta) *relayv1.AgentMessage {
		return &relayv1.AgentMessage{Msg: &relayv1.AgentMessage_Input{Input: &relayv1.InputSnapshot{Delta: d}}}
	}
	seed(input(snapshot.DeltaToProto(snapshot.FullDelta(full), false)))
	seed(input(snapshot.DeltaToProto(snapshot.FullDelta(full), true)), input(snapshot.DeltaToProto(snapshot.Delta{BaseVersion: 1, Version: 2}, false)))
	seed(&relayv1.AgentMessage{Msg: &relayv1.AgentMessage_Ack{Ack: &relayv1.Ack{Subject: relayv1.Ack_SUBJECT_OUTPUT, Backend: "test", Version: 3, Nack: true}}})
	seed(&relayv1.AgentMessage{Msg: &relayv1.AgentMessage_Hello{Hello: &relayv1.Hello{Cluster: "west"}}})

	opts := DefaultOptions()
	opts.ListenAddr, opts.AdminAddr, opts.DataDir = "127.0.0.1:0", "", f.TempDir()
	s, err := New(context.Background(), opts, Deps{Store: memory.New()})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(s.Stop)

	f.Fuzz(func(t *testing.T, a, b []byte) {
		var msgs []*relayv1.AgentMessage
		for _, data := range [][]byte{a, b} {
			m := &relayv1.AgentMessage{}
			if proto.Unmarshal(data, m) == nil {
				msgs = append(msgs, m)
			}
		}
		ctx, cancel := context.WithCancelCause(context.Background())
		defer cancel(nil)
		st := &stream{
			s: s, cluster: "east", log: slog.New(slog.DiscardHandler), srv: &fakeStream{ctx: ctx, msgs: msgs},
			cancel: cancel, wake: make(chan struct{}, 1), ctrl: make(chan *relayv1.ServerMessage, 64), sent: map[string]sent{},
		}
		_ = st.recvLoop(ctx)
		s.mu.Lock()
		in, ok := s.inputs["east"]
		delete(s.inputs, "east")
		s.mu.Unlock()
		if !ok {
			return
		}
		again, err := snapshot.New(in.snap.Version(), in.snap.Resources())
		if err != nil || again.Hash() != in.snap.Hash() {
			t.Fatalf("accepted input is inconsistent: %v", err)
		}
	})
}
