package server

import (
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/credentials"
)

// gate accepts the relay's connections, bounds them overall and per client
// address, completes their TLS handshake under a deadline, and hands each
// to the authenticated gRPC server when the client presented a verified
// certificate, else to the anonymous one, whose receive limit is small. So
// nothing large is read from a client before it is authenticated.
type gate struct {
	lis        net.Listener
	tls        credentials.TransportCredentials // nil: plaintext
	timeout    time.Duration
	maxConns   int
	maxPerPeer int
	log        *slog.Logger
	refused    func(reason string)

	authed, anon *connQueue

	mu    sync.Mutex
	open  int
	peers map[string]int
}

func newGate(lis net.Listener, tlsCreds credentials.TransportCredentials, o Options, log *slog.Logger, refused func(string)) *gate {
	return &gate{
		lis: lis, tls: tlsCreds, timeout: o.HandshakeTimeout, maxConns: o.MaxConnections, maxPerPeer: o.MaxConnectionsPerPeer,
		log: log, refused: refused, peers: map[string]int{},
		authed: newConnQueue(lis.Addr()), anon: newConnQueue(lis.Addr()),
	}
}

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

// authenticated stops counting a connection against its address: the
// per-address limit is for connections that are not authenticated, so that
// agents behind one address (NAT, a benchmark on loopback) are not capped.
func (g *gate) authenticated(c *gatedConn, host string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c.peerReleased.CompareAndSwap(false, true) {
		g.releasePeer(host)
	}
}

// handshake completes TLS and queues the connection for its server.
func (g *gate) handshake(c *gatedConn, host string) {
	if g.tls == nil {
		g.anon.push(c)
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
	hc := &handshakenConn{Conn: conn, info: info}
	if ti, ok := info.(credentials.TLSInfo); ok && len(ti.State.VerifiedChains) > 0 {
		g.authenticated(c, host)
		g.authed.push(hc)
		return
	}
	g.anon.push(hc)
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
