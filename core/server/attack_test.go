package server

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshrelay/meshrelay/api/snapshot"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
)

// TestAttackMemory reproduces memory attacks, by a client without
// credentials and by an authenticated agent's input, against a running
// server process and reports its resident memory. It runs only when asked:
//
//	MESHRELAY_ATTACK_SERVER=127.0.0.1:19900 MESHRELAY_ATTACK_DATA=DATA-DIR \
//	MESHRELAY_ATTACK_PID=PID MESHRELAY_ATTACK=unauthenticated|helloless|parts|renew|register|hellos|conns \
//	go test ./core/server -run TestAttackMemory -v
//
// "unauthenticated": 40 streams without a client certificate, each
// announcing a 16 MiB message and sending all of it but its last byte.
// "helloless": 2000 streams without a client certificate that never send
// anything, 8 per connection.
// "parts": one registered agent sending 40 input parts of 15 MiB, each
// with More set.
// "renew": one agent's certificate, 40 unfinished 16 MiB Renew messages
// on one connection.
// "register" (a server in --mode tls): no credentials, 5 connections of 8
// unfinished 16 MiB Register messages.
// "hellos": one agent's certificate holding 70 Sync streams without a
// Hello; reports how often another cluster's agent is welcomed in 30s.
// "conns" (a server with --max-connections 200): one agent's certificate
// holding 197 idle connections; reports whether another cluster's agent,
// an administrator and a new registration get through.
func TestAttackMemory(t *testing.T) {
	addr, dataDir := os.Getenv("MESHRELAY_ATTACK_SERVER"), os.Getenv("MESHRELAY_ATTACK_DATA")
	pid, _ := strconv.Atoi(os.Getenv("MESHRELAY_ATTACK_PID"))
	if addr == "" || dataDir == "" || pid == 0 {
		t.Skip("set MESHRELAY_ATTACK_SERVER, MESHRELAY_ATTACK_DATA and MESHRELAY_ATTACK_PID to run")
	}
	caPEM, err := os.ReadFile(filepath.Join(dataDir, "ca-bundle.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	before := rss(t, pid)
	peak := &peakRSS{pid: pid, t: t}
	stop := peak.sample()
	start := time.Now()
	switch os.Getenv("MESHRELAY_ATTACK") {
	case "unauthenticated":
		attackUnauthenticated(t, addr, pool, 40, 16<<20)
	case "parts":
		attackParts(t, addr, dataDir, pool, 40, 15<<20)
	case "helloless":
		open := attackHelloless(t, addr, pool, 2000)
		t.Logf("streams still open after 3s: %d of 2000", open)
	case "renew":
		attackRenew(t, addr, dataDir, pool)
	case "register":
		attackRegister(t, addr, pool)
	case "hellos":
		attackHellos(t, addr, dataDir, pool)
	case "conns":
		attackConns(t, addr, dataDir, pool)
	default:
		t.Fatal("MESHRELAY_ATTACK must be unauthenticated, helloless, parts, renew, register, hellos or conns")
	}
	// Hold the attack a moment longer, as an attacker would.
	time.Sleep(2 * time.Second)
	stop()
	t.Logf("server RSS: before %d MiB, peak during the attack %d MiB (attack took %s)", before>>20, peak.max>>20, time.Since(start).Round(100*time.Millisecond))
}

// rss reads a process's resident set size in bytes.
func rss(t *testing.T, pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

type peakRSS struct {
	pid int
	t   *testing.T
	mu  sync.Mutex
	max int64
}

func (p *peakRSS) sample() (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			if v := rss(p.t, p.pid); v > p.max {
				p.max = v
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// attackUnauthenticated opens streams over raw HTTP/2 without a client
// certificate, 8 per connection, each announcing a message of size bytes
// and sending all of it but the last byte.
func attackUnauthenticated(t *testing.T, addr string, pool *x509.CertPool, streams, size int) {
	var wg sync.WaitGroup
	for c := 0; c < streams; c += 8 {
		wg.Go(func() {
			if err := rawStreams(addr, pool, min(8, streams-c), size); err != nil {
				t.Logf("connection %d: %v", c/8, err)
			}
		})
	}
	wg.Wait()
}

// attackHelloless opens streams that send nothing and reports how many the
// server has not closed after three seconds.
func attackHelloless(t *testing.T, addr string, pool *x509.CertPool, streams int) int {
	var (
		mu    sync.Mutex
		conns []*h2conn
	)
	var wg sync.WaitGroup
	for c := 0; c < streams; c += 8 {
		wg.Go(func() {
			h, err := openStreams(addr, pool, min(8, streams-c))
			if err != nil {
				t.Logf("connection %d: %v", c/8, err)
				return
			}
			mu.Lock()
			conns = append(conns, h)
			mu.Unlock()
		})
	}
	wg.Wait()
	time.Sleep(3 * time.Second)
	open := 0
	for _, h := range conns {
		h.mu.Lock()
		for id := range h.stream {
			if !h.closed[id] && h.err == nil {
				open++
			}
		}
		h.mu.Unlock()
		defer h.c.Close()
	}
	return open
}

// openStreams opens n Sync streams on a new connection and sends nothing
// on them.
func openStreams(addr string, pool *x509.CertPool, n int) (*h2conn, error) {
	tc, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS13})
	if err != nil {
		return nil, err
	}
	h := &h2conn{c: tc, conn: 65535, init: 65535, stream: map[uint32]int64{}, closed: map[uint32]bool{}}
	h.cond = sync.NewCond(&h.mu)
	if _, err := tc.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")); err != nil {
		return nil, err
	}
	h.frame(4, 0, 0, nil)
	go h.read()
	for i := range n {
		id := uint32(2*i + 1)
		h.mu.Lock()
		h.stream[id] = h.init
		h.mu.Unlock()
		h.frame(1, 4, id, grpcHeaders(addr))
	}
	return h, nil
}

// h2conn is a minimal HTTP/2 client: enough to open gRPC streams and send
// DATA within the flow-control windows the server grants.
type h2conn struct {
	c      net.Conn
	wmu    sync.Mutex
	mu     sync.Mutex
	cond   *sync.Cond
	conn   int64
	stream map[uint32]int64
	init   int64
	closed map[uint32]bool
	err    error
}

func rawStreams(addr string, pool *x509.CertPool, n, size int) error {
	tc, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS13})
	if err != nil {
		return err
	}
	defer tc.Close()
	h := &h2conn{c: tc, conn: 65535, init: 65535, stream: map[uint32]int64{}, closed: map[uint32]bool{}}
	h.cond = sync.NewCond(&h.mu)
	if _, err := tc.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")); err != nil {
		return err
	}
	h.frame(4, 0, 0, nil) // SETTINGS
	go h.read()
	var wg sync.WaitGroup
	for i := range n {
		id := uint32(2*i + 1)
		h.mu.Lock()
		h.stream[id] = h.init
		h.mu.Unlock()
		h.frame(1, 4, id, grpcHeaders(addr)) // HEADERS, END_HEADERS
		wg.Go(func() { h.sendMessage(id, size) })
	}
	wg.Wait()
	return h.err
}

// grpcHeaders encodes a Sync call's request headers as HPACK literals.
func grpcHeaders(authority string) []byte {
	var b []byte
	for _, kv := range [][2]string{{":method", "POST"}, {":scheme", "https"}, {":path", relayv1.Relay_Sync_FullMethodName},
		{":authority", authority}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		b = append(b, 0, byte(len(kv[0])))
		b = append(b, kv[0]...)
		b = append(b, byte(len(kv[1])))
		b = append(b, kv[1]...)
	}
	return b
}

func (h *h2conn) frame(typ, flags byte, stream uint32, payload []byte) error {
	h.wmu.Lock()
	defer h.wmu.Unlock()
	hdr := make([]byte, 9)
	hdr[0], hdr[1], hdr[2] = byte(len(payload)>>16), byte(len(payload)>>8), byte(len(payload))
	hdr[3], hdr[4] = typ, flags
	binary.BigEndian.PutUint32(hdr[5:], stream)
	if _, err := h.c.Write(append(hdr, payload...)); err != nil {
		return err
	}
	return nil
}

// sendMessage sends a gRPC message prefix announcing size bytes, then all
// but the last byte, as the windows allow.
func (h *h2conn) sendMessage(id uint32, size int) {
	prefix := make([]byte, 5)
	binary.BigEndian.PutUint32(prefix[1:], uint32(size))
	chunk := make([]byte, 16<<10)
	left := size - 1
	first := true
	for left > 0 {
		n := min(len(chunk), left)
		h.mu.Lock()
		for h.err == nil && !h.closed[id] && (h.conn <= 0 || h.stream[id] <= 0) {
			h.cond.Wait()
		}
		if h.err != nil || h.closed[id] {
			h.mu.Unlock()
			return
		}
		n = int(min(int64(n), h.conn, h.stream[id]))
		h.conn -= int64(n)
		h.stream[id] -= int64(n)
		h.mu.Unlock()
		payload := chunk[:n]
		if first {
			payload = append(append([]byte{}, prefix...), chunk[:n-5]...)
			first = false
		}
		if err := h.frame(0, 0, id, payload); err != nil {
			return
		}
		left -= n
	}
}

// read handles the server's frames: settings, window updates, pings,
// stream resets.
func (h *h2conn) read() {
	r := bufio.NewReader(h.c)
	hdr := make([]byte, 9)
	fail := func(err error) {
		h.mu.Lock()
		h.err = err
		h.cond.Broadcast()
		h.mu.Unlock()
	}
	for {
		if _, err := io.ReadFull(r, hdr); err != nil {
			fail(err)
			return
		}
		length := int(hdr[0])<<16 | int(hdr[1])<<8 | int(hdr[2])
		typ, flags, id := hdr[3], hdr[4], binary.BigEndian.Uint32(hdr[5:])&0x7fffffff
		payload := make([]byte, length)
		if _, err := io.ReadFull(r, payload); err != nil {
			fail(err)
			return
		}
		h.mu.Lock()
		switch typ {
		case 4: // SETTINGS
			if flags&1 == 0 {
				for i := 0; i+6 <= len(payload); i += 6 {
					if binary.BigEndian.Uint16(payload[i:]) == 4 {
						v := int64(binary.BigEndian.Uint32(payload[i+2:]))
						for s := range h.stream {
							h.stream[s] += v - h.init
						}
						h.init = v
					}
				}
				go h.frame(4, 1, 0, nil)
			}
		case 8: // WINDOW_UPDATE
			inc := int64(binary.BigEndian.Uint32(payload) & 0x7fffffff)
			if id == 0 {
				h.conn += inc
			} else {
				h.stream[id] += inc
			}
		case 6: // PING
			if flags&1 == 0 {
				go h.frame(6, 1, 0, payload)
			}
		case 3: // RST_STREAM
			h.closed[id] = true
		case 1: // HEADERS: trailers-only answers end the stream
			if flags&1 != 0 {
				h.closed[id] = true
			}
		case 7: // GOAWAY
			h.err = fmt.Errorf("goaway")
		}
		h.cond.Broadcast()
		h.mu.Unlock()
	}
}

// attackParts registers a cluster with the admin token and sends input
// parts of size bytes with More set.
func attackParts(t *testing.T, addr, dataDir string, pool *x509.CertPool, parts, size int) {
	_, stream := attackSync(t, addr, dataDir, pool)
	data := strings.Repeat("x", max(size-128, 1))
	nacks := make(chan string, parts)
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				return
			}
			if a := m.GetAck(); a != nil && a.GetNack() {
				nacks <- a.GetError()
			}
		}
	}()
	for i := range parts {
		name := fmt.Sprintf("cm-%d", i)
		body := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":%q,"namespace":"ns"},"data":{"x":%q}}`, name, data)
		r, err := snapshot.NewResource(snapshot.ID{Version: "v1", Kind: "ConfigMap", Namespace: "ns", Name: name}, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		msg := &relayv1.AgentMessage{Msg: &relayv1.AgentMessage_Input{Input: &relayv1.InputSnapshot{
			Delta: snapshot.DeltaToProto(snapshot.Delta{Full: true, Version: 1, Upserts: []snapshot.Resource{r}}, true)}}}
		if err := stream.Send(msg); err != nil {
			t.Logf("part %d: %v", i, err)
			break
		}
	}
	select {
	case n := <-nacks:
		t.Logf("server nacked: %s", n)
	case <-time.After(3 * time.Second):
		t.Log("no nack")
	}
}
