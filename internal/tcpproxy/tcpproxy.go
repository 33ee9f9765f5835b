package tcpproxy

import (
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// dialTimeout bounds each connection to the target.
const dialTimeout = 5 * time.Second

// Proxy forwards connections from Addr to a target. It is safe for
// concurrent use.
type Proxy struct {
	lis    net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
	// stall is open while the proxy is stalled, closed by Restore or Cut.
	stall chan struct{}
	wg    sync.WaitGroup
}

// Start listens on a free loopback port and forwards what it accepts to
// target (host:port), dialled anew for each connection.
func Start(target string) (*Proxy, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("proxy to %s: %w", target, err)
	}
	p := &Proxy{lis: lis, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	return p, nil
}

// Addr returns the address clients dial: 127.0.0.1:port.
func (p *Proxy) Addr() string { return p.lis.Addr().String() }

// Cut closes every forwarded connection and refuses new ones (they are
// accepted and closed at once) until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	p.unstall()
	for c := range p.conns {
		c.Close()
	}
}

// Stall drops every byte either way on the forwarded connections, and
// keeps them open when either end closes: a network that loses packets
// without closing connections, seen by both ends only as silence.
// Restore or Cut ends it; what was dropped is lost, so the connections
// are of no more use.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stall == nil {
		p.stall = make(chan struct{})
	}
}

// Restore forwards new connections again, and bytes again after Stall.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.cut = false
	p.unstall()
	p.mu.Unlock()
}

// unstall ends a stall. Callers hold p.mu.
func (p *Proxy) unstall() {
	if p.stall != nil {
		close(p.stall)
		p.stall = nil
	}
}

// stalled returns the channel closed when the stall ends, or nil when the
// proxy is not stalled.
func (p *Proxy) stalled() chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stall
}

// IsCut reports whether the proxy is cut.
func (p *Proxy) IsCut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut
}

// Close stops listening, closes every connection and waits for the
// forwarding goroutines.
func (p *Proxy) Close() error {
	err := p.lis.Close()
	p.Cut()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	for {
		c, err := p.lis.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			c.Close()
			continue
		}
		p.wg.Go(func() { p.forward(c) })
	}
}

// track records c unless the proxy is cut.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

// forward copies both ways between c and a new connection to the target
// until either side closes.
func (p *Proxy) forward(c net.Conn) {
	defer p.untrack(c)
	t, err := net.DialTimeout("tcp", p.target, dialTimeout)
	if err != nil || !p.track(t) {
		if t != nil {
			t.Close()
		}
		return
	}
	defer p.untrack(t)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, stallable{src, p}) // either side ending ends both
		done <- struct{}{}
	}
	go pipe(t, c)
	go pipe(c, t)
	<-done
	c.Close()
	t.Close()
	<-done
}

// stallable reads from a connection, dropping what it reads while the
// proxy is stalled, and holding back its end until the stall ends.
type stallable struct {
	net.Conn
	p *Proxy
}

func (s stallable) Read(b []byte) (int, error) {
	for {
		n, err := s.Conn.Read(b)
		stall := s.p.stalled()
		switch {
		case stall == nil:
			return n, err
		case err != nil:
			<-stall
			return n, err
		}
	}
}
