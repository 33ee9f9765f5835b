package xds

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"sync"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	clusterservice "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	endpointservice "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	listenerservice "github.com/envoyproxy/go-control-plane/envoy/service/listener/v3"
	routeservice "github.com/envoyproxy/go-control-plane/envoy/service/route/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	deltav3 "github.com/envoyproxy/go-control-plane/pkg/server/delta/v3"
	sotwv3 "github.com/envoyproxy/go-control-plane/pkg/server/sotw/v3"
	"github.com/meshrelay/meshrelay/api/snapshot"
	xdsapi "github.com/meshrelay/meshrelay/api/xds"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/types/known/anypb"
)

// DefaultAddr is where the agent serves xDS.
const DefaultAddr = ":9977"

// stopGrace bounds how long Run waits for streams to end on shutdown.
const stopGrace = 5 * time.Second

// Options configure a Server.
type Options struct {
	// Addr is the TCP address Run listens on; DefaultAddr when empty.
	Addr string
	// Logger receives the server's logs; slog.Default() when nil.
	Logger *slog.Logger
	// OnNack, when set, is called for every response a proxy rejects,
	// with the node ID, the type URL and the names of the rejected
	// resources, as the proxy saw them. It must not block.
	OnNack func(nodeID string, typeURL string, names []string, err error)
	// Report, when set, is called for every response a proxy rejects,
	// once per backend whose output carried rejected resources, with the
	// ID of each (the xds.meshrelay.io wrapper the backend emitted) and
	// the proxy's error: the results the agent reports for that backend.
	// Names the server no longer serves are left out. It must not block.
	Report func(backend string, rejected map[snapshot.ID]error)
	// Services, when set, registers more services on the xDS server's
	// gRPC server, such as the traffic receiver (core/agent/traffic), with
	// ServerOptions added to its options.
	Services      func(grpc.ServiceRegistrar)
	ServerOptions []grpc.ServerOption
}

// AddFlags registers the options' flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Addr, "xds-addr", cmp.Or(o.Addr, DefaultAddr), "address the Envoy xDS (ADS) server listens on")
}

// Validate checks the options.
func (o *Options) Validate() error {
	if o.Addr == "" {
		return nil
	}
	if _, _, err := net.SplitHostPort(o.Addr); err != nil {
		return fmt.Errorf("xds address %q: %w", o.Addr, err)
	}
	return nil
}

// Server serves the xDS resources applied to it. Apply and Run may be
// called concurrently.
type Server struct {
	opts  Options
	log   *slog.Logger
	cache cachev3.SnapshotCache

	mu sync.Mutex
	// applied holds, per backend, per node, the resources last applied.
	applied map[string]map[string]nodeResources

	servedMu sync.Mutex
	// served holds, per node, the resources in its snapshot, to find the
	// backend and ID of a resource a proxy rejects.
	served map[string]nodeResources

	streamsMu sync.Mutex
	streams   map[int64]*stream
}

// New returns a server; it serves once Run is called, and Apply may be
// called before.
func New(opts Options) *Server {
	if opts.Addr == "" {
		opts.Addr = DefaultAddr
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	logger = logger.With("component", "xds")
	return &Server{
		opts: opts,
		log:  logger,
		// Not the cache's "ads" mode: it answers a request only when the
		// requested names cover every resource of the type, which holds for
		// Envoy's wildcard LDS and CDS but never for gRPC clients, which ask
		// for single Listeners by name. ADS streams are served either way.
		cache:   cachev3.NewSnapshotCache(false, cachev3.IDHash{}, cacheLogger{logger}),
		applied: map[string]map[string]nodeResources{},
		served:  map[string]nodeResources{},
		streams: map[int64]*stream{},
	}
}

// Run listens on Options.Addr and serves until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	lis, err := (&net.ListenConfig{}).Listen(ctx, "tcp", s.opts.Addr)
	if err != nil {
		return fmt.Errorf("xds listen on %s: %w", s.opts.Addr, err)
	}
	return s.Serve(ctx, lis)
}

// Serve serves xDS on lis until ctx ends, then closes lis.
func (s *Server) Serve(ctx context.Context, lis net.Listener) error {
	srv := &handlers{
		sotw:  sotwv3.NewServer(ctx, s.cache, callbacks{s}),
		delta: deltav3.NewServer(ctx, s.cache, callbacks{s}),
	}
	g := grpc.NewServer(append([]grpc.ServerOption{
		grpc.MaxConcurrentStreams(1 << 20),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	}, s.opts.ServerOptions...)...)
	if s.opts.Services != nil {
		s.opts.Services(g)
	}
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, srv)
	listenerservice.RegisterListenerDiscoveryServiceServer(g, srv)
	routeservice.RegisterRouteDiscoveryServiceServer(g, srv)
	clusterservice.RegisterClusterDiscoveryServiceServer(g, srv)
	endpointservice.RegisterEndpointDiscoveryServiceServer(g, srv)

	served := make(chan error, 1)
	go func() { served <- g.Serve(lis) }()
	s.log.Info("serving xds", "addr", lis.Addr().String())
	select {
	case err := <-served:
		return fmt.Errorf("serve xds: %w", err)
	case <-ctx.Done():
	}
	stopped := make(chan struct{})
	go func() {
		g.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(stopGrace):
		g.Stop()
		<-stopped
	}
	<-served
	return nil
}

// entry is one decoded resource of a node, from a backend's output.
type entry struct {
	backend string
	id      snapshot.ID
	hash    snapshot.Hash
	res     xdsapi.Resource
}

// nodeResources are a node's entries by type URL and name.
type nodeResources map[string]map[string]entry

// TakesGroup reports whether the server takes resources of group: only
// the xDS wrappers (api/xds.Group), whatever backend emitted them.
func (s *Server) TakesGroup(group string) bool { return group == xdsapi.Group }

// Apply makes desired the xDS resources of backend: it groups them by
// node, decodes and validates each, and sets every affected node's
// snapshot. A resource that is not an xDS wrapper, does not validate, or
// would leave its node's snapshot inconsistent gets an error in the
// returned map and is not served; the rest is. With prune true, what is
// not desired is removed; with prune false nothing is: nodes absent from
// desired keep what they had, and present nodes keep their resources that
// desired no longer lists (unless they became unusable, such as a
// RouteConfiguration no Listener uses any more).
//
// Each backend's resources are kept apart: applying one backend never
// removes another's. A node is served the resources of every backend;
// when several backends emit a resource of the same type and name for a
// node, the first backend in name order is served and the others' get an
// error when they are applied.
// The error is for failures of the server itself.
func (s *Server) Apply(ctx context.Context, backend string, desired *snapshot.Snapshot, prune bool) (map[snapshot.ID]error, error) {
	if desired == nil {
		desired = snapshot.Empty
	}
	next, errs := decodeNodes(backend, desired)
	s.mu.Lock()
	defer s.mu.Unlock()
	prev := s.applied[backend]
	kept := map[snapshot.ID]bool{}
	if !prune {
		kept = keepApplied(prev, next)
	}
	for _, nr := range next {
		dropInconsistent(nr, func(e entry, err error) { errs[e.id] = err })
	}
	s.applied[backend] = next
	nodes := slices.Sorted(maps.Keys(next))
	for node := range prev {
		if _, ok := next[node]; !ok {
			nodes = append(nodes, node)
		}
	}
	defer func() {
		// What was kept rather than desired is not the caller's to hear about.
		for id := range kept {
			delete(errs, id)
		}
	}()
	for _, node := range nodes {
		if err := ctx.Err(); err != nil {
			return errs, fmt.Errorf("apply xds: %w", err)
		}
		snap, err := s.nodeSnapshot(node, func(e entry, err error) {
			if e.backend == backend {
				errs[e.id] = err
			}
		})
		if err != nil {
			return errs, fmt.Errorf("apply xds for node %q: %w", node, err)
		}
		if err := s.cache.SetSnapshot(ctx, node, snap); err != nil {
			return errs, fmt.Errorf("apply xds for node %q: %w", node, err)
		}
	}
	s.log.Debug("applied", "backend", backend, "resources", desired.Len(), "nodes", len(nodes), "errors", len(errs))
	return errs, nil
}

// decodeNodes decodes backend's desired resources and groups them by
// node, with an error for each resource it cannot take.
func decodeNodes(backend string, desired *snapshot.Snapshot) (map[string]nodeResources, map[snapshot.ID]error) {
	errs := map[snapshot.ID]error{}
	byNode := map[string]nodeResources{}
	for r := range desired.All() {
		if r.ID.Group != xdsapi.Group {
			errs[r.ID] = fmt.Errorf("%s: %w", r.ID, xdsapi.ErrNotXDS)
			continue
		}
		res, err := xdsapi.Decode(r.Body)
		if err != nil {
			errs[r.ID] = err
			continue
		}
		nr := byNode[res.NodeID]
		if nr == nil {
			nr = nodeResources{}
			byNode[res.NodeID] = nr
		}
		if prev, dup := nr.get(res.TypeURL, res.Name); dup {
			errs[r.ID] = fmt.Errorf("%s: node %q already has %s %q from %s", r.ID, res.NodeID, r.ID.Kind, res.Name, prev.id)
			continue
		}
		nr.put(entry{backend: backend, id: r.ID, hash: r.Hash, res: res})
	}
	return byNode, errs
}

// keepApplied adds to next what prev has and next does not, for an apply
// that deletes nothing, and returns the IDs it added.
func keepApplied(prev, next map[string]nodeResources) map[snapshot.ID]bool {
	kept := map[snapshot.ID]bool{}
	for node, old := range prev {
		nr := next[node]
		if nr == nil {
			nr = nodeResources{}
			next[node] = nr
		}
		for _, byName := range old {
			for _, e := range byName {
				if _, ok := nr.get(e.res.TypeURL, e.res.Name); !ok {
					nr.put(e)
					kept[e.id] = true
				}
			}
		}
	}
	return kept
}

// get returns the entry of a type and name.
func (nr nodeResources) get(typeURL, name string) (entry, bool) {
	e, ok := nr[typeURL][name]
	return e, ok
}

// put adds e under its type and name.
func (nr nodeResources) put(e entry) {
	if nr[e.res.TypeURL] == nil {
		nr[e.res.TypeURL] = map[string]entry{}
	}
	nr[e.res.TypeURL][e.res.Name] = e
}

// nodeSnapshot merges what every backend applied for node into one
// snapshot, with a content-derived version per type, and notes it as what
// node is served. A resource several backends emit is taken from the
// first backend in name order; the others' copies, and what the merge
// leaves inconsistent, are dropped and told to drop. The caller holds mu.
func (s *Server) nodeSnapshot(node string, drop func(entry, error)) (*cachev3.Snapshot, error) {
	merged := nodeResources{}
	from := 0
	for _, backend := range slices.Sorted(maps.Keys(s.applied)) {
		if len(s.applied[backend][node]) > 0 {
			from++
		}
		for _, byName := range s.applied[backend][node] {
			for _, e := range byName {
				if first, ok := merged.get(e.res.TypeURL, e.res.Name); ok {
					drop(e, fmt.Errorf("%s: node %q has %s %q from backend %q too, which is served", e.id, node, e.id.Kind, e.res.Name, first.backend))
					continue
				}
				merged.put(e)
			}
		}
	}
	if from > 1 {
		// Each backend's resources are consistent; what one backend's
		// copy replaced may leave another's without its references.
		dropInconsistent(merged, drop)
	}
	snap := &cachev3.Snapshot{}
	for _, typeURL := range []string{xdsapi.ListenerType, xdsapi.RouteType, xdsapi.ClusterType, xdsapi.EndpointType} {
		byName := merged[typeURL]
		h := sha256.New()
		items := make([]types.Resource, 0, len(byName))
		for _, name := range slices.Sorted(maps.Keys(byName)) {
			e := byName[name]
			h.Write([]byte(name))
			h.Write([]byte{0})
			h.Write(e.hash[:])
			items = append(items, e.res.Message.(types.Resource))
		}
		version := hex.EncodeToString(h.Sum(nil))[:16]
		idx := cachev3.GetResponseType(typeURL)
		if idx == types.UnknownType {
			return nil, fmt.Errorf("unknown xds type %q", typeURL)
		}
		snap.Resources[idx] = cachev3.NewResources(version, items)
	}
	if err := snap.Consistent(); err != nil {
		return nil, err
	}
	s.servedMu.Lock()
	s.served[node] = merged
	s.servedMu.Unlock()
	return snap, nil
}

// dropInconsistent removes from a node's resources what would make its
// snapshot inconsistent, telling drop about each: Clusters whose
// ClusterLoadAssignment is missing, Listeners whose RouteConfiguration is
// missing, then ClusterLoadAssignments and RouteConfigurations nothing
// references.
func dropInconsistent(nr nodeResources, drop func(entry, error)) {
	remove := func(typeURL, name string, err error) {
		e := nr[typeURL][name]
		drop(e, fmt.Errorf("%s: %w", e.id, err))
		delete(nr[typeURL], name)
	}
	usedEndpoints := map[string]bool{}
	for _, name := range slices.Sorted(maps.Keys(nr[xdsapi.ClusterType])) {
		c := nr[xdsapi.ClusterType][name].res.Message.(*clusterv3.Cluster)
		if c.GetType() != clusterv3.Cluster_EDS {
			continue
		}
		eds := cmp.Or(c.GetEdsClusterConfig().GetServiceName(), c.GetName())
		if _, ok := nr[xdsapi.EndpointType][eds]; !ok {
			remove(xdsapi.ClusterType, name, fmt.Errorf("its ClusterLoadAssignment %q is missing or invalid", eds))
			continue
		}
		usedEndpoints[eds] = true
	}
	usedRoutes := map[string]bool{}
	for _, name := range slices.Sorted(maps.Keys(nr[xdsapi.ListenerType])) {
		l := nr[xdsapi.ListenerType][name].res.Message.(*listenerv3.Listener)
		var missing []string
		for _, route := range routeNames(l) {
			if _, ok := nr[xdsapi.RouteType][route]; ok {
				usedRoutes[route] = true
			} else {
				missing = append(missing, route)
			}
		}
		if len(missing) > 0 {
			remove(xdsapi.ListenerType, name, fmt.Errorf("its RouteConfigurations %q are missing or invalid", missing))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(nr[xdsapi.EndpointType])) {
		if !usedEndpoints[name] {
			remove(xdsapi.EndpointType, name, errors.New("no Cluster of its node uses it"))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(nr[xdsapi.RouteType])) {
		if !usedRoutes[name] {
			remove(xdsapi.RouteType, name, errors.New("no Listener of its node uses it"))
		}
	}
}

// routeNames are the RouteConfigurations a Listener loads over RDS, in its
// filter chains (the only place go-control-plane's consistency check
// follows them; api_listeners carry their routes inline).
func routeNames(l *listenerv3.Listener) []string {
	var out []string
	chains := l.GetFilterChains()
	if l.GetDefaultFilterChain() != nil {
		chains = append(slices.Clip(chains), l.GetDefaultFilterChain())
	}
	for _, fc := range chains {
		for _, f := range fc.GetFilters() {
			if name := resourcev3.GetHTTPConnectionManager(f).GetRds().GetRouteConfigName(); name != "" {
				out = append(out, name)
			}
		}
	}
	return out
}

// stream remembers, for one xDS stream, its node and the resource names
// of the last response of each type, to name what a NACK rejects.
type stream struct {
	node string
	sent map[string]sentResponse
}

type sentResponse struct {
	nonce string
	names []string
}

// callbacks watches requests and responses of state-of-the-world and
// delta streams to report NACKs. Delta stream IDs are negated so they do
// not collide with state-of-the-world ones.
type callbacks struct{ s *Server }

func (callbacks) OnStreamOpen(context.Context, int64, string) error      { return nil }
func (callbacks) OnDeltaStreamOpen(context.Context, int64, string) error { return nil }
func (c callbacks) OnStreamClosed(id int64, _ *corev3.Node)              { c.s.forget(id) }
func (c callbacks) OnDeltaStreamClosed(id int64, _ *corev3.Node)         { c.s.forget(-id) }

func (c callbacks) OnStreamRequest(id int64, req *discoveryv3.DiscoveryRequest) error {
	c.s.request(id, req.GetNode(), req.GetTypeUrl(), req.GetResponseNonce(), req.GetErrorDetail().GetMessage(), req.GetErrorDetail() != nil)
	return nil
}

func (c callbacks) OnStreamResponse(_ context.Context, id int64, _ *discoveryv3.DiscoveryRequest, resp *discoveryv3.DiscoveryResponse) {
	c.s.sent(id, resp.GetTypeUrl(), resp.GetNonce(), sotwNames(resp.GetResources()))
}

func (c callbacks) OnStreamDeltaRequest(id int64, req *discoveryv3.DeltaDiscoveryRequest) error {
	c.s.request(-id, req.GetNode(), req.GetTypeUrl(), req.GetResponseNonce(), req.GetErrorDetail().GetMessage(), req.GetErrorDetail() != nil)
	return nil
}

func (c callbacks) OnStreamDeltaResponse(id int64, _ *discoveryv3.DeltaDiscoveryRequest, resp *discoveryv3.DeltaDiscoveryResponse) {
	names := make([]string, 0, len(resp.GetResources()))
	for _, r := range resp.GetResources() {
		names = append(names, r.GetName())
	}
	c.s.sent(-id, resp.GetTypeUrl(), resp.GetNonce(), names)
}

func sotwNames(rs []*anypb.Any) []string {
	names := make([]string, 0, len(rs))
	for _, a := range rs {
		m, err := a.UnmarshalNew()
		if err != nil {
			continue
		}
		if name := xdsapi.ResourceName(m); name != "" {
			names = append(names, name)
		}
	}
	return names
}

func (s *Server) streamLocked(id int64) *stream {
	st := s.streams[id]
	if st == nil {
		st = &stream{sent: map[string]sentResponse{}}
		s.streams[id] = st
	}
	return st
}

func (s *Server) forget(id int64) {
	s.streamsMu.Lock()
	delete(s.streams, id)
	s.streamsMu.Unlock()
}

func (s *Server) sent(id int64, typeURL, nonce string, names []string) {
	s.streamsMu.Lock()
	defer s.streamsMu.Unlock()
	s.streamLocked(id).sent[typeURL] = sentResponse{nonce: nonce, names: names}
}

// request notes a stream's node and reports a NACK.
func (s *Server) request(id int64, node *corev3.Node, typeURL, nonce, detail string, nack bool) {
	s.streamsMu.Lock()
	st := s.streamLocked(id)
	if node.GetId() != "" {
		st.node = node.GetId()
	}
	nodeID := st.node
	var names []string
	if last, ok := st.sent[typeURL]; ok && (nonce == "" || last.nonce == nonce) {
		names = slices.Clone(last.names)
	}
	s.streamsMu.Unlock()
	if !nack {
		return
	}
	slices.Sort(names)
	err := fmt.Errorf("node %q rejected %s: %s", nodeID, typeURL, detail)
	s.log.Warn("xds update rejected", "node", nodeID, "type", typeURL, "resources", names, "error", detail)
	if s.opts.OnNack != nil {
		s.opts.OnNack(nodeID, typeURL, names, err)
	}
	if s.opts.Report == nil {
		return
	}
	rejected := s.rejected(nodeID, typeURL, names, err)
	for _, backend := range slices.Sorted(maps.Keys(rejected)) {
		s.opts.Report(backend, rejected[backend])
	}
}

// rejected returns, by backend, the IDs of the resources node is served
// under typeURL and names, each with err.
func (s *Server) rejected(node, typeURL string, names []string, err error) map[string]map[snapshot.ID]error {
	s.servedMu.Lock()
	defer s.servedMu.Unlock()
	out := map[string]map[snapshot.ID]error{}
	for _, name := range names {
		e, ok := s.served[node].get(typeURL, name)
		if !ok {
			continue
		}
		if out[e.backend] == nil {
			out[e.backend] = map[snapshot.ID]error{}
		}
		out[e.backend][e.id] = err
	}
	return out
}

// cacheLogger sends go-control-plane's logs to slog.
type cacheLogger struct{ log *slog.Logger }

func (l cacheLogger) Debugf(format string, args ...any) { l.log.Debug(fmt.Sprintf(format, args...)) }
func (l cacheLogger) Infof(format string, args ...any)  { l.log.Debug(fmt.Sprintf(format, args...)) }
func (l cacheLogger) Warnf(format string, args ...any)  { l.log.Warn(fmt.Sprintf(format, args...)) }
func (l cacheLogger) Errorf(format string, args ...any) { l.log.Error(fmt.Sprintf(format, args...)) }
