package server

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshrelay/meshrelay/core/pki"
	"github.com/meshrelay/meshrelay/core/server/trust"
	"golang.org/x/time/rate"
	"google.golang.org/grpc/credentials"
)

// gate accepts the relay's connections, bounds them overall and per client
// address, completes their TLS handshake under a deadline, and hands each
// to the authenticated gRPC server when the client presented a verified
// certificate, else to the anonymous one, whose receive limit is small. So
// nothing large is read from a client before it is authenticated.
//
// Every connection is read through an inspectedConn, which holds each
// message to its method's limit and the unfinished messages to the
// connection's budget. An authenticated connection also counts against its
// cluster: at most maxPerCluster connections and clusterBytes of
// unfinished messages, so that one cluster's agent spends only its own
// budget. Authenticated connections leave reserve connections of
// maxConns to the others: registrations, the admin API, newcomers.
type gate struct {
	lis           net.Listener
	tls           credentials.TransportCredentials // nil: plaintext
	timeout       time.Duration
	maxConns      int
	maxPerPeer    int
	maxPerCluster int
	reserve       int
	clusterBytes  int64
	anonLimits    limits
	authedLimits  limits
	log           *slog.Logger
	refused       func(reason string)
	// logRefusal bounds the warnings of refused and closed connections,
	// which a peer can cause as fast as it connects; the metric counts
	// every one.
	logRefusal rate.Sometimes

	authed, anon *connQueue

	mu         sync.Mutex
	open       int
	authedOpen int
	peers      map[string]int
	clusters   map[string]*clusterConns
	unverified map[string]*inspectedConn // by remote address
}

// clusterConns are one cluster's authenticated connections and the budget
// of bytes they share.
type clusterConns struct {
	conns int
	bytes *byteBudget
}

func newGate(lis net.Listener, tlsCreds credentials.TransportCredentials, o Options, log *slog.Logger, refused func(string)) *gate {
	authed := limits{
		small: o.MaxUnauthenticatedMessageBytes, sync: o.MaxMessageBytes, report: trust.MaxReportBytes,
		whole: o.MaxMessageBytes, conn: unauthenticatedConnBytes, authedConn: int64(o.MaxMessageBytes) + authenticatedConnSlack,
	}
	anon := authed
	if tlsCreds != nil && o.Mode == ModeMTLS {
		anon.whole = o.MaxUnauthenticatedMessageBytes
	}
	return &gate{
		lis: lis, tls: tlsCreds, timeout: o.HandshakeTimeout, maxConns: o.MaxConnections, maxPerPeer: o.MaxConnectionsPerPeer,
		maxPerCluster: o.MaxConnectionsPerCluster, reserve: o.reservedConnections(), clusterBytes: int64(o.MaxClusterBytesInFlight),
		anonLimits: anon, authedLimits: authed,
		log: log, refused: refused, logRefusal: rate.Sometimes{First: 10, Interval: time.Second},
		peers: map[string]int{}, clusters: map[string]*clusterConns{}, unverified: map[string]*inspectedConn{},
		authed: newConnQueue(lis.Addr()), anon: newConnQueue(lis.Addr()),
	}
}

// Budgets of a connection's unfinished messages: before it is
// authenticated, enough for a Trust report and a few small calls; after,
// one message of --max-message-bytes and this much more.
const (
	unauthenticatedConnBytes = 1 << 20
	authenticatedConnSlack   = 1 << 20
)

// run accepts connections until the listener is closed.
func (g *gate) run() {
	defer g.authed.Close()
	defer g.anon.Close()
	for {
		c, err := g.lis.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return
		}
		host := hostOf(c.RemoteAddr())
		if reason := g.admit(host); reason != "" {
			g.refused(reason)
			c.Close()
			continue
		}
		gc := &gatedConn{Conn: c}
		gc.release = func() { g.release(host, gc.peerReleased.Load()) }
		go g.handshake(gc, host)
	}
}

// admit counts a new connection from host, or says which limit refuses it.
func (g *gate) admit(host string) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.open >= g.maxConns:
		return "connection_limit"
	case g.peers[host] >= g.maxPerPeer:
		return "peer_connection_limit"
	}
	g.open++
	g.peers[host]++
	return ""
}

// release uncounts a closed connection; peerReleased says its address's
// count was already decremented (see authenticated).
func (g *gate) release(host string, peerReleased bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.open--
	if !peerReleased {
		g.releasePeer(host)
	}
}

func (g *gate) releasePeer(host string) {
	if g.peers[host]--; g.peers[host] <= 0 {
		delete(g.peers, host)
	}
}

// handshake completes TLS and queues the connection for its server.
func (g *gate) handshake(c *gatedConn, host string) {
	if g.tls == nil {
		g.anon.push(g.inspectAnonymous(c, c))
		return
	}
	timeout := g.timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	_ = c.SetDeadline(time.Now().Add(timeout))
	conn, info, err := g.tls.ServerHandshake(c)
	if err != nil {
		g.log.Debug("TLS handshake failed", "peer", c.RemoteAddr().String(), "error", err)
		c.Close()
		return
	}
	_ = c.SetDeadline(time.Time{})
	if ti, ok := info.(credentials.TLSInfo); ok && len(ti.State.VerifiedChains) > 0 {
		cluster, _, err := pki.ClusterFromConnectionState(ti.State)
		if err != nil {
			g.log.Debug("client certificate names no cluster", "peer", c.RemoteAddr().String(), "error", err)
			conn.Close()
			return
		}
		budget, reason := g.authenticated(c, host, cluster)
		if reason != "" {
			g.refused(reason)
			g.logRefusal.Do(func() {
				g.log.Warn("connection refused", "cluster", cluster, "peer", c.RemoteAddr().String(), "reason", reason)
			})
			conn.Close()
			return
		}
		ic := newInspectedConn(conn, g.authedLimits, g.violation)
		ic.boundTo = cluster
		ic.authenticate(budget)
		ic.onClose(func() { g.releaseCluster(cluster) })
		g.authed.push(&handshakenConn{Conn: ic, info: info})
		return
	}
	g.anon.push(&handshakenConn{Conn: g.inspectAnonymous(conn, c), info: info})
}

// inspectAnonymous wraps a connection without a client certificate (conn,
// over the accepted gc); the relay may authenticate it later by its token
// (verify).
func (g *gate) inspectAnonymous(conn net.Conn, gc *gatedConn) *inspectedConn {
	ic := newInspectedConn(conn, g.anonLimits, g.violation)
	ic.gated = gc
	addr := conn.RemoteAddr().String()
	g.mu.Lock()
	g.unverified[addr] = ic
	g.mu.Unlock()
	ic.onClose(func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.unverified[addr] == ic {
			delete(g.unverified, addr)
		}
	})
	return ic
}

// violation closes a connection a limit refused, counting and logging it.
func (g *gate) violation(c *inspectedConn, reason string, err error) {
	g.refused(reason)
	g.logRefusal.Do(func() {
		g.log.Warn("connection closed: over a limit", "peer", c.RemoteAddr().String(), "reason", reason, "error", err)
	})
}

// authenticated moves a connection from its address's count to its
// cluster's, or says which limit refuses it: the per-address limit is for
// connections that are not authenticated, so that agents behind one
// address (NAT, a benchmark on loopback) are not capped.
func (g *gate) authenticated(c *gatedConn, host, cluster string) (*byteBudget, string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	budget, reason := g.countCluster(cluster)
	if reason == "" && c.peerReleased.CompareAndSwap(false, true) {
		g.releasePeer(host)
	}
	return budget, reason
}

// countCluster counts an authenticated connection of cluster, or says
// which limit refuses it. g.mu is held.
func (g *gate) countCluster(cluster string) (*byteBudget, string) {
	cc := g.clusters[cluster]
	switch {
	case cc != nil && cc.conns >= g.maxPerCluster:
		return nil, "cluster_connection_limit"
	case g.authedOpen >= g.maxConns-g.reserve:
		return nil, "authenticated_connection_limit"
	}
	if cc == nil {
		cc = &clusterConns{bytes: &byteBudget{max: g.clusterBytes}}
		g.clusters[cluster] = cc
	}
	cc.conns++
	g.authedOpen++
	return cc.bytes, ""
}

// releaseCluster uncounts a closed authenticated connection.
func (g *gate) releaseCluster(cluster string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.authedOpen--
	if cc := g.clusters[cluster]; cc != nil {
		if cc.conns--; cc.conns <= 0 && cc.bytes.inUse() == 0 {
			delete(g.clusters, cluster)
		}
	}
}

// verify authenticates the connection from addr as cluster's, once its
// token was checked (--mode tls): its limits become an agent's, and it
// counts against the cluster's budgets. A connection serves one cluster.
// Calls that did not come through the gate are left alone.
func (g *gate) verify(addr, cluster string) error {
	g.mu.Lock()
	ic := g.unverified[addr]
	if ic == nil {
		g.mu.Unlock()
		return nil
	}
	if bound := ic.boundTo; bound != "" {
		g.mu.Unlock()
		if bound != cluster {
			return fmt.Errorf("this connection serves cluster %q", bound)
		}
		return nil
	}
	budget, reason := g.countCluster(cluster)
	if reason == "" {
		ic.boundTo = cluster
		// Like a certificate, a verified token lifts the per-address limit.
		if gc := ic.gated; gc != nil && gc.peerReleased.CompareAndSwap(false, true) {
			g.releasePeer(hostOf(gc.RemoteAddr()))
		}
	}
	g.mu.Unlock()
	if reason != "" {
		g.refused(reason)
		return fmt.Errorf("too many connections of cluster %q (%s)", cluster, reason)
	}
	ic.authenticate(budget)
	ic.onClose(func() { g.releaseCluster(cluster) })
	return nil
}

// gatedConn releases its slot in the gate's counts once, when closed.
type gatedConn struct {
	net.Conn
	once         sync.Once
	release      func()
	peerReleased atomic.Bool
}

func (c *gatedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// handshakenConn is a connection whose TLS handshake the gate completed.
type handshakenConn struct {
	net.Conn
	info credentials.AuthInfo
}

// handshaken are the transport credentials of the gate's servers: the
// handshake is done, so they return the connection and its TLS state.
type handshaken struct {
	credentials.TransportCredentials // the TLS credentials, for Info
}

func (h handshaken) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	hc, ok := c.(*handshakenConn)
	if !ok {
		return nil, nil, errors.New("connection did not pass the gate")
	}
	return hc.Conn, hc.info, nil
}

func (h handshaken) Clone() credentials.TransportCredentials {
	return handshaken{TransportCredentials: h.TransportCredentials.Clone()}
}

// connQueue is a net.Listener fed by the gate.
type connQueue struct {
	addr   net.Addr
	ch     chan net.Conn
	done   chan struct{}
	closed sync.Once
}

func newConnQueue(addr net.Addr) *connQueue {
	return &connQueue{addr: addr, ch: make(chan net.Conn), done: make(chan struct{})}
}

func (q *connQueue) push(c net.Conn) {
	select {
	case q.ch <- c:
	case <-q.done:
		c.Close()
	}
}

func (q *connQueue) Accept() (net.Conn, error) {
	select {
	case c := <-q.ch:
		return c, nil
	case <-q.done:
		return nil, net.ErrClosed
	}
}

func (q *connQueue) Close() error {
	q.closed.Do(func() { close(q.done) })
	return nil
}

func (q *connQueue) Addr() net.Addr { return q.addr }

// hostOf returns the host of a network address.
func hostOf(a net.Addr) string {
	if a == nil {
		return ""
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}
