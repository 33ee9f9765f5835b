package agent

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/meshrelay/meshrelay/api/snapshot"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	snapshotv1 "github.com/meshrelay/meshrelay/proto/snapshot/v1"
)

type fixedSink struct {
	results map[snapshot.ID]error
	err     error
	calls   int
}

func (f *fixedSink) Apply(context.Context, string, *snapshot.Snapshot, bool) (map[snapshot.ID]error, error) {
	f.calls++
	return f.results, f.err
}

func TestSinksApplyEverywhereAndMerge(t *testing.T) {
	a := snapshot.ID{Version: "v1", Kind: "Service", Name: "a"}
	b := snapshot.ID{Version: "v1", Kind: "Service", Name: "b"}
	first := &fixedSink{results: map[snapshot.ID]error{a: errors.New("first")}}
	second := &fixedSink{results: map[snapshot.ID]error{a: errors.New("second"), b: errors.New("b failed")}, err: errors.New("second sink down")}
	res, err := Sinks{first, second}.Apply(context.Background(), "envoy", snapshot.Empty, true)
	if first.calls != 1 || second.calls != 1 {
		t.Fatalf("Sinks called the sinks %d and %d times, want once each", first.calls, second.calls)
	}
	if err == nil || res[a].Error() != "first" || res[b] == nil {
		t.Errorf("Sinks = %v, %v; want the first error per resource and the sink error", res, err)
	}
}

func TestServerAddressesRotate(t *testing.T) {
	a := &Agent{opts: Options{Server: "r1:9900, r2:9900"}}
	got := []string{a.target()}
	a.attempt.Add(1)
	got = append(got, a.target())
	a.attempt.Add(1)
	got = append(got, a.target())
	want := []string{"r1:9900", "r2:9900", "r1:9900"}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("targets = %v, want %v", got, want)
		}
	}
	if a.serverName() != "r1" {
		t.Errorf("serverName = %q, want r1", a.serverName())
	}
}

func TestOptionsValidate(t *testing.T) {
	tests := map[string]func(*Options){
		"bad cluster":          func(o *Options) { o.Cluster = "Not_Valid" },
		"no server":            func(o *Options) { o.Server = "" },
		"bad mode":             func(o *Options) { o.Mode = "plain" },
		"a negative heartbeat": func(o *Options) { o.Heartbeat = -time.Second },
		"insecure to a remote server": func(o *Options) {
			o.Insecure, o.Server = true, "meshrelay.example.com:9900"
		},
	}
	for name, mod := range tests {
		t.Run(name, func(t *testing.T) {
			o := DefaultOptions()
			o.Cluster, o.CAFile = "east", "ca.crt"
			mod(&o)
			if err := o.Validate(); err == nil {
				t.Errorf("Validate() = nil, want an error")
			}
		})
	}
	o := DefaultOptions()
	o.Cluster, o.CAFile = "east", "ca.crt"
	if err := o.Validate(); err != nil {
		t.Errorf("Validate(defaults) = %v", err)
	}
}

// TestSessionEndsWhenServerSilent dials a server that accepts connections
// and never answers, as a paused (SIGSTOP) replica does: the session must
// end with errServerSilent after ServerTimeout instead of waiting forever.
func TestSessionEndsWhenServerSilent(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	accepted := make(chan net.Conn, 16)
	defer func() {
		lis.Close()
		for c := range accepted {
			c.Close()
		}
	}()
	go func() {
		defer close(accepted)
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			accepted <- c // read nothing, write nothing
		}
	}()
	opts := DefaultOptions()
	opts.Cluster, opts.Server, opts.Insecure = "east", lis.Addr().String(), true
	opts.StateDir, opts.ServerTimeout = t.TempDir(), 300*time.Millisecond
	a, err := New(opts, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := a.session(ctx); !errors.Is(err, errServerSilent) {
		t.Fatalf("session against a silent server = %v, want %v", err, errServerSilent)
	}
	if ctx.Err() != nil {
		t.Fatal("the session outlived the test's own 30s bound")
	}
}

// TestJitterSpreadsReconnects checks that reconnect waits fall between half
// the backoff and the backoff, and differ.
func TestJitterSpreadsReconnects(t *testing.T) {
	const backoff = time.Second
	seen := map[time.Duration]bool{}
	for range 100 {
		d := jitter(backoff)
		if d < backoff/2 || d > backoff {
			t.Fatalf("jitter(%s) = %s, want within [%s, %s]", backoff, d, backoff/2, backoff)
		}
		seen[d] = true
	}
	if len(seen) < 50 {
		t.Fatalf("100 waits took only %d values", len(seen))
	}
}

// A session that keeps hearing from its server outlives many server
// timeouts, although a message only records when it came and the timer
// looks at that when it fires; once the server falls silent, the session
// ends with errServerSilent.
func TestSilenceFollowsTheLastMessage(t *testing.T) {
	const timeout = 100 * time.Millisecond
	ended := make(chan error, 1)
	quiet := watchSilence(timeout, func(err error) {
		select {
		case ended <- err:
		default:
		}
	})
	defer quiet.stop()
	tick := time.NewTicker(timeout / 5)
	defer tick.Stop()
	for range 50 { // ten timeouts of messages
		<-tick.C
		quiet.heard()
		select {
		case err := <-ended:
			t.Fatalf("the session ended while its server talked: %v", err)
		default:
		}
	}
	tick.Stop()
	select {
	case err := <-ended:
		if !errors.Is(err, errServerSilent) {
			t.Fatalf("the session ended with %v, want %v", err, errServerSilent)
		}
	case <-time.After(time.Minute):
		t.Fatal("the session outlived its server's silence")
	}
}

// scriptedStream is the client side of a Sync stream that receives msgs,
// then the end of the stream.
type scriptedStream struct {
	relayv1.Relay_SyncClient
	msgs []*relayv1.ServerMessage
}

func (s *scriptedStream) Recv() (*relayv1.ServerMessage, error) {
	if len(s.msgs) == 0 {
		return nil, io.EOF
	}
	m := s.msgs[0]
	s.msgs = s.msgs[1:]
	return m, nil
}

// TestReceiverEndsWithItsSessionOnAFullQueue: a nack of an input or of an
// output queues a message for the session's sender. Once the sender has
// stopped (its stream failed) and the queue is full, the receiver must
// still end with the session, or the agent never reconnects.
func TestReceiverEndsWithItsSessionOnAFullQueue(t *testing.T) {
	for name, msg := range map[string]*relayv1.ServerMessage{
		"input nack": {Msg: &relayv1.ServerMessage_Ack{Ack: &relayv1.Ack{Subject: relayv1.Ack_SUBJECT_INPUT, Version: 3, Nack: true}}},
		"malformed output": {Msg: &relayv1.ServerMessage_Output{Output: &relayv1.OutputSnapshot{
			Backend: "istio", Delta: &snapshotv1.Delta{Version: 2, Hash: []byte{1, 2, 3}}, // not a hash
		}}},
	} {
		t.Run(name, func(t *testing.T) {
			opts := DefaultOptions()
			opts.Cluster, opts.Server, opts.Insecure, opts.StateDir = "east", "127.0.0.1:1", true, t.TempDir()
			a, err := New(opts, nil, nil, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(t.Context())
			cancel()                                  // the session ended: its sender reads the queue no more
			queue := make(chan *relayv1.AgentMessage) // and it is full
			done := make(chan error, 1)
			go func() {
				done <- a.recvLoop(ctx, &scriptedStream{msgs: []*relayv1.ServerMessage{msg}}, &inputSender{a: a}, queue)
			}()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("the receiver still waits to queue a nack 30s after its session ended")
			}
		})
	}
}
