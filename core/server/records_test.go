package server

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/agent"
	"github.com/meshrelay/meshrelay/internal/testutil"
)

// recordProxy forwards connections to target and reads the TLS record
// headers of what clients send, to learn the largest record.
type recordProxy struct {
	lis    net.Listener
	target string

	mu      sync.Mutex
	records int
	largest int
	bytes   int
}

func startRecordProxy(t *testing.T, target string) *recordProxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &recordProxy{lis: lis, target: target}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go p.forward(c)
		}
	}()
	return p
}

func (p *recordProxy) forward(c net.Conn) {
	defer c.Close()
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer up.Close()
	go func() { _, _ = io.Copy(c, up); c.Close() }()
	var hdr [5]byte // type, version, length (RFC 8446, 5.1)
	for {
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint16(hdr[3:]))
		p.mu.Lock()
		p.records++
		p.largest = max(p.largest, n)
		p.bytes += n
		p.mu.Unlock()
		if _, err := up.Write(hdr[:]); err != nil {
			return
		}
		if _, err := io.CopyN(up, c, int64(n)); err != nil {
			return
		}
	}
}

func (p *recordProxy) Addr() string { return p.lis.Addr().String() }

func (p *recordProxy) seen() (records, largest, bytes int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.records, p.largest, p.bytes
}

// An agent sends in TLS records of at most about 2 KiB, even in bulk and
// past the first 128 KB, where crypto/tls would grow them to 16 KiB: the
// server holds, for every connection, a read buffer of about three of the
// largest records (core/agent/credentials.go, writeBatch).
func TestAgentSendsSmallTLSRecords(t *testing.T) {
	ts := startServer(t, nil, "")
	proxy := startRecordProxy(t, ts.Addr())
	east := startAgent(t, ts, "east", ts.register("east"), func(o *agent.Options) { o.Server = proxy.Addr() })
	var rs []snapshot.Resource
	pad := strings.Repeat("x", 1000)
	for i := range 300 {
		r, err := snapshot.FromJSON(fmt.Appendf(nil, `{"apiVersion":"v1","kind":"Service","metadata":{"name":"svc-%03d","namespace":"default","annotations":{"pad":%q}},"spec":{"ports":[{"port":80}]}}`, i, pad))
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	in, err := snapshot.New(0, rs)
	if err != nil {
		t.Fatal(err)
	}
	east.src.ch <- in
	testutil.Eventually(t, "east's outputs", func() bool { return len(east.sink.names()) == len(rs) })
	records, largest, bytes := proxy.seen()
	if bytes < in.Size() {
		t.Fatalf("the proxy saw %d bytes, less than the %d-byte input: the agent did not connect through it", bytes, in.Size())
	}
	// 2 KiB of data, the record's content type and AEAD tag.
	if limit := 2<<10 + 256; largest > limit {
		t.Errorf("the agent sent a %d-byte TLS record (of %d, %d bytes), want at most %d", largest, records, bytes, limit)
	}
}
