package bench

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshrelay/meshrelay/internal/adminclient"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// The hostile agent's shape: how long it attacks; how many connections it
// keeps trying to hold, and how many streams it opens on each; how many of
// those connections also send large messages and never finish them, and
// how many such messages each; and how much the attacked replica's memory
// may grow under the attack.
const (
	hostileDuration      = 15 * time.Second
	hostileConns         = 64
	hostileStreams       = 100
	hostileHeavyConns    = 4
	hostileHeavyMessages = 4
	hostileDeclaredBytes = 16 << 20
	hostileMaxGrowth     = 128 << 20
)

// hostileMethods are the calls the hostile agent opens: Sync streams that
// never send their Hello, and a message declared large on every call that
// needs only kilobytes.
var hostileMethods = []string{
	relayv1.Relay_Sync_FullMethodName,
	relayv1.Registration_Renew_FullMethodName,
	relayv1.Registration_Register_FullMethodName,
	relayv1.Trust_Report_FullMethodName,
	relayv1.Trust_Sign_FullMethodName,
	relayv1.Admin_ListClusters_FullMethodName,
}

// hostileTally counts what the hostile agent did and what the server did
// to it.
type hostileTally struct {
	dialed, refused, streams, closed atomic.Int64
	sent                             atomic.Int64 // bytes of unfinished messages
}

// hostile runs one cluster's credentials against replica p as a
// compromised agent would, for hostileDuration: it keeps up to
// hostileConns connections with the cluster's certificate, opens
// hostileStreams streams on each, holds Sync streams without a Hello,
// declares 16 MiB messages on the calls that need kilobytes and, on a few
// connections, sends all but the last byte of them; whatever the server
// closes it opens again. Meanwhile the fleet's other agents must stay
// connected, another agent of p restarted under the attack must be
// welcomed again, a new admin connection must work and p's resident memory
// must not grow by more than hostileMaxGrowth; an error says which did
// not. The checks that follow the fault see whether every agent is still
// converged.
func (c *chaosRun) hostile(ctx context.Context, rng *rand.Rand) (target, note string, err error) {
	i := rng.IntN(len(c.servers))
	p := c.servers[i]
	var own, newcomer *sim
	for _, k := range rng.Perm(len(c.sims)) {
		switch s := c.sims[k]; {
		case own == nil:
			own = s
		case newcomer == nil && s.replica == i:
			newcomer = s
		}
	}
	target = fmt.Sprintf("%s's certificate against %s", own.cluster.Name, p.id)
	cfg, err := c.hostileTLS(own, p)
	if err != nil {
		return target, "", err
	}
	before := c.connectedOthers(own)
	rss, _ := p.sample()
	actx, stop := context.WithTimeout(ctx, hostileDuration)
	defer stop()
	var tally hostileTally
	var wg sync.WaitGroup
	for k := range hostileConns {
		wg.Go(func() { hostileConn(actx, p.relay, cfg, k < hostileHeavyConns, &tally) })
	}
	var errs []error
	sleepCtx(actx, 2*time.Second)
	if newcomer != nil {
		if err := c.restartAgent(newcomer, false); err != nil {
			errs = append(errs, fmt.Errorf("restart %s under attack: %w", newcomer.cluster.Name, err))
		} else if !c.waitConnected(actx, newcomer) {
			errs = append(errs, fmt.Errorf("%s, restarted under attack, was not welcomed again within the attack", newcomer.cluster.Name))
		}
	}
	// Judge the fleet under attack, near its end.
	sleepCtx(actx, time.Until(deadlineOf(actx).Add(-3*time.Second)))
	during := c.connectedOthers(own)
	peak, _ := p.sample()
	if probe := c.probeAdmin(ctx, p); probe != nil {
		errs = append(errs, fmt.Errorf("a new admin connection to %s failed under attack: %w", p.id, probe))
	}
	stop()
	wg.Wait()
	if ctx.Err() != nil {
		return target, "cut short by the end of the soak", nil
	}
	growth := peak.RSSBytes - rss.RSSBytes
	note = fmt.Sprintf("dialed %d (refused %d), streams %d, closed by the server %d, %d MiB of unfinished messages sent; %s RSS %+d MiB; other agents connected %d → %d",
		tally.dialed.Load(), tally.refused.Load(), tally.streams.Load(), tally.closed.Load(), tally.sent.Load()>>20, p.id, growth>>20, before, during)
	if during < before {
		errs = append(errs, fmt.Errorf("%d other agents lost their connection under attack", before-during))
	}
	if growth > hostileMaxGrowth {
		errs = append(errs, fmt.Errorf("%s's memory grew by %d MiB under attack (at most %d MiB)", p.id, growth>>20, hostileMaxGrowth>>20))
	}
	return target, note, errors.Join(errs...)
}

func deadlineOf(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

// hostileTLS is the client TLS configuration of sim's agent (its
// certificate from its state directory), trusting replica p.
func (c *chaosRun) hostileTLS(s *sim, p *serverProcess) (*tls.Config, error) {
	dir := c.agentDir(s)
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	if err != nil {
		return nil, fmt.Errorf("hostile agent: load %s's certificate: %w", s.cluster.Name, err)
	}
	caPEM, err := os.ReadFile(p.caBundle)
	if err != nil {
		return nil, fmt.Errorf("hostile agent: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("hostile agent: no certificate in %s", p.caBundle)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert}, RootCAs: pool, ServerName: "127.0.0.1",
		NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS12,
	}, nil
}

// clusterStates lists every cluster's connection as the live replicas
// report it: the replica serving it, by cluster name.
func (c *chaosRun) clusterStates() map[string]string {
	served := map[string]string{}
	for _, p := range c.servers {
		if p.isKilled() {
			continue
		}
		st, err := p.admin.ListClusters(p.adminCtx, &relayv1.ListClustersRequest{})
		if err != nil {
			continue
		}
		for _, cl := range st.GetClusters() {
			if cl.GetConnected() && cl.GetReplica() == p.id {
				served[cl.GetName()] = p.id
			}
		}
	}
	return served
}

// connectedOthers counts the agents the replicas serve, less sim's own.
func (c *chaosRun) connectedOthers(s *sim) int {
	served := c.clusterStates()
	delete(served, s.cluster.Name)
	return len(served)
}

// waitConnected waits until a replica serves sim's agent, or ctx ends.
func (c *chaosRun) waitConnected(ctx context.Context, s *sim) bool {
	for {
		if _, ok := c.clusterStates()[s.cluster.Name]; ok {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// probeAdmin dials p afresh, as an operator's CLI would, and lists the
// clusters.
func (c *chaosRun) probeAdmin(ctx context.Context, p *serverProcess) error {
	cl, err := adminclient.Dial(adminclient.Options{
		Addr: p.relay, CAFile: p.caBundle, ServerName: "127.0.0.1", TokenFile: p.adminToken, MaxResponse: 1 << 30,
	})
	if err != nil {
		return err
	}
	defer cl.Close()
	cctx, cancel := context.WithTimeout(cl.Context(ctx), 5*time.Second)
	defer cancel()
	_, err = cl.ListClusters(cctx, &relayv1.ListClustersRequest{})
	return err
}

// hostileConn holds one hostile connection at a time until ctx ends,
// dialling again when the server closes it.
func hostileConn(ctx context.Context, addr string, cfg *tls.Config, heavy bool, t *hostileTally) {
	for ctx.Err() == nil {
		t.dialed.Add(1)
		d := tls.Dialer{Config: cfg, NetDialer: &net.Dialer{Timeout: 2 * time.Second}}
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			t.refused.Add(1)
			sleepCtx(ctx, 100*time.Millisecond)
			continue
		}
		h := newH2Conn(conn)
		if h.attack(ctx, heavy, t) {
			t.closed.Add(1)
		}
		conn.Close()
		sleepCtx(ctx, 50*time.Millisecond)
	}
}

// h2Conn is a raw HTTP/2 client connection that keeps to the server's
// flow control, so that what it sends is what a well-behaved transport
// could send.
type h2Conn struct {
	conn net.Conn
	fr   *http2.Framer
	wmu  sync.Mutex // writes to fr

	mu      sync.Mutex
	cond    *sync.Cond
	initial int64 // the server's initial stream window
	connWin int64
	streams map[uint32]int64 // stream windows beyond initial
	closed  bool
}

func newH2Conn(conn net.Conn) *h2Conn {
	h := &h2Conn{conn: conn, fr: http2.NewFramer(conn, conn), initial: 65535, connWin: 65535, streams: map[uint32]int64{}}
	h.cond = sync.NewCond(&h.mu)
	return h
}

// attack opens hostileStreams streams cycling through hostileMethods,
// each but Sync's with a message prefix declaring hostileDeclaredBytes;
// when heavy, it then sends all but the last byte of the first
// hostileHeavyMessages of them. It waits until ctx ends and reports
// whether the server closed the connection before.
func (h *h2Conn) attack(ctx context.Context, heavy bool, t *hostileTally) (closedByServer bool) {
	stop := context.AfterFunc(ctx, func() { h.conn.Close() })
	defer stop()
	readDone := make(chan struct{})
	defer func() { h.conn.Close(); <-readDone }()
	if _, err := h.conn.Write([]byte(http2.ClientPreface)); err != nil {
		close(readDone)
		return ctx.Err() == nil
	}
	go h.read(readDone)
	if h.write(func() error { return h.fr.WriteSettings() }) != nil {
		return ctx.Err() == nil
	}
	var hdr bytes.Buffer
	enc := hpack.NewEncoder(&hdr)
	prefix := make([]byte, 5)
	binary.BigEndian.PutUint32(prefix[1:], hostileDeclaredBytes)
	var large []uint32
	for i := range hostileStreams {
		method := hostileMethods[i%len(hostileMethods)]
		hdr.Reset()
		for _, f := range [][2]string{
			{":method", "POST"}, {":scheme", "https"}, {":path", method}, {":authority", "127.0.0.1"},
			{"content-type", "application/grpc"}, {"te", "trailers"},
		} {
			_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		id := uint32(2*i + 1)
		err := h.write(func() error {
			return h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hdr.Bytes(), EndHeaders: true})
		})
		if err != nil {
			return ctx.Err() == nil
		}
		t.streams.Add(1)
		if method == relayv1.Relay_Sync_FullMethodName {
			continue
		}
		if err := h.send(id, prefix); err != nil {
			return ctx.Err() == nil
		}
		large = append(large, id)
	}
	if heavy {
		chunk := make([]byte, 16<<10)
		for _, id := range large[:min(hostileHeavyMessages, len(large))] {
			for left := hostileDeclaredBytes - 1; left > 0; left -= len(chunk) {
				if err := h.send(id, chunk[:min(len(chunk), left)]); err != nil {
					return ctx.Err() == nil
				}
				t.sent.Add(int64(min(len(chunk), left)))
			}
		}
	}
	select {
	case <-ctx.Done():
		return false
	case <-readDone:
		return ctx.Err() == nil
	}
}

func (h *h2Conn) write(f func() error) error {
	h.wmu.Lock()
	defer h.wmu.Unlock()
	return f()
}

// send writes data on stream id once the connection's and the stream's
// windows allow it.
func (h *h2Conn) send(id uint32, data []byte) error {
	n := int64(len(data))
	h.mu.Lock()
	for !h.closed && (h.connWin < n || h.initial+h.streams[id] < n) {
		h.cond.Wait()
	}
	if h.closed {
		h.mu.Unlock()
		return net.ErrClosed
	}
	h.connWin -= n
	h.streams[id] -= n
	h.mu.Unlock()
	return h.write(func() error { return h.fr.WriteData(id, false, data) })
}

// read follows the server's settings and window updates, answers its
// pings, and drops everything else, until the connection ends.
func (h *h2Conn) read(done chan<- struct{}) {
	defer close(done)
	defer func() {
		h.mu.Lock()
		h.closed = true
		h.cond.Broadcast()
		h.mu.Unlock()
	}()
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if f.IsAck() {
				continue
			}
			if v, ok := f.Value(http2.SettingInitialWindowSize); ok {
				h.mu.Lock()
				h.initial = int64(v)
				h.cond.Broadcast()
				h.mu.Unlock()
			}
			_ = h.write(h.fr.WriteSettingsAck)
		case *http2.WindowUpdateFrame:
			h.mu.Lock()
			if f.StreamID == 0 {
				h.connWin += int64(f.Increment)
			} else {
				h.streams[f.StreamID] += int64(f.Increment)
			}
			h.cond.Broadcast()
			h.mu.Unlock()
		case *http2.PingFrame:
			if !f.IsAck() {
				_ = h.write(func() error { return h.fr.WritePing(true, f.Data) })
			}
		}
	}
}
