package server

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshrelay/meshrelay/api/meta"
	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/catalog"
	"github.com/meshrelay/meshrelay/core/engine"
	"github.com/meshrelay/meshrelay/core/pki"
	"github.com/meshrelay/meshrelay/core/pluginhost"
	"github.com/meshrelay/meshrelay/core/server/trust"
	"github.com/meshrelay/meshrelay/core/store"
	"github.com/meshrelay/meshrelay/core/traffic"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/tap"
)

// PolicySource publishes the management source's policies as a snapshot
// each time they change. Run returns when ctx ends.
type PolicySource interface {
	Run(ctx context.Context, publish func(*snapshot.Snapshot)) error
}

// StatusWriter is an optional capability of a PolicySource: it writes a
// policy's folded status back where the policy lives.
type StatusWriter interface {
	WriteStatus(ctx context.Context, ref meta.PolicyRef, status policyv1alpha1.PolicyStatus) error
}

// Deps are the parts a Server is built from.
type Deps struct {
	// Store keeps the fleet; usually a store.WriteThrough over Redis, or memory.
	Store store.Store
	// Translators are the loaded plugins.
	Translators []pluginhost.Translator
	// Policies is the management policy source; nil for none.
	Policies PolicySource
	// Discovery, when set, receives the fleet's discovery objects after
	// each change (such as a KubeDiscovery); nil for none.
	Discovery DiscoveryWriter
	Logger    *slog.Logger
	// Registerer receives the server's metrics; nil for a private registry.
	Registerer prometheus.Registerer
	// Gatherer serves /metrics; nil serves the private registry.
	Gatherer prometheus.Gatherer
}

// healthReporter is implemented by stores that can be degraded, such as
// store.WriteThrough.
type healthReporter interface {
	Health() (string, error)
}

// runner is implemented by stores with background work, such as store.WriteThrough.
type runner interface {
	Run(ctx context.Context) error
}

// Server is a meshrelay management server replica.
type Server struct {
	opts Options
	deps Deps
	log  *slog.Logger
	m    *metrics

	ca         *pki.CA
	serverCert *pki.Reloader
	adminHash  []byte
	sharedHash []byte
	engine     *engine.Engine
	trust      *trust.Manager
	started    time.Time

	grpcLis  net.Listener
	adminLis net.Listener
	gate     *gate
	// grpc serves connections with a verified client certificate; anon
	// the others.
	grpc, anon *grpc.Server
	// unauthHellos bounds the streams waiting for their Hello that are
	// not yet authenticated; hellos counts the waiting streams by cluster
	// and by address (helloSlot).
	unauthHellos chan struct{}
	hellos       map[string]int

	// inputHeld counts what each cluster's unfinished input deltas hold.
	inputHeld inputBudget
	// traffic keeps the edges the agents relayed over the last hour.
	traffic *traffic.Hour
	// peers are the other replicas, asked for their share of the fleet's
	// traffic (peers.go).
	peers peers
	// policyChanges are when the management policies last changed.
	policyChanges policyChanges

	// beats times the streams' heartbeats (heartbeat.go).
	beats *heartbeats

	mu      sync.Mutex
	streams map[string]*stream
	// fleet are the clusters of the fleet view; their inputs are in the store.
	fleet map[string]member
	// labels are the clusters' labels, as this replica last read their
	// registry records (fleet.go).
	labels   map[string]map[string]string
	acks     map[engine.OutputKey]ackState
	policies *snapshot.Snapshot
	safe     safeMode
	limiters map[string]*rate.Limiter
	// pruneAfter is the engine generation current when safe mode ended;
	// pruning waits for a finished cycle with a higher one (lastCycle).
	pruneAfter, lastCycle uint64
	// outputIndex holds what status and inspection read of the outputs.
	outputIndex outputIndex
	// catalog keeps each cluster's discovery objects for its input;
	// catalogKick asks warmCatalog to bring it up to date.
	catalog     catalog.Cache
	catalogKick chan struct{}
	// catalogRounds counts warmCatalog's rounds.
	catalogRounds atomic.Int64
	// catalogReadAt is when List, Describe or the traffic view last read
	// the catalog (UnixNano; 0 never): it is kept warm only for a while
	// after that (catalogWarmFor).
	catalogReadAt atomic.Int64
	// discoveryKick asks writeDiscovery to write the discovery objects.
	discoveryKick chan struct{}
	// turn is this replica's turn at writing them (discoverycrds.go).
	turn *discoveryTurn
	// ready carries the engine's cycles to deliver.
	ready chan engine.Ready
	// diffs holds the one diff that may run (admin Diff).
	diffs chan struct{}
	// rollouts stages the management source's policy changes (rollout.go).
	rollouts *rollouts
}

// ackState is what an agent said about the last output it applied.
type ackState struct {
	hash   snapshot.Hash
	errors map[snapshot.ID]string
}

// New builds a server: it loads or creates the CA, issues the server
// certificate, opens the listeners and loads the fleet from the store. Run
// starts serving.
func New(ctx context.Context, opts Options, deps Deps) (*Server, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if deps.Store == nil {
		return nil, errors.New("new server: no store")
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	if deps.Registerer == nil {
		reg := prometheus.NewRegistry()
		deps.Registerer, deps.Gatherer = reg, reg
	}
	if opts.ServerID == "" {
		host, _ := os.Hostname()
		opts.ServerID = cmp.Or(host, "server") + "-" + randomSuffix()
	}
	s := &Server{
		opts:     opts,
		deps:     deps,
		log:      deps.Logger.With("server", opts.ServerID),
		started:  time.Now(),
		streams:  map[string]*stream{},
		beats:    newHeartbeats(),
		fleet:    map[string]member{},
		labels:   map[string]map[string]string{},
		ready:    make(chan engine.Ready),
		acks:     map[engine.OutputKey]ackState{},
		policies: snapshot.Empty,
		limiters: map[string]*rate.Limiter{},

		discoveryKick: make(chan struct{}, 1),
		catalogKick:   make(chan struct{}, 1),
		unauthHellos:  make(chan struct{}, maxPendingHellos),
		hellos:        map[string]int{},
		diffs:         make(chan struct{}, 1),
	}
	s.m = newMetrics(deps.Registerer, s)
	s.traffic = newTraffic(opts, deps.Registerer)
	s.peers.s = s
	s.rollouts = newRollouts(s)
	deps.Registerer.MustRegister(rolloutCollector{s.rollouts})
	s.trust = newTrust(s)
	s.engine = engine.New(deps.Translators, engine.Options{
		Debounce:    opts.Debounce,
		DebounceMax: opts.DebounceMax,
		View:        fleetView{s},
		Ready:       s.ready,
		Scoped:      opts.Targets == TargetsConnected,
		Logger:      s.log,
	})
	if err := s.loadAdminToken(); err != nil {
		return nil, err
	}
	if err := s.loadSharedToken(); err != nil {
		return nil, err
	}
	if err := s.loadCA(ctx); err != nil {
		return nil, err
	}
	if err := s.loadFleet(ctx); err != nil {
		return nil, err
	}
	if err := s.listen(); err != nil {
		return nil, err
	}
	return s, nil
}

func randomSuffix() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// loadCA takes the CA from files, else from the store (shared by replicas),
// else from the data directory, generating it there on first start. The
// store holds the CA's key sealed (caKeySecret): a key sealed with the
// secret earlier releases derived from the admin token is sealed again
// with the CA's own secret, and a key in plain text is taken only when
// this replica's DATA-DIR/ca/ holds the same CA, since anyone able to
// write the store could have put it there.
func (s *Server) loadCA(ctx context.Context) error {
	var err error
	if s.opts.CACertFile != "" {
		s.ca, err = pki.LoadCA(s.opts.CACertFile, s.opts.CAKeyFile, s.opts.CAChainFile)
		if err != nil {
			return fmt.Errorf("load CA: %w", err)
		}
	} else if err := s.loadSharedCA(ctx); err != nil {
		return err
	}
	// The bundle agents and the CLI trust, next to the admin token.
	if err := os.MkdirAll(s.opts.DataDir, 0o700); err != nil {
		return fmt.Errorf("write CA bundle: %w", err)
	}
	if err := os.WriteFile(s.CABundlePath(), s.ca.BundlePEM(), 0o644); err != nil {
		return fmt.Errorf("write CA bundle: %w", err)
	}
	cert, err := s.ca.IssueServerCert(s.opts.ServerSANs, 365*24*time.Hour)
	if err != nil {
		return fmt.Errorf("issue server certificate: %w", err)
	}
	s.serverCert, err = pki.NewReloader(&cert)
	if err != nil {
		return fmt.Errorf("issue server certificate: %w", err)
	}
	return nil
}

// loadSharedCA takes the CA from the store, else from the data directory,
// generating it there on first start, and stores it sealed when the store
// did not hold it sealed with the CA key's secret.
func (s *Server) loadSharedCA(ctx context.Context) error {
	key, err := s.caKeySecret()
	if err != nil {
		return err
	}
	certPEM, storedKey, err := s.deps.Store.GetCA(ctx)
	switch {
	case errors.Is(err, store.ErrNotFound):
		if s.ca, err = pki.LoadOrCreateCA(filepath.Join(s.opts.DataDir, "ca"), "meshrelay", 10*365*24*time.Hour); err != nil {
			return fmt.Errorf("create CA: %w", err)
		}
		return s.storeCA(ctx, key)
	case err != nil:
		return fmt.Errorf("load CA from store: %w", err)
	}
	ca, legacy, err := openCA(key, certPEM, storedKey)
	plain := errors.Is(err, errPlainCAKey)
	switch {
	case plain:
		if ca, err = s.localCA(certPEM); err != nil {
			return fmt.Errorf("load CA from store: %w", err)
		}
		s.log.Warn("the CA key was stored in plain text; this replica's data directory holds the same CA: storing its key sealed")
	case err != nil:
		return fmt.Errorf("load CA from store: %w", err)
	}
	s.ca = ca
	if legacy {
		s.log.Warn("the CA key was sealed with a secret derived from the admin token; sealing it with the CA key encryption key: every replica sharing this store needs the same one",
			"secret", s.caKeySecretSource(key))
	}
	if plain || legacy {
		return s.storeCA(ctx, key)
	}
	return nil
}

// localCA returns the CA of DATA-DIR/ca/ when its certificates are certPEM,
// for a CA whose key the store holds in plain text.
func (s *Server) localCA(certPEM []byte) (*pki.CA, error) {
	dir := filepath.Join(s.opts.DataDir, "ca")
	refuse := fmt.Errorf("%w, and %s does not hold this CA: start the replica whose data directory holds it, or delete the store's CA and every DATA-DIR/ca/ to make a new one", errPlainCAKey, dir)
	if _, err := os.Stat(filepath.Join(dir, pki.CAKeyFile)); err != nil {
		return nil, refuse
	}
	chain := filepath.Join(dir, pki.CAChainFile)
	if _, err := os.Stat(chain); err != nil {
		chain = ""
	}
	ca, err := pki.LoadCA(filepath.Join(dir, pki.CACertFile), filepath.Join(dir, pki.CAKeyFile), chain)
	if err != nil {
		return nil, err
	}
	pemData, err := ca.MarshalPEM()
	if err != nil {
		return nil, err
	}
	if local, _ := splitPEM(pemData); !bytes.Equal(local, certPEM) {
		return nil, refuse
	}
	return ca, nil
}

// caKeySecretSource names where key's secret comes from, for the log.
func (s *Server) caKeySecretSource(key sealKey) string {
	switch {
	case !key.configured:
		return s.caKeyEncryptionKeyPath()
	case s.opts.CAKeyEncryptionKey != "":
		return "option"
	case s.opts.CAKeyEncryptionKeyFile != "":
		return s.opts.CAKeyEncryptionKeyFile
	}
	return CAKeyEncryptionKeyEnv
}

// storeCA writes the CA to the store, its key sealed with key.
func (s *Server) storeCA(ctx context.Context, key sealKey) error {
	certPEM, sealed, err := sealCA(key, s.ca)
	if err != nil {
		return err
	}
	if err := s.deps.Store.PutCA(ctx, certPEM, sealed); err != nil {
		return fmt.Errorf("store CA: %w", err)
	}
	return nil
}

// splitPEM separates certificates from the private key in a PEM bundle.
func splitPEM(data []byte) (certs, key []byte) {
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return certs, key
		}
		if block.Type == "CERTIFICATE" {
			certs = append(certs, pem.EncodeToMemory(block)...)
		} else {
			key = append(key, pem.EncodeToMemory(block)...)
		}
	}
}

// loadAdminToken reads the admin token, generating it on first start.
func (s *Server) loadAdminToken() error {
	path := cmp.Or(s.opts.AdminTokenFile, filepath.Join(s.opts.DataDir, "admin-token"))
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) && s.opts.AdminTokenFile == "" {
		tok, terr := pki.NewToken()
		if terr != nil {
			return fmt.Errorf("create admin token: %w", terr)
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return fmt.Errorf("create admin token: %w", err)
		}
		if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
			return fmt.Errorf("create admin token: %w", err)
		}
		data, err = []byte(tok), nil
	}
	if err != nil {
		return fmt.Errorf("read admin token: %w", err)
	}
	tok := strings.TrimSpace(string(data))
	if tok == "" {
		return fmt.Errorf("admin token file %s is empty", path)
	}
	s.adminHash = pki.HashToken(tok)
	return nil
}

// SharedTokenEnv holds the shared token when no file is given.
const SharedTokenEnv = "MESHRELAY_SHARED_TOKEN"

// loadSharedToken reads the shared token from the option, its file or the
// environment.
func (s *Server) loadSharedToken() error {
	tok := s.opts.SharedToken
	switch {
	case s.opts.SharedTokenFile != "":
		data, err := os.ReadFile(s.opts.SharedTokenFile)
		if err != nil {
			return fmt.Errorf("read shared token: %w", err)
		}
		tok = strings.TrimSpace(string(data))
	case tok == "":
		tok = os.Getenv(SharedTokenEnv)
	}
	if tok == "" {
		return nil
	}
	if err := pki.ValidateToken(tok); err != nil {
		return fmt.Errorf("shared token: %w", err)
	}
	s.sharedHash = pki.HashToken(tok)
	return nil
}

// CABundlePath returns where the server writes the CA bundle agents and
// the CLI trust.
func (s *Server) CABundlePath() string { return filepath.Join(s.opts.DataDir, "ca-bundle.crt") }

// AdminTokenPath returns where the admin token is kept.
func (s *Server) AdminTokenPath() string {
	return cmp.Or(s.opts.AdminTokenFile, filepath.Join(s.opts.DataDir, "admin-token"))
}

// loadFleet reads every cluster's last input from the store and decides
// whether to start in safe mode. Inputs a cold start keeps encoded
// (store.EncodedInputs) are decoded here, in parallel, since the engine's
// first cycle reads them all. A cluster whose stored input cannot be
// decoded is logged and does not join the fleet: safe mode waits for its
// agent, whose input takes the damaged one's place, and until then it is
// a cluster without an input, never one with an empty input.
func (s *Server) loadFleet(ctx context.Context) error {
	start := time.Now()
	inputs, err := store.ListEncodedInputs(ctx, s.deps.Store)
	if err != nil {
		return fmt.Errorf("load inputs: %w", err)
	}
	clusters, err := s.deps.Store.ListClusters(ctx)
	if err != nil {
		return fmt.Errorf("load clusters: %w", err)
	}
	registered := map[string]store.Cluster{}
	for _, c := range clusters {
		if !c.Revoked {
			registered[c.Name] = c
		}
	}
	maps.DeleteFunc(inputs, func(name string, _ *store.Encoded) bool {
		_, ok := registered[name]
		return !ok
	})
	for name, err := range decodeInputs(inputs) {
		s.log.Warn("the stored input cannot be read; the cluster joins when its agent sends one", "cluster", name, "error", err)
		delete(inputs, name)
	}
	for name, in := range inputs {
		s.join(name, in.Hash(), true)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.safe = newSafeMode(registered, inputs, s.opts, time.Now())
	s.log.Info("fleet loaded", "clusters", len(registered), "inputs", len(inputs), "took", time.Since(start), "safe_mode", s.safe.on,
		"waiting", len(s.safe.waiting), "waiting_for", s.safe.waitingFirst())
	return nil
}

// decodeInputs decodes every input on GOMAXPROCS goroutines and returns
// the errors of those that cannot be decoded, by cluster.
func decodeInputs(inputs map[string]*store.Encoded) map[string]error {
	var (
		g      errgroup.Group
		mu     sync.Mutex
		failed = map[string]error{}
	)
	g.SetLimit(runtime.GOMAXPROCS(0))
	for name, in := range inputs {
		g.Go(func() error {
			if _, err := in.Snapshot(); err != nil {
				mu.Lock()
				failed[name] = err
				mu.Unlock()
			}
			return nil
		})
	}
	_ = g.Wait() // the goroutines return no error
	return failed
}

func (s *Server) listen() error {
	var err error
	if s.grpcLis, err = net.Listen("tcp", s.opts.ListenAddr); err != nil {
		return fmt.Errorf("listen relay: %w", err)
	}
	if s.opts.AdminAddr != "" {
		if s.adminLis, err = net.Listen("tcp", s.opts.AdminAddr); err != nil {
			s.grpcLis.Close()
			return fmt.Errorf("listen metrics: %w", err)
		}
	}
	var tlsCreds credentials.TransportCredentials
	if !s.opts.InsecureLoopback {
		tlsCreds = credentials.NewTLS(pki.ServerTLSConfig(pki.ServerTLSOptions{
			Certificate:   s.serverCert,
			ClientCAs:     s.ca.ClientPool(),
			ClientAuth:    pki.VerifyClientCertIfGiven,
			VerifyCluster: s.verifyCluster,
		}))
	}
	s.gate = newGate(s.grpcLis, tlsCreds, s.opts, s.log, func(reason string) { s.m.connRefusals.WithLabelValues(reason).Inc() })
	s.grpc = s.newGRPCServer(tlsCreds, true)
	s.anon = s.newGRPCServer(tlsCreds, false)
	return nil
}

// newGRPCServer builds the server of authenticated connections (verified
// client certificates) or of the others, whose receive limit is small
// under mTLS: they may only register and call the admin API. The gate's
// inspectedConn holds each method to its own receive limit below these.
// A connection without a call for idleTimeout is closed, and every call
// but Sync must be over within callTimeout, its request read included.
func (s *Server) newGRPCServer(tlsCreds credentials.TransportCredentials, authenticated bool) *grpc.Server {
	creds := insecure.NewCredentials()
	if tlsCreds != nil {
		creds = handshaken{TransportCredentials: tlsCreds}
	}
	recv, streams := s.opts.MaxMessageBytes, uint32(s.opts.MaxStreamsPerConnection)
	// The server pings a connection it read nothing from for Keepalive
	// (never more often than it heartbeats); gRPC also sets the
	// connection's TCP_USER_TIMEOUT to KeepaliveTimeout, so that a
	// heartbeat the agent does not acknowledge closes it.
	params := keepalive.ServerParameters{Time: max(s.opts.Keepalive, s.opts.Heartbeat), Timeout: s.opts.KeepaliveTimeout, MaxConnectionIdle: idleTimeout}
	if authenticated && s.opts.MaxConnectionAge > 0 {
		// The backstop of rebalancing: even an agent no replica asks to
		// move reconnects, to the next server address, once in a while.
		params.MaxConnectionAge, params.MaxConnectionAgeGrace = s.opts.MaxConnectionAge, maxConnectionAgeGrace
	}
	if !authenticated {
		if s.authMode() == ModeMTLS {
			recv = s.opts.MaxUnauthenticatedMessageBytes
		}
		streams = min(streams, 8)
	}
	srv := grpc.NewServer(
		grpc.Creds(creds),
		grpc.MaxRecvMsgSize(recv),
		grpc.MaxSendMsgSize(s.opts.MaxMessageBytes),
		grpc.MaxConcurrentStreams(streams),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(params),
		grpc.StaticStreamWindowSize(streamWindow),
		grpc.StaticConnWindowSize(connWindow),
		// An idle agent's connection keeps no buffer of its own: the write
		// buffer goes back to a pool shared by all connections after each
		// flush, and HTTP/2 frames are read straight from the TLS
		// connection, which buffers a whole record anyway. With the 32 KiB
		// of each gRPC keeps by default, they were 60 KiB of heap per agent.
		// A write buffer holds one TLS record's 16 KiB, not gRPC's 32:
		// crypto/tls writes a record at a time anyway, and a burst that
		// writes to every agent at once (a fleet-wide edit) holds a buffer
		// per connection until it flushes.
		grpc.SharedWriteBuffer(true),
		grpc.WriteBufferSize(16<<10),
		grpc.ReadBufferSize(0),
		grpc.InTapHandle(callDeadline),
		grpc.ChainUnaryInterceptor(s.unaryIdentity),
		grpc.ChainStreamInterceptor(s.streamIdentity),
	)
	relayv1.RegisterRegistrationServer(srv, &registration{s: s})
	relayv1.RegisterRelayServer(srv, &relay{s: s})
	relayv1.RegisterAdminServer(srv, &admin{s: s})
	relayv1.RegisterTrustServer(srv, &trustService{s: s})
	relayv1.RegisterTrafficServer(srv, &trafficService{s: s})
	return srv
}

// streamWindow and connWindow are the HTTP/2 flow-control windows of a
// stream and of a connection, fixed: a window that grows with the measured
// bandwidth-delay product costs a PING and its ack after every message
// that arrives on an idle connection (each heartbeat), three TLS records
// where one would do. A fixed 1 MiB stream window still carries about
// 10 MB/s on a 100 ms round trip; the gate (gate.go) bounds what a peer may
// leave unread, below gRPC.
const (
	streamWindow = 1 << 20
	connWindow   = 2 << 20
)

// idleTimeout closes a connection without calls; callTimeout bounds every
// call but Sync, whose Hello has --hello-timeout.
// maxConnectionAgeGrace is how long an agent's stream may run on after
// its connection reached MaxConnectionAge: the agent dials anew meanwhile.
const (
	idleTimeout           = 2 * time.Minute
	callTimeout           = time.Minute
	maxConnectionAgeGrace = 10 * time.Second
)

// callDeadline gives every call but Sync a deadline from its headers on,
// so that a request that never finishes arriving is not waited for.
func callDeadline(ctx context.Context, info *tap.Info) (context.Context, error) {
	if info.FullMethodName == relayv1.Relay_Sync_FullMethodName {
		return ctx, nil
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	context.AfterFunc(ctx, cancel)
	return ctx, nil
}

// Addr returns the relay's listening address.
func (s *Server) Addr() string { return s.grpcLis.Addr().String() }

// AdminAddr returns the metrics and health address, or "" when disabled.
func (s *Server) AdminAddr() string {
	if s.adminLis == nil {
		return ""
	}
	return s.adminLis.Addr().String()
}

// CABundle returns the PEM CA bundle agents trust.
func (s *Server) CABundle() []byte { return s.ca.BundlePEM() }

// ID returns the replica's name.
func (s *Server) ID() string { return s.opts.ServerID }

// Engine returns the server's engine, for status and tests.
func (s *Server) Engine() *engine.Engine { return s.engine }

// Run serves until ctx ends, then says goodbye to every agent and stops.
func (s *Server) Run(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	if r, ok := s.deps.Store.(runner); ok {
		g.Go(func() error { return r.Run(ctx) })
	}
	g.Go(func() error { return s.engine.Run(ctx) })
	g.Go(func() error { return s.deliver(ctx, s.ready) })
	g.Go(func() error { return s.warmCatalog(ctx) })
	g.Go(func() error { return s.watchStore(ctx) })
	g.Go(func() error { return s.tick(ctx) })
	g.Go(func() error { return s.rebalance(ctx) })
	g.Go(func() error { return s.trust.Run(ctx) })
	g.Go(func() error { return s.rollouts.run(ctx) })
	if s.deps.Policies != nil {
		g.Go(func() error {
			return s.deps.Policies.Run(ctx, s.setPolicies)
		})
	}
	if s.deps.Discovery != nil {
		g.Go(func() error { return s.writeDiscovery(ctx) })
	}
	go s.gate.run()
	for _, srv := range []*grpc.Server{s.grpc, s.anon} {
		lis := s.gate.authed
		if srv == s.anon {
			lis = s.gate.anon
		}
		g.Go(func() error {
			// The gate closes lis when the relay listener closes.
			if err := srv.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) && !errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("serve relay: %w", err)
			}
			return nil
		})
	}
	var httpSrv *http.Server
	if s.adminLis != nil {
		httpSrv = &http.Server{Handler: s.httpHandler(), ReadHeaderTimeout: 5 * time.Second}
		g.Go(func() error {
			if err := httpSrv.Serve(s.adminLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("serve metrics: %w", err)
			}
			return nil
		})
	}
	s.log.Info("server started", "relay", s.Addr(), "metrics", s.AdminAddr(), "mode", s.authMode())
	g.Go(func() error {
		<-ctx.Done()
		s.shutdown()
		if httpSrv != nil {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = httpSrv.Shutdown(sctx)
		}
		return nil
	})
	return g.Wait()
}

// shutdown says goodbye to every agent, then stops the gRPC server.
func (s *Server) shutdown() {
	s.mu.Lock()
	streams := make([]*stream, 0, len(s.streams))
	for _, st := range s.streams {
		streams = append(streams, st)
	}
	s.mu.Unlock()
	for _, st := range streams {
		st.goodbye(relayv1.Goodbye_REASON_SHUTTING_DOWN, "server shutting down")
	}
	defer s.grpcLis.Close()
	defer s.peers.close()
	done := make(chan struct{})
	go func() {
		var wg sync.WaitGroup
		wg.Go(s.grpc.GracefulStop)
		wg.Go(s.anon.GracefulStop)
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		s.grpc.Stop()
		s.anon.Stop()
	}
}

// Stop stops serving at once, without goodbyes, as when a replica dies. For tests.
func (s *Server) Stop() {
	s.peers.close()
	s.grpcLis.Close()
	s.grpc.Stop()
	s.anon.Stop()
	if s.adminLis != nil {
		s.adminLis.Close()
	}
}

// authMode is "mtls", or "token" when streams authenticate with tokens.
func (s *Server) authMode() string {
	if s.opts.Mode == ModeTLS || s.opts.InsecureLoopback {
		return "token"
	}
	return ModeMTLS
}

// setPolicies records the management source's policies. MeshTrusts go to
// the trust manager, the RolloutStrategy to the staged rollout, the
// others to the translators through the rollout (rollout.go), which
// stages them when there is a RolloutStrategy and applies them at once
// when there is none.
func (s *Server) setPolicies(p *snapshot.Snapshot) {
	s.mu.Lock()
	s.policies = p
	s.mu.Unlock()
	s.policyChanges.note(p, time.Now())
	s.trust.SetPolicies(p)
	s.rollouts.setSource(filterSnapshot(p, func(r snapshot.Resource) bool { return !trust.IsPolicy(r) && !isRolloutStrategy(r) }), strategyOf(p))
}

// tick runs periodic duties: safe-mode deadline, last-seen, policy status.
func (s *Server) tick(ctx context.Context) error {
	t := time.NewTicker(cmp.Or(min(s.opts.Heartbeat, time.Second), time.Second))
	defer t.Stop()
	lastSeen := time.Now()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-t.C:
			s.checkSafeDeadline(now)
			if now.Sub(lastSeen) >= s.opts.Heartbeat {
				lastSeen = now
				s.touchLastSeen(ctx, now)
				s.pruneLimiters()
				s.writePolicyStatus(ctx)
			}
		}
	}
}

// touchLastSeen records in the store that this replica's agents are alive,
// so other replicas starting up know their inputs are fresh, and so that
// status, `meshrelay get clusters` and safe mode on every replica see
// them connected here: each record's LastSeen is at most one --heartbeat
// older than the agent's stream is known alive, within the three
// heartbeats those readers allow (freshWindowHeartbeats). The records are
// read from memory and written together (Store.CompareAndPutClusters:
// one round trip to Redis a heartbeat, not one an agent); those another
// writer changed in between are written again one at a time.
//
// The record read also tells whether each stream's certificate is still
// valid: a stream whose serial the record no longer holds, or whose
// cluster was deregistered, is closed (closeInvalid), within a heartbeat
// of the change whichever replica made it.
func (s *Server) touchLastSeen(ctx context.Context, now time.Time) {
	s.mu.Lock()
	streams := make(map[string]*stream, len(s.streams))
	for _, st := range s.streams {
		streams[st.cluster] = st
	}
	s.mu.Unlock()
	batch := make([]store.Cluster, 0, len(streams))
	for _, st := range streams {
		c, err := s.deps.Store.GetCluster(ctx, st.cluster)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			s.log.Warn("record last seen", "cluster", st.cluster, "error", err)
			continue
		}
		if st.cert.serial != "" {
			if invalid := s.checkRecord(st.cert, c, err); invalid != nil {
				st.closeInvalid(invalid)
				continue
			}
		}
		if err != nil || c.Revoked {
			continue
		}
		c.LastSeen, c.Replica = now, s.opts.ServerID
		batch = append(batch, c)
	}
	stored, err := s.deps.Store.CompareAndPutClusters(ctx, batch)
	if err != nil {
		s.log.Warn("record last seen", "clusters", len(batch), "error", err)
		return
	}
	for _, c := range stored {
		delete(streams, c.Name)
	}
	for _, c := range batch {
		if st, ok := streams[c.Name]; ok {
			s.touchOne(ctx, st, now)
		}
	}
}

// touchOne is touchLastSeen for one stream whose record changed since it
// was read: it reads it again, and again while other writers change it.
func (s *Server) touchOne(ctx context.Context, st *stream, now time.Time) {
	var invalid error
	_, err := store.UpdateCluster(ctx, s.deps.Store, st.cluster, func(c *store.Cluster, found bool) error {
		if st.cert.serial != "" {
			var lookup error
			if !found {
				lookup = store.ErrNotFound
			}
			if invalid = s.checkRecord(st.cert, *c, lookup); invalid != nil {
				return invalid
			}
		}
		if !found || c.Revoked {
			return errNotRegistered
		}
		c.LastSeen, c.Replica = now, s.opts.ServerID
		return nil
	})
	switch {
	case invalid != nil:
		st.closeInvalid(invalid)
	case err != nil && !errors.Is(err, errNotRegistered):
		s.log.Warn("record last seen", "cluster", st.cluster, "error", err)
	}
}
