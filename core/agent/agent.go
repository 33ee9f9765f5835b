package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/pki"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Source discovers a cluster's inputs and publishes a complete, immutable
// snapshot each time meaning changes. Run returns when ctx ends.
type Source interface {
	Run(ctx context.Context, publish func(*snapshot.Snapshot)) error
}

// Sink makes one backend's desired resources real. prune false forbids
// deleting anything. It returns per-resource errors (absent resources
// succeeded) and an error only when nothing could be attempted.
type Sink interface {
	Apply(ctx context.Context, backend string, desired *snapshot.Snapshot, prune bool) (map[snapshot.ID]error, error)
}

// ErrDeregistered is returned by Run when the server says the cluster was
// deregistered: the agent must not reconnect.
var ErrDeregistered = errors.New("cluster was deregistered")

// Stats count what the agent sent, for tests and benchmarks.
type Stats struct {
	InputMessages atomic.Int64
	InputBytes    atomic.Int64
	FullInputs    atomic.Int64
	OutputsRecv   atomic.Int64
	Connects      atomic.Int64
	// TrafficBytes counts the bytes of the traffic windows queued.
	TrafficBytes atomic.Int64
}

// Agent relays one cluster.
type Agent struct {
	opts   Options
	log    *slog.Logger
	source Source
	sinks  Sinks
	creds  credentialSet

	// Stats are the agent's counters.
	Stats Stats

	inputs  chan struct{} // wakes the sender when the source publishes
	attempt atomic.Int64  // picks the server address to dial

	mu       sync.Mutex
	current  *snapshot.Snapshot // latest discovered, with the agent's version
	acked    *snapshot.Snapshot // last input the server acked
	nextVer  uint64
	appliers map[string]*applier
	received map[string]*snapshot.Snapshot // outputs as received, by backend
	kinds    map[string][]string           // declared output kinds, by backend
	queue    chan<- *relayv1.AgentMessage  // the current stream's send queue

	// inputKinds are the kinds the source discovers, from the last
	// Welcome or the state directory; nil until known.
	inputKinds []string
}

// New returns an agent applying every backend's outputs to sinks, each
// sink the resources of the API groups it takes (see [Sinks]).
func New(opts Options, source Source, sinks Sinks, logger *slog.Logger) (*Agent, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if opts.MaxMessageBytes <= 0 {
		opts.MaxMessageBytes = 16 << 20
	}
	if opts.ReconnectMax <= 0 {
		opts.ReconnectMax = 30 * time.Second
	}
	if opts.ServerTimeout <= 0 {
		opts.ServerTimeout = DefaultOptions().ServerTimeout
	}
	return &Agent{
		opts:     opts,
		log:      logger.With("cluster", opts.Cluster),
		source:   source,
		sinks:    sinks,
		inputs:   make(chan struct{}, 1),
		nextVer:  uint64(time.Now().UnixMicro()),
		appliers: map[string]*applier{},
		received: map[string]*snapshot.Snapshot{},
		kinds:    map[string][]string{},
	}, nil
}

// Run discovers, relays and applies until ctx ends or the cluster is deregistered.
func (a *Agent) Run(ctx context.Context) error {
	if err := a.ensureCredentials(ctx); err != nil {
		return err
	}
	a.loadKinds()
	a.loadInputKinds()
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return a.source.Run(ctx, a.publish) })
	g.Go(func() error { return a.renewLoop(ctx) })
	g.Go(func() error { return a.relayLoop(ctx) })
	err := g.Wait()
	a.mu.Lock()
	for _, ap := range a.appliers {
		ap.stop()
	}
	a.mu.Unlock()
	return err
}

// publish takes a new snapshot from the source.
func (a *Agent) publish(s *snapshot.Snapshot) {
	a.mu.Lock()
	if a.current != nil && a.current.Hash() == s.Hash() {
		a.mu.Unlock()
		return
	}
	a.nextVer++
	a.current = s.WithVersion(a.nextVer)
	a.mu.Unlock()
	select {
	case a.inputs <- struct{}{}:
	default:
	}
}

// relayLoop keeps a stream to the server open, reconnecting with backoff.
func (a *Agent) relayLoop(ctx context.Context) error {
	backoff := 100 * time.Millisecond
	for {
		start := time.Now()
		err := a.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, ErrDeregistered) {
			return err
		}
		if time.Since(start) > time.Minute {
			backoff = 100 * time.Millisecond
		}
		a.attempt.Add(1)
		wait := jitter(backoff)
		a.log.Warn("relay stream ended; reconnecting", "error", err, "retry_in", wait, "next", a.target())
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		backoff = min(backoff*2, a.opts.ReconnectMax)
	}
}

// jitter returns a random wait between half of backoff and backoff, so
// that the agents of a server that died do not all come back at once.
func jitter(backoff time.Duration) time.Duration {
	return backoff/2 + rand.N(backoff/2+1)
}

// errServerSilent ends a session whose server sent nothing, not even a
// heartbeat, for Options.ServerTimeout.
var errServerSilent = errors.New("server silent")

// silence ends a session with errServerSilent when the server sends
// nothing for Options.ServerTimeout. A message received only records when
// it came (heard); the timer, set for the timeout, looks at that when it
// fires and sets itself again for the rest, so a message wakes nothing.
type silence struct {
	timeout time.Duration
	start   time.Time
	end     context.CancelCauseFunc
	// last is when the last message came, since start.
	last atomic.Int64

	mu      sync.Mutex
	timer   *time.Timer
	stopped bool
}

// watchSilence starts watching a session for silence; stop ends it.
func watchSilence(timeout time.Duration, end context.CancelCauseFunc) *silence {
	s := &silence{timeout: timeout, start: time.Now(), end: end}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.timer = time.AfterFunc(timeout, s.check)
	return s
}

func (s *silence) heard() { s.last.Store(int64(time.Since(s.start))) }

func (s *silence) check() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	if quiet := time.Since(s.start) - time.Duration(s.last.Load()); quiet < s.timeout {
		s.timer.Reset(s.timeout - quiet)
		return
	}
	s.end(fmt.Errorf("%w for %s", errServerSilent, s.timeout))
}

func (s *silence) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	s.timer.Stop()
}

// heardStream notes each message received on a stream in quiet.
type heardStream struct {
	relayv1.Relay_SyncClient
	quiet *silence
}

func (s heardStream) Recv() (*relayv1.ServerMessage, error) {
	m, err := s.Relay_SyncClient.Recv()
	if err == nil {
		s.quiet.heard()
	}
	return m, err
}

// session runs one Sync stream.
func (a *Agent) session(ctx context.Context) error {
	conn, err := a.dial(a.opts.Mode == pki.ModeMTLS)
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	quiet := watchSilence(a.opts.ServerTimeout, cancel)
	defer quiet.stop()
	md := []string{"x-meshrelay-cluster", a.opts.Cluster}
	if a.opts.Mode == pki.ModeTLS || a.opts.Insecure {
		// The token in the headers lets the server authenticate the stream
		// before it reads the Hello.
		if tok, err := a.token(); err == nil {
			md = append(md, "x-meshrelay-token", tok)
		}
	}
	raw, err := relayv1.NewRelayClient(conn).Sync(metadata.AppendToOutgoingContext(ctx, md...))
	if err != nil {
		return fmt.Errorf("open stream: %w", silentOr(ctx, err))
	}
	stream := heardStream{Relay_SyncClient: raw, quiet: quiet}
	if err := stream.Send(a.hello()); err != nil {
		return fmt.Errorf("send hello: %w", silentOr(ctx, err))
	}
	first, err := stream.Recv()
	if err != nil {
		return fmt.Errorf("wait for welcome: %w", silentOr(ctx, err))
	}
	welcome := first.GetWelcome()
	if welcome == nil {
		return errors.New("server did not answer the hello with a welcome")
	}
	a.Stats.Connects.Add(1)
	a.log.Info("connected", "server", welcome.GetServerId())
	a.declareInputKinds(welcome.GetInputKinds(), true)

	sender := &inputSender{a: a, stream: stream, maxBytes: a.opts.MaxMessageBytes / 2}
	sender.resume(welcome)

	sendCh := make(chan *relayv1.AgentMessage, 64)
	a.mu.Lock()
	a.queue = sendCh
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		a.queue = nil
		a.mu.Unlock()
	}()
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return a.sendLoop(gctx, stream, sender, sendCh) })
	g.Go(func() error {
		err := a.recvLoop(gctx, stream, sender, sendCh)
		cancel(err)
		return err
	})
	return silentOr(ctx, g.Wait())
}

// silentOr returns the session's errServerSilent when that is what ended
// it, and err otherwise.
func silentOr(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); errors.Is(cause, errServerSilent) {
		return cause
	}
	return err
}

func (a *Agent) hello() *relayv1.AgentMessage {
	a.mu.Lock()
	defer a.mu.Unlock()
	h := &relayv1.Hello{
		Cluster:        a.opts.Cluster,
		AgentVersion:   a.opts.Version,
		Capabilities:   []string{"delta"},
		OutputVersions: map[string]uint64{},
		OutputHashes:   map[string][]byte{},
		ServerTimeout:  durationpb.New(a.opts.ServerTimeout),
	}
	if a.opts.Mode == pki.ModeTLS || a.opts.Insecure {
		h.Token, _ = a.token()
	}
	if a.acked != nil {
		hash := a.acked.Hash()
		h.InputVersion, h.InputHash = a.acked.Version(), hash[:]
	}
	for b, s := range a.received {
		hash := s.Hash()
		h.OutputVersions[b], h.OutputHashes[b] = s.Version(), hash[:]
	}
	return &relayv1.AgentMessage{Msg: &relayv1.AgentMessage_Hello{Hello: h}}
}

// inputSender tracks what the server holds of this cluster's inputs.
type inputSender struct {
	a        *Agent
	stream   relayv1.Relay_SyncClient
	maxBytes int
	base     *snapshot.Snapshot // what the server will hold once it applies what was sent
	// full is the snapshot last sent whole, for the resend after a nack:
	// the server refused it whole, so sending it again is refused again.
	full *snapshot.Snapshot
}

// resume picks the base the server holds: a snapshot the agent still has
// with the server's hash, or nothing (a full send).
func (s *inputSender) resume(w *relayv1.Welcome) {
	s.a.mu.Lock()
	defer s.a.mu.Unlock()
	// The store keeps the input with the highest version, so every input
	// this stream sends, whole or as a delta, is numbered above the one
	// the server holds: a restarted agent, or one whose earlier inputs
	// were numbered from another replica's version, may be below it.
	if held := w.GetInputVersion(); s.a.nextVer <= held {
		s.a.nextVer = held
		if s.a.current != nil && s.a.current.Version() <= held {
			s.a.nextVer++
			s.a.current = s.a.current.WithVersion(s.a.nextVer)
		}
	}
	want, _ := snapshot.HashFromBytes(w.GetInputHash())
	for _, cand := range []*snapshot.Snapshot{s.a.acked, s.a.current} {
		if cand != nil && !want.IsZero() && cand.Hash() == want {
			s.base = cand.WithVersion(w.GetInputVersion())
			return
		}
	}
	s.base = nil
}

// next returns the message that brings the server to the current snapshot,
// or nil when it is there already.
func (s *inputSender) next(force bool) []*relayv1.AgentMessage {
	s.a.mu.Lock()
	cur := s.a.current
	s.a.mu.Unlock()
	if cur == nil {
		return nil
	}
	if s.base != nil && s.base.Hash() == cur.Hash() && !force {
		return nil
	}
	var d snapshot.Delta
	if s.base == nil {
		d = snapshot.FullDelta(cur)
		s.a.Stats.FullInputs.Add(1)
		s.full = cur
	} else {
		if cur.Version() <= s.base.Version() {
			cur = cur.WithVersion(s.base.Version() + 1)
		}
		d = snapshot.Diff(s.base, cur)
	}
	// recvLoop reads base under a.mu to match acks.
	s.a.mu.Lock()
	s.base = cur
	s.a.mu.Unlock()
	parts := snapshot.Split(d, s.maxBytes)
	msgs := make([]*relayv1.AgentMessage, len(parts))
	for i, p := range parts {
		msgs[i] = &relayv1.AgentMessage{Msg: &relayv1.AgentMessage_Input{Input: &relayv1.InputSnapshot{
			Delta: snapshot.DeltaToProto(p, i < len(parts)-1),
		}}}
	}
	return msgs
}

// refusedWhole reports whether the snapshot the server refused was the
// current one, sent whole.
func (s *inputSender) refusedWhole() bool {
	s.a.mu.Lock()
	cur := s.a.current
	s.a.mu.Unlock()
	return s.full != nil && cur != nil && s.base != nil && s.base.Hash() == cur.Hash() && s.full.Hash() == cur.Hash()
}

// sendLoop is the stream's only sender: inputs, acks, and heartbeats when
// Options.Heartbeat asks for them.
func (a *Agent) sendLoop(ctx context.Context, stream relayv1.Relay_SyncClient, sender *inputSender, queued <-chan *relayv1.AgentMessage) error {
	var beat <-chan time.Time // nil without Options.Heartbeat: no heartbeat
	if a.opts.Heartbeat > 0 {
		hb := time.NewTicker(a.opts.Heartbeat)
		defer hb.Stop()
		beat = hb.C
	}
	send := func(m *relayv1.AgentMessage) error {
		if in := m.GetInput(); in != nil {
			a.Stats.InputMessages.Add(1)
			a.Stats.InputBytes.Add(int64(proto.Size(m)))
		}
		return stream.Send(m)
	}
	// First, bring the server up to date: a delta from what it holds (even
	// an empty one confirms the input is fresh), or everything.
	for _, m := range sender.next(true) {
		if err := send(m); err != nil {
			return err
		}
	}
	for {
		select {
		case <-ctx.Done():
			_ = stream.CloseSend()
			return nil
		case <-a.inputs:
			for _, m := range sender.next(false) {
				if err := send(m); err != nil {
					return err
				}
			}
		case m := <-queued:
			if m.GetInput() != nil { // a resend after a nack
				if sender.refusedWhole() {
					// The server refused this very snapshot sent whole: it
					// would refuse it again. Its next change is sent whole.
					a.log.Warn("server refused the whole input; waiting for it to change before sending again")
					sender.base = nil
					continue
				}
				sender.base = nil
				for _, m := range sender.next(true) {
					if err := send(m); err != nil {
						return err
					}
				}
				continue
			}
			if err := send(m); err != nil {
				return err
			}
		case <-beat:
			if err := send(&relayv1.AgentMessage{Msg: &relayv1.AgentMessage_Heartbeat{Heartbeat: &relayv1.Heartbeat{Time: timestamppb.Now()}}}); err != nil {
				return err
			}
		}
	}
}

// resendInput asks the sender for a full input.
var resendInput = &relayv1.AgentMessage{Msg: &relayv1.AgentMessage_Input{Input: &relayv1.InputSnapshot{}}}

// recvLoop handles the server's messages.
func (a *Agent) recvLoop(ctx context.Context, stream relayv1.Relay_SyncClient, sender *inputSender, queue chan<- *relayv1.AgentMessage) error {
	assemblers := map[string]*snapshot.Assembler{}
	for {
		msg, err := stream.Recv()
		if err != nil {
			return err
		}
		switch m := msg.Msg.(type) {
		case *relayv1.ServerMessage_Ack:
			ack := m.Ack
			if ack.GetSubject() != relayv1.Ack_SUBJECT_INPUT {
				continue
			}
			if ack.GetNack() {
				a.log.Warn("server refused input; sending in full", "version", ack.GetVersion(), "error", ack.GetError())
				if !enqueue(ctx, queue, resendInput) {
					return ctx.Err()
				}
				continue
			}
			a.mu.Lock()
			if sender.base != nil && sender.base.Version() == ack.GetVersion() {
				a.acked = sender.base
			}
			a.mu.Unlock()
		case *relayv1.ServerMessage_Output:
			a.Stats.OutputsRecv.Add(1)
			a.handleOutput(ctx, m.Output, assemblers, queue)
		case *relayv1.ServerMessage_Heartbeat:
		case *relayv1.ServerMessage_Goodbye:
			a.log.Info("server said goodbye", "reason", m.Goodbye.GetReason(), "message", m.Goodbye.GetMessage())
			if m.Goodbye.GetReason() == relayv1.Goodbye_REASON_DEREGISTERED {
				return ErrDeregistered
			}
			return fmt.Errorf("server said goodbye: %s", m.Goodbye.GetMessage())
		case *relayv1.ServerMessage_Welcome:
			return errors.New("a second welcome on the stream")
		}
	}
}

// enqueue hands m to the session's sender, unless the session ends
// first: its sender may have stopped reading the queue (its stream
// failed), and a full queue must not keep the receiver, and with it the
// session, from ending. It reports whether m was queued.
func enqueue(ctx context.Context, queue chan<- *relayv1.AgentMessage, m *relayv1.AgentMessage) bool {
	select {
	case queue <- m:
		return true
	case <-ctx.Done():
		return false
	}
}

// handleOutput assembles and applies an output delta to the backend's
// snapshot, then hands the result to the backend's applier. A delta that
// does not apply is nacked so the server resends in full.
func (a *Agent) handleOutput(ctx context.Context, out *relayv1.OutputSnapshot, assemblers map[string]*snapshot.Assembler, queue chan<- *relayv1.AgentMessage) {
	backend := out.GetBackend()
	nack := func(version uint64, err error) {
		a.log.Warn("output refused; asking for a full resend", "backend", backend, "version", version, "error", err)
		enqueue(ctx, queue, &relayv1.AgentMessage{Msg: &relayv1.AgentMessage_Ack{Ack: &relayv1.Ack{
			Subject: relayv1.Ack_SUBJECT_OUTPUT, Backend: backend, Version: version, Nack: true, Error: err.Error(),
		}}})
	}
	part, err := snapshot.DeltaFromProto(out.GetDelta())
	if err != nil {
		nack(out.GetDelta().GetVersion(), err)
		return
	}
	asm := assemblers[backend]
	if asm == nil {
		asm = &snapshot.Assembler{}
		assemblers[backend] = asm
	}
	d, complete, err := asm.Add(part, !out.GetDelta().GetMore())
	if err != nil {
		nack(part.Version, err)
		return
	}
	if !complete {
		return
	}
	// The kinds ride on the last part; they hold even if the delta fails.
	a.declareKinds(backend, out.GetOutputKinds(), true)
	a.mu.Lock()
	base := a.received[backend]
	a.mu.Unlock()
	next, err := snapshot.ApplyOwned(base, d)
	if err != nil {
		nack(d.Version, err)
		return
	}
	a.mu.Lock()
	a.received[backend] = next
	ap := a.appliers[backend]
	if ap == nil {
		ap = a.newApplier(ctx, backend)
		a.appliers[backend] = ap
	}
	a.mu.Unlock()
	ap.offer(next, out.GetPruneAllowed(), queue)
}

// Received returns the last output received for a backend.
func (a *Agent) Received(backend string) (*snapshot.Snapshot, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s, ok := a.received[backend]
	return s, ok
}
