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
	for c := range p.conns {
		c.Close()
	}
}

// Restore forwards new connections again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
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
		_, _ = io.Copy(dst, src) // either side ending ends both
		done <- struct{}{}
	}
	go pipe(t, c)
	go pipe(c, t)
	<-done
	c.Close()
	t.Close()
	<-done
}
