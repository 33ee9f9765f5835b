package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/engine"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

type relay struct {
	relayv1.UnimplementedRelayServer
	s *Server
}

// sent is what a stream last sent of one backend's output. Versions are
// local to the stream: they continue from what the agent reported in its
// Hello, so deltas apply on top of what the agent holds.
type sent struct {
	snap  *snapshot.Snapshot
	prune bool
	// kinds are the output kinds last sent for the backend.
	kinds []string
}

// stream is one agent's Sync stream on this replica.
type stream struct {
	s       *Server
	cluster string
	log     *slog.Logger
	srv     relayv1.Relay_SyncServer
	cancel  context.CancelCauseFunc
	wake    chan struct{}
	ctrl    chan *relayv1.ServerMessage
	// started is when the stream was accepted: rebalancing moves only
	// agents that have settled.
	started time.Time
	// heartbeat is how often the stream heartbeats (StreamHeartbeat);
	// the replica's heartbeats offers each heartbeat on beat.
	heartbeat time.Duration
	beat      chan *relayv1.ServerMessage
	// cert is the client certificate the stream authenticated with under
	// mTLS, checked against the registry with every last-seen write
	// (touchLastSeen); zero otherwise.
	cert identity
	// awaiting is true while the stream's cluster waits to become a
	// target of this replica's engine until the agent's input is taken
	// (see Server.attach). Guarded by the server's mu.
	awaiting bool

	// refused is the input version last refused: while refusing, its
	// remaining parts are dropped unread. Only recvLoop uses it.
	refused  uint64
	refusing bool

	mu sync.Mutex
	// want are the outputs to send, by backend: at attach those stored
	// that the engine handed on last or that the agent holds (start),
	// then each one delivery hands on (offer).
	want map[string]*snapshot.Snapshot
	sent map[string]sent
	// held are the outputs the agent said it holds when it connected, by
	// backend: an output computed later with the same hash is resumed,
	// not resent.
	held map[string]heldOutput
}

// heldOutput is an output an agent holds: its hash and version.
type heldOutput struct {
	hash    []byte
	version uint64
}

// Sync serves one agent's stream.
func (r *relay) Sync(srv relayv1.Relay_SyncServer) error {
	s := r.s
	// Under mTLS the caller is known from its certificate before anything
	// is read from the stream; otherwise from the token in its headers.
	// Streams that authenticate only in their Hello (older agents in
	// --mode tls) are read with the small limits of a connection that is
	// not authenticated, and few at a time per address.
	var id identity
	if s.authMode() == ModeMTLS {
		var err error
		if id, err = s.peerCluster(srv.Context()); err != nil {
			return err
		}
	} else if cluster, tok, ok := streamToken(srv.Context()); ok {
		if _, _, err := s.checkToken(srv.Context(), cluster, tok); err != nil {
			return s.refuseToken(peerHost(srv.Context()), cluster, err)
		}
		if err := s.verifyConn(srv.Context(), cluster); err != nil {
			return err
		}
		id.cluster = cluster
	}
	release, err := s.helloSlot(srv.Context(), id.cluster)
	if err != nil {
		return err
	}
	first, err := waitHello(srv.Context(), s.opts.HelloTimeout, srv.Recv)
	release()
	if err != nil {
		return err
	}
	hello := first.GetHello()
	if hello == nil {
		return status.Error(codes.InvalidArgument, "the first message on a stream must be a Hello")
	}
	cluster, err := s.authorizeStream(srv.Context(), hello, id)
	if err != nil {
		return err
	}
	if id.cluster == "" && s.authMode() != ModeMTLS {
		if err := s.verifyConn(srv.Context(), cluster); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithCancelCause(srv.Context())
	defer cancel(nil)
	st := &stream{
		s:       s,
		started: time.Now(),
		cert:    id,
		cluster: cluster,
		log:     s.log.With("cluster", cluster),
		srv:     srv,
		cancel:  cancel,
		wake:    make(chan struct{}, 1),
		beat:    make(chan *relayv1.ServerMessage, 1),
		ctrl:    make(chan *relayv1.ServerMessage, 64),
		sent:    map[string]sent{},
		want:    map[string]*snapshot.Snapshot{},
	}
	st.heartbeat = StreamHeartbeat(s.opts.Heartbeat, hello.GetServerTimeout().AsDuration())
	welcome := s.attach(st, hello)
	defer s.detach(st)
	if err := st.send(&relayv1.ServerMessage{Msg: &relayv1.ServerMessage_Welcome{Welcome: welcome}}); err != nil {
		return err
	}
	st.log.Info("agent connected", "agent_version", hello.GetAgentVersion(), "resumed", welcome.GetInputVersion() == hello.GetInputVersion() && welcome.GetInputVersion() != 0)

	if s.authMode() == ModeMTLS {
		expiry := time.AfterFunc(time.Until(id.notAfter), func() {
			_, err := s.checkIdentity(ctx, id)
			st.closeInvalid(err)
		})
		defer expiry.Stop()
	}
	defer s.beats.add(st)()
	// The handler's goroutine sends; one more receives: two of the five
	// goroutines a connected agent costs, with gRPC's reader, writer and
	// keepalive of the connection.
	recvDone := make(chan error, 1)
	go func() {
		err := st.recvLoop(ctx)
		recvDone <- err // before the cancel that ends sendLoop
		cancel(err)
	}()
	st.notifyAll()
	// The stream ends when the agent stops sending or when this side ends it
	// (a goodbye, a newer stream, a deregistration): returning from the
	// handler closes it, which also ends the pending Recv.
	sendErr := st.sendLoop(ctx)
	var recvErr error
	select {
	case recvErr = <-recvDone:
	default:
	}
	if recvErr != nil && !errors.Is(recvErr, context.Canceled) {
		return recvErr
	}
	return sendErr
}

// authorizeStream checks the Hello against the caller's identity: the
// certificate's cluster under mTLS (id, already checked against the
// registry), the token otherwise.
func (s *Server) authorizeStream(ctx context.Context, hello *relayv1.Hello, id identity) (string, error) {
	if id.cluster != "" {
		if hello.GetCluster() != "" && hello.GetCluster() != id.cluster {
			s.m.authFailures.WithLabelValues("cluster_mismatch").Inc()
			s.log.Warn("agent named another cluster than it authenticated as", "authenticated", id.cluster, "hello", hello.GetCluster())
			return "", status.Errorf(codes.PermissionDenied, "authenticated as cluster %q, not %q", id.cluster, hello.GetCluster())
		}
		return id.cluster, nil
	}
	if _, _, err := s.checkToken(ctx, hello.GetCluster(), hello.GetToken()); err != nil {
		return "", s.refuseToken(peerHost(ctx), hello.GetCluster(), err)
	}
	return hello.GetCluster(), nil
}

// streamToken returns the cluster and token an agent in --mode tls sends
// in its stream's headers.
func streamToken(ctx context.Context) (cluster, token string, ok bool) {
	md, _ := metadata.FromIncomingContext(ctx)
	c, t := md.Get("x-meshrelay-cluster"), md.Get("x-meshrelay-token")
	if len(c) != 1 || len(t) != 1 || t[0] == "" {
		return "", "", false
	}
	return c[0], t[0], true
}

// closeInvalid ends the stream with a goodbye when err says its
// certificate is no longer valid (expired, revoked, or its cluster
// deregistered); other errors leave it be.
func (st *stream) closeInvalid(err error) {
	if code := status.Code(err); code == codes.Unauthenticated || code == codes.PermissionDenied {
		st.log.Info("closing the stream: its certificate is no longer valid", "error", err)
		st.goodbye(relayv1.Goodbye_REASON_REBALANCING, status.Convert(err).Message())
	}
}

// attach registers a stream, replacing an older one of the same cluster,
// and prepares the Welcome and the resume of outputs.
func (s *Server) attach(st *stream, hello *relayv1.Hello) *relayv1.Welcome {
	s.mu.Lock()
	old := s.streams[st.cluster]
	s.streams[st.cluster] = st
	s.mu.Unlock()
	in, _, hasInput := s.input(st.srv.Context(), st.cluster)
	if old != nil {
		old.goodbye(relayv1.Goodbye_REASON_REBALANCING, "a newer stream of this cluster connected")
	}
	s.m.connected.Set(float64(s.connectedCount()))

	w := &relayv1.Welcome{ServerId: s.opts.ServerID, InputKinds: s.inputKinds()}
	// behind is true when this replica cannot tell that it holds the
	// agent's input: a server acked the agent another one, whose write
	// this replica has not seen yet (it was cut off from the store, or
	// the write is still on its way), or the agent restarted and holds
	// none acked, so only the input it sends next says what its cluster
	// is now. The agent sends one as soon as its stream starts (an empty
	// delta when the welcome names what it holds).
	behind := hello.GetInputVersion() > 0 && !hasInput
	var stored uint64
	if hasInput {
		stored = in.Version()
		w.InputVersion = in.Version()
		h := in.Hash()
		w.InputHash = h[:]
		if string(hello.GetInputHash()) == string(h[:]) && hello.GetInputVersion() == in.Version() {
			// The agent resumes from what the store holds: fresh.
			s.setStale(st.cluster, false)
			s.markFresh(st.cluster)
		}
		behind = string(hello.GetInputHash()) != string(h[:])
	}
	// Resume outputs the agent already holds without resending them, now
	// (the store holds them, from this replica or another) or when they
	// are computed.
	st.held = map[string]heldOutput{}
	for backend, h := range hello.GetOutputHashes() {
		st.held[backend] = heldOutput{hash: h, version: hello.GetOutputVersions()[backend]}
	}
	starting := s.startingOutputs(st.srv.Context(), st.cluster)
	if !behind {
		st.start(starting)
		s.engine.SetTarget(st.cluster, true)
		return w
	}
	// Outputs computed here now might come from an older input and take
	// the agent back to it. The cluster becomes a target once the agent's
	// input is taken (or refused: then the stored one is all there is), or
	// after inputCatchUp at the latest; meanwhile only outputs the agent
	// already holds are resumed.
	st.log.Info("the agent's input may be newer than this replica's; translating once it arrives",
		"agent_input_version", hello.GetInputVersion(), "stored_input_version", stored)
	for b, o := range starting {
		o.current = false
		starting[b] = o
	}
	st.start(starting)
	s.mu.Lock()
	st.awaiting = true
	s.mu.Unlock()
	catchUp := time.AfterFunc(inputCatchUp, func() { s.target(st, "the agent's input did not arrive in time") })
	context.AfterFunc(st.srv.Context(), func() { catchUp.Stop() })
	return w
}

// inputCatchUp bounds how long a stream whose agent holds a newer input
// than this replica waits for it before its cluster's outputs are
// computed from the stored one.
const inputCatchUp = 30 * time.Second

// target makes the cluster of a stream that awaits its agent's input a
// target of this replica's engine, if the stream is still the cluster's.
// The engine's next cycle that reads the cluster then reports its outputs
// as current, so the stream sends them though they did not change: with
// --targets all the engine kept computing the cluster while it waited,
// and the agent's input may have changed none of its outputs.
func (s *Server) target(st *stream, why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !st.awaiting || s.streams[st.cluster] != st {
		return
	}
	st.awaiting = false
	s.engine.SetTarget(st.cluster, true)
	s.engine.Resume(st.cluster)
	st.log.Info("translating the cluster's outputs", "reason", why)
}

// start sets the outputs the stream starts from, all read from the store,
// keeping any delivery handed on meanwhile: those this replica's engine
// handed on last, and those that are what the agent holds, resumed
// without a resend. Another stored output is not sent: it may be older
// than the agent's (a copy not yet caught up with another replica's); the
// engine's answer comes through delivery, compared with the stored one
// (see engine.View.Delivered).
func (st *stream) start(stored map[string]startingOutput) {
	st.mu.Lock()
	defer st.mu.Unlock()
	for b, o := range stored {
		h := o.snap.Hash()
		if _, ok := st.want[b]; !ok && (o.current || string(st.held[b].hash) == string(h[:])) {
			st.want[b] = o.snap
		}
	}
	st.resume(st.want)
}

// offer hands the stream a backend's new output and wakes its sender.
func (st *stream) offer(backend string, o *snapshot.Snapshot) {
	st.mu.Lock()
	st.want[backend] = o
	st.mu.Unlock()
	st.notifyAll()
}

// wants reports whether the stream has an output to send for backend.
func (st *stream) wants(backend string) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	_, ok := st.want[backend]
	return ok
}

// offerIfNone offers o unless delivery offered an output of its backend
// meanwhile, which is newer.
func (st *stream) offerIfNone(backend string, o *snapshot.Snapshot) {
	st.mu.Lock()
	_, had := st.want[backend]
	if !had {
		st.want[backend] = o
	}
	st.mu.Unlock()
	if !had {
		st.notifyAll()
	}
}

// resume records as sent every output the agent already holds. Callers
// hold st.mu.
func (st *stream) resume(current map[string]*snapshot.Snapshot) {
	for backend, o := range current {
		held, ok := st.held[backend]
		if _, done := st.sent[backend]; !ok || done {
			continue
		}
		h := o.Hash()
		if string(held.hash) == string(h[:]) {
			st.sent[backend] = sent{snap: o.WithVersion(held.version)}
		}
		delete(st.held, backend)
	}
}

// detach unregisters a stream when it ends and marks its cluster stale.
func (s *Server) detach(st *stream) {
	s.mu.Lock()
	current := s.streams[st.cluster] == st
	if current {
		delete(s.streams, st.cluster)
	}
	s.mu.Unlock()
	s.m.connected.Set(float64(s.connectedCount()))
	if current {
		s.engine.SetTarget(st.cluster, false)
		s.setStale(st.cluster, true)
		st.log.Info("agent disconnected; its inputs stay in the fleet view as stale")
	}
}

func (s *Server) connectedCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.streams)
}

// recvLoop handles the agent's messages until the stream ends.
func (st *stream) recvLoop(ctx context.Context) error {
	o := st.s.opts
	asm := snapshot.Assembler{Limits: snapshot.Limits{Parts: o.MaxInputParts, Bytes: o.MaxInputBytes, Resources: o.MaxInputResources}}
	// What the stream holds of an unfinished delta leaves the cluster's
	// count when the stream ends.
	defer func() { st.s.inputHeld.add(st.cluster, held{}.minus(heldBy(&asm))) }()
	dec := st.s.trafficDecoder()
	for {
		msg, err := st.srv.Recv()
		if err != nil {
			return err
		}
		st.s.m.received(msg)
		switch m := msg.Msg.(type) {
		case *relayv1.AgentMessage_Input:
			st.handleInput(ctx, &asm, m.Input)
		case *relayv1.AgentMessage_Ack:
			st.handleAck(m.Ack)
		case *relayv1.AgentMessage_Heartbeat:
		case *relayv1.AgentMessage_Traffic:
			st.s.acceptTraffic(st.cluster, dec, m.Traffic)
		case *relayv1.AgentMessage_Goodbye:
			st.log.Info("agent said goodbye", "reason", m.Goodbye.GetReason(), "message", m.Goodbye.GetMessage())
			return nil
		case *relayv1.AgentMessage_Hello:
			return status.Error(codes.InvalidArgument, "a second Hello on the stream")
		default:
			return status.Error(codes.InvalidArgument, "unknown agent message")
		}
	}
}

// handleInput applies one input delta part; a complete delta is acked, or
// nacked so the agent resends in full. Everything a part carries counts,
// IDs and deletes included: against the limits of one delta (the
// assembler's) and, while the delta is unfinished, against the cluster's
// count of what all its streams hold (inputHeld). A refused delta is
// dropped with what was held of it, and its remaining parts are dropped
// unread.
func (st *stream) handleInput(ctx context.Context, asm *snapshot.Assembler, in *relayv1.InputSnapshot) {
	s := st.s
	more := in.GetDelta().GetMore()
	nack := func(version uint64, err error) {
		s.inputHeld.add(st.cluster, held{}.minus(heldBy(asm)))
		asm.Reset()
		st.log.Warn("input refused; asking for a full resend", "version", version, "error", err)
		s.m.inputNacks.Inc()
		if le := (*snapshot.LimitError)(nil); errors.As(err, &le) {
			s.m.inputLimits.WithLabelValues(le.Limit).Inc()
		}
		st.refused, st.refusing = version, more
		st.control(&relayv1.ServerMessage{Msg: &relayv1.ServerMessage_Ack{Ack: &relayv1.Ack{
			Subject: relayv1.Ack_SUBJECT_INPUT, Version: version, Nack: true, Error: err.Error(),
		}}})
	}
	if st.refusing {
		if in.GetDelta().GetVersion() == st.refused {
			st.refusing = more
			return // the rest of a delta already refused
		}
		st.refusing = false
	}
	// An input carries only Kubernetes objects. Outputs are not held to
	// this: their names need not be Kubernetes names.
	part, err := snapshot.InputDeltaFromProto(in.GetDelta())
	if err != nil {
		nack(in.GetDelta().GetVersion(), fmt.Errorf("malformed input delta: %w", err))
		return
	}
	before := heldBy(asm)
	d, complete, err := asm.Add(part, !more)
	now := s.inputHeld.add(st.cluster, heldBy(asm).minus(before))
	if err == nil {
		err = s.checkHeld(now)
	}
	if err != nil {
		nack(part.Version, err)
		return
	}
	if !complete {
		return
	}
	base, _, _ := s.input(ctx, st.cluster)
	next, err := snapshot.ApplyOwned(base, d)
	if err == nil {
		err = s.checkInputSize(next)
	}
	if err == nil {
		err = checkGateways(d, next)
	}
	if err == nil {
		err = s.acceptInput(ctx, st.cluster, next)
	}
	if err != nil {
		nack(d.Version, err)
		if d.Full {
			// Resent in full, it would be refused again.
			s.target(st, "the agent's input was refused; translating the stored one")
		}
		return
	}
	s.target(st, "the agent's input was taken")
	st.control(&relayv1.ServerMessage{Msg: &relayv1.ServerMessage_Ack{Ack: &relayv1.Ack{
		Subject: relayv1.Ack_SUBJECT_INPUT, Version: d.Version,
	}}})
}

// checkInputSize refuses a whole input over the resource or byte limit;
// its size counts IDs as well as bodies ([snapshot.Snapshot.Size]).
func (s *Server) checkInputSize(snap *snapshot.Snapshot) error {
	switch {
	case snap.Len() > s.opts.MaxInputResources:
		return &snapshot.LimitError{Limit: "resources", Max: s.opts.MaxInputResources}
	case snap.Size() > s.opts.MaxInputBytes:
		return &snapshot.LimitError{Limit: "bytes", Max: s.opts.MaxInputBytes}
	}
	return nil
}

// acceptInput makes a cluster's new input current: it writes it to the
// store, the source of truth for inputs (a write-through store holds it in
// memory at once and reaches Redis on its own), then tells the engine. An
// input the store refused is nacked, so the agent resends it.
func (s *Server) acceptInput(ctx context.Context, cluster string, snap *snapshot.Snapshot) error {
	if err := s.deps.Store.PutInput(ctx, cluster, snap); err != nil {
		s.log.Warn("store input", "cluster", cluster, "version", snap.Version(), "error", err)
		return fmt.Errorf("store input: %w", err)
	}
	// The store keeps the input with the highest version: one numbered at
	// or below the stored one with other content was not taken, and
	// acking it would leave the fleet translating the older input.
	if held, _, ok := s.input(ctx, cluster); ok && held.Hash() != snap.Hash() && held.Version() >= snap.Version() {
		s.log.Warn("input numbered below the stored one; not taken", "cluster", cluster, "version", snap.Version(), "stored_version", held.Version())
		return fmt.Errorf("input version %d is not above the stored version %d", snap.Version(), held.Version())
	}
	s.join(cluster, snap.Hash(), false)
	s.markFresh(cluster)
	return nil
}

// handleAck records the agent's result for an output version.
func (st *stream) handleAck(ack *relayv1.Ack) {
	if ack.GetSubject() != relayv1.Ack_SUBJECT_OUTPUT {
		return
	}
	backend := ack.GetBackend()
	st.mu.Lock()
	cur, ok := st.sent[backend]
	if ack.GetNack() && (!ok || cur.snap.Version() == ack.GetVersion()) {
		// The agent could not apply the delta: resend in full.
		delete(st.sent, backend)
		st.mu.Unlock()
		st.log.Warn("agent refused output; resending in full", "backend", backend, "version", ack.GetVersion(), "error", ack.GetError())
		st.notifyAll()
		return
	}
	st.mu.Unlock()
	if !ok || cur.snap.Version() != ack.GetVersion() {
		return // an ack for an older version
	}
	errs := map[snapshot.ID]string{}
	for _, r := range ack.GetResults() {
		id, err := snapshot.IDFromProto(r.GetId())
		if err == nil && r.GetError() != "" {
			errs[id] = r.GetError()
		}
	}
	st.s.mu.Lock()
	st.s.acks[engine.OutputKey{Cluster: st.cluster, Backend: backend}] = ackState{hash: cur.snap.Hash(), errors: errs}
	st.s.mu.Unlock()
}

// sendLoop is the stream's only sender.
func (st *stream) sendLoop(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case m := <-st.ctrl:
			if err := st.send(m); err != nil {
				return err
			}
			if m.GetGoodbye() != nil {
				st.cancel(errors.New("goodbye sent"))
				return nil
			}
		case <-st.wake:
			if err := st.sendOutputs(); err != nil {
				return err
			}
		case m := <-st.beat:
			if err := st.send(m); err != nil {
				return err
			}
		}
	}
}

// sendOutputs sends, for every backend whose wanted output changed since
// it was last sent on this stream, the delta from what the agent holds.
func (st *stream) sendOutputs() error {
	s := st.s
	prune := s.pruneAllowed()
	st.mu.Lock()
	current := st.want
	st.resume(current)
	backends := slices.Sorted(maps.Keys(current))
	for b := range st.sent {
		if _, ok := current[b]; !ok {
			backends = append(backends, b)
		}
	}
	type pending struct {
		backend string
		delta   snapshot.Delta
		next    sent
		// kinds are sent with the last part when they changed.
		kinds []string
	}
	var out []pending
	for _, b := range backends {
		prev, had := st.sent[b]
		want := snapshot.Empty
		if o, ok := current[b]; ok {
			want = o
		}
		kinds := s.outputKinds(b)
		if had && prev.snap.Hash() == want.Hash() && prev.prune == prune && slices.Equal(prev.kinds, kinds) {
			continue
		}
		var newKinds []string
		if !slices.Equal(prev.kinds, kinds) {
			newKinds = kinds
		}
		var d snapshot.Delta
		if had {
			next := want.WithVersion(prev.snap.Version() + 1)
			d = snapshot.Diff(prev.snap, next)
			out = append(out, pending{backend: b, delta: d, next: sent{snap: next, prune: prune, kinds: kinds}, kinds: newKinds})
		} else {
			next := want.WithVersion(max(want.Version(), 1))
			d = snapshot.FullDelta(next)
			out = append(out, pending{backend: b, delta: d, next: sent{snap: next, prune: prune, kinds: kinds}, kinds: newKinds})
		}
	}
	for _, p := range out {
		st.sent[p.backend] = p.next
	}
	st.mu.Unlock()

	for _, p := range out {
		parts := snapshot.Split(p.delta, s.opts.MaxMessageBytes/2)
		for i, part := range parts {
			msg := &relayv1.ServerMessage{Msg: &relayv1.ServerMessage_Output{Output: &relayv1.OutputSnapshot{
				Backend:      p.backend,
				Delta:        snapshot.DeltaToProto(part, i < len(parts)-1),
				PruneAllowed: prune,
			}}}
			if i == len(parts)-1 {
				msg.GetOutput().OutputKinds = p.kinds
			}
			if err := st.send(msg); err != nil {
				return err
			}
		}
	}
	return nil
}

func (st *stream) send(m *relayv1.ServerMessage) error {
	st.s.m.sent(m)
	if err := st.srv.Send(m); err != nil {
		return fmt.Errorf("send to %s: %w", st.cluster, err)
	}
	return nil
}

// notifyAll wakes the sender to look at every backend's output.
func (st *stream) notifyAll() {
	select {
	case st.wake <- struct{}{}:
	default:
	}
}

// control queues a message for the sender.
func (st *stream) control(m *relayv1.ServerMessage) {
	select {
	case st.ctrl <- m:
	default:
		st.log.Warn("control queue full; closing the stream")
		st.cancel(errors.New("control queue full"))
	}
}

// goodbye ends the stream with a reason.
func (st *stream) goodbye(reason relayv1.Goodbye_Reason, message string) {
	st.control(&relayv1.ServerMessage{Msg: &relayv1.ServerMessage_Goodbye{Goodbye: &relayv1.Goodbye{Reason: reason, Message: message}}})
}

// messageSize is the size of a message on the wire, for metrics.
func messageSize(m proto.Message) int { return proto.Size(m) }
