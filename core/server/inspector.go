package server

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"

	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"golang.org/x/net/http2/hpack"
)

// HTTP/2 as the inspector reads it (RFC 9113).
const (
	h2Preface       = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
	h2FrameHeader   = 9
	h2MaxFrame      = 16 << 10 // gRPC's servers accept no larger frame
	h2Data          = 0x0
	h2Headers       = 0x1
	h2RSTStream     = 0x3
	h2Continuation  = 0x9
	h2EndStream     = 0x1
	h2EndHeaders    = 0x4
	h2Padded        = 0x8
	h2Priority      = 0x20
	grpcPrefix      = 5
	maxHeaderString = 64 << 10
)

// errRefused is the error of a connection the inspector closed.
var errRefused = errors.New("connection refused by a limit")

// limits are the receive limits of one connection.
type limits struct {
	// small bounds every message but Sync's and Trust reports', and
	// Sync's too until the connection is authenticated.
	small int
	// sync bounds a Sync message of an authenticated connection.
	sync int
	// report bounds a Trust report.
	report int
	// whole is what the connection's gRPC server refuses by itself,
	// before reading the message: larger messages are left to it.
	whole int
	// conn bounds the bytes of unfinished messages on the connection,
	// before and after it is authenticated.
	conn, authedConn int64
}

// messageLimit is the largest message a method may receive.
func (l limits) messageLimit(path string, authenticated bool) int {
	switch path {
	case relayv1.Relay_Sync_FullMethodName:
		if authenticated {
			return l.sync
		}
	case relayv1.Trust_Report_FullMethodName:
		return max(l.report, l.small)
	}
	return l.small
}

// byteBudget is a cluster's budget of bytes in unfinished messages, shared
// by its connections.
type byteBudget struct {
	mu        sync.Mutex
	used, max int64
}

func (b *byteBudget) take(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.max {
		return false
	}
	b.used += n
	return true
}

func (b *byteBudget) give(n int64) { b.add(-n) }

func (b *byteBudget) add(n int64) {
	b.mu.Lock()
	b.used += n
	b.mu.Unlock()
}

func (b *byteBudget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// inspectedConn reads the HTTP/2 frames a client sends as they pass to
// gRPC, without changing them. It learns each stream's method from its
// headers and reads the 5-byte prefix of each gRPC message, which declares
// the message's length. gRPC opens its flow-control window to that length
// and holds what arrives until the message is complete, so a declared
// length is what an unfinished message may cost. The connection is failed,
// before gRPC reads the prefix, when a message is larger than its method
// allows, or when the connection's or its cluster's unfinished messages
// would exceed their budget. Frames the server writes are read for the
// streams it ends, whose unfinished messages it drops.
type inspectedConn struct {
	net.Conn
	lim    limits
	refuse func(c *inspectedConn, reason string, err error)

	mu       sync.Mutex
	failed   error
	preface  int
	in, out  framer
	block    []byte // the header block being gathered
	blockFor uint32
	// endAfterBlock: the HEADERS frame of the block ended its stream.
	endAfterBlock bool
	dec           *hpack.Decoder
	path          string
	streams       map[uint32]*inStream
	last          uint32
	inflight      int64
	// authenticated lifts Sync's limit; cluster, when set, is the
	// budget the connection's messages are also counted against.
	authenticated bool
	cluster       *byteBudget
	// boundTo is the cluster the connection serves, once known; the
	// gate's mu guards it. gated is the accepted connection under an
	// unauthenticated one, whose address's count verify releases.
	boundTo  string
	gated    *gatedConn
	closed   bool
	releases []func()
}

// framer follows frame boundaries in one direction of the connection.
type framer struct {
	hdr  [h2FrameHeader]byte
	hdrN int
	typ  byte
	flag byte
	id   uint32
	left int // payload bytes still to come
	// For DATA: pad is the padding at the frame's end, padKnown whether
	// the pad length was read.
	pad      int
	padKnown bool
}

// inStream is one stream's message being received.
type inStream struct {
	method string
	limit  int
	prefix [grpcPrefix]byte
	pN     int
	left   int   // bytes of the current message still to come
	held   int64 // its declared length, counted
	budget *byteBudget
}

func newInspectedConn(c net.Conn, lim limits, refuse func(*inspectedConn, string, error)) *inspectedConn {
	ic := &inspectedConn{Conn: c, lim: lim, refuse: refuse, streams: map[uint32]*inStream{}}
	ic.dec = hpack.NewDecoder(4096, ic.field)
	ic.dec.SetMaxStringLength(maxHeaderString)
	return ic
}

// field records a stream's :path.
func (c *inspectedConn) field(f hpack.HeaderField) {
	if f.Name == ":path" {
		c.path = f.Value
	}
}

// authenticate lifts the connection's limits to an authenticated agent's
// and counts what it holds against its cluster's budget from now on.
func (c *inspectedConn) authenticate(cluster *byteBudget) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.authenticated, c.cluster = true, cluster
	for _, s := range c.streams {
		s.limit = c.lim.messageLimit(s.method, true)
	}
	if cluster == nil {
		return
	}
	// What is already held counts from now on; the budget is checked on
	// the next message.
	for _, s := range c.streams {
		if s.held > 0 && s.budget == nil {
			cluster.add(s.held)
			s.budget = cluster
		}
	}
}

func (c *inspectedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.mu.Lock()
		ferr := c.failed
		if ferr == nil {
			if reason, rerr := c.inspect(p[:n]); rerr != nil {
				c.failed = fmt.Errorf("%w: %w", errRefused, rerr)
				ferr = c.failed
				c.mu.Unlock()
				c.refuse(c, reason, rerr)
				c.Close()
				return 0, ferr
			}
		}
		c.mu.Unlock()
		if ferr != nil {
			return 0, ferr
		}
	}
	return n, err
}

func (c *inspectedConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.written(p)
	c.mu.Unlock()
	return c.Conn.Write(p)
}

// Close closes the connection and returns what its unfinished messages
// held to their budgets.
func (c *inspectedConn) Close() error {
	c.mu.Lock()
	var releases []func()
	if !c.closed {
		c.closed = true
		for id := range c.streams {
			c.end(id)
		}
		releases, c.releases = c.releases, nil
	}
	c.mu.Unlock()
	err := c.Conn.Close()
	for _, fn := range releases {
		fn()
	}
	return err
}

// onClose runs fn once the connection is closed.
func (c *inspectedConn) onClose(fn func()) {
	c.mu.Lock()
	if !c.closed {
		c.releases = append(c.releases, fn)
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	fn()
}

// inspect follows the frames in p; a non-empty reason says which limit
// refuses the connection.
func (c *inspectedConn) inspect(p []byte) (reason string, err error) {
	if c.preface < len(h2Preface) {
		k := min(len(h2Preface)-c.preface, len(p))
		c.preface += k
		p = p[k:]
	}
	f := &c.in
	for len(p) > 0 {
		if f.hdrN < h2FrameHeader {
			var complete bool
			if p, complete = f.readHeader(p); !complete {
				return "", nil
			}
			if f.left > h2MaxFrame {
				return "frame_too_large", fmt.Errorf("a frame of %d bytes", f.left)
			}
			if f.typ == h2Headers || f.typ == h2Continuation {
				c.block = c.block[:0]
			}
		}
		k := min(f.left, len(p))
		chunk := p[:k]
		p = p[k:]
		f.left -= k
		switch f.typ {
		case h2Data:
			if reason, err := c.data(f, chunk); err != nil {
				return reason, err
			}
		case h2Headers, h2Continuation:
			c.block = append(c.block, chunk...)
		}
		if f.left > 0 {
			continue
		}
		// The frame is complete.
		f.hdrN = 0
		switch f.typ {
		case h2Headers, h2Continuation:
			if err := c.headers(f); err != nil {
				return "bad_headers", err
			}
		case h2Data:
			if f.flag&h2EndStream != 0 {
				c.end(f.id)
			}
		case h2RSTStream:
			c.end(f.id)
		}
	}
	return "", nil
}

// readHeader reads what p holds of the next frame's header, decodes the
// header once it is complete (start) and reports whether it is; it
// returns the rest of p.
func (f *framer) readHeader(p []byte) ([]byte, bool) {
	k := copy(f.hdr[f.hdrN:], p)
	f.hdrN += k
	if f.hdrN < h2FrameHeader {
		return p[k:], false
	}
	f.start()
	return p[k:], true
}

// start decodes the frame header just read.
func (f *framer) start() {
	f.left = int(f.hdr[0])<<16 | int(f.hdr[1])<<8 | int(f.hdr[2])
	f.typ, f.flag = f.hdr[3], f.hdr[4]
	f.id = binary.BigEndian.Uint32(f.hdr[5:]) & 0x7fffffff
	f.pad, f.padKnown = 0, f.flag&h2Padded == 0
}

// headers decodes a HEADERS or CONTINUATION frame's block: the first
// block of a stream names its method.
func (c *inspectedConn) headers(f *framer) error {
	b := c.block
	if f.typ == h2Headers {
		if f.flag&h2Padded != 0 {
			if len(b) < 1 || int(b[0]) > len(b)-1 {
				return errors.New("bad padding")
			}
			b = b[1 : len(b)-int(b[0])]
		}
		if f.flag&h2Priority != 0 {
			if len(b) < 5 {
				return errors.New("bad priority")
			}
			b = b[5:]
		}
		c.blockFor, c.path = f.id, ""
	} else if f.id != c.blockFor {
		return errors.New("CONTINUATION of another stream")
	}
	if _, err := c.dec.Write(b); err != nil {
		return err
	}
	end := f.flag&h2EndStream != 0 && f.typ == h2Headers
	if f.flag&h2EndHeaders == 0 {
		if end {
			c.endAfterBlock = true
		}
		return nil
	}
	if err := c.dec.Close(); err != nil {
		return err
	}
	id := c.blockFor
	if id > c.last {
		// A new stream: its method sets its limit.
		c.last = id
		c.streams[id] = &inStream{method: c.path, limit: c.lim.messageLimit(c.path, c.authenticated)}
	}
	if end || c.endAfterBlock {
		c.end(id)
	}
	c.endAfterBlock = false
	return nil
}

// data reads a DATA frame's payload: the gRPC message prefixes in it.
func (c *inspectedConn) data(f *framer, b []byte) (string, error) {
	if !f.padKnown && len(b) > 0 {
		f.pad, f.padKnown = int(b[0]), true
		b = b[1:]
	}
	// Padding is at the frame's end: f.left bytes follow b.
	if over := f.pad - f.left; over > 0 {
		b = b[:max(len(b)-over, 0)]
	}
	s := c.streams[f.id]
	if s == nil {
		// A stream that ended, or a protocol error gRPC refuses.
		return "", nil
	}
	for len(b) > 0 {
		if s.left > 0 {
			k := min(s.left, len(b))
			s.left -= k
			b = b[k:]
			if s.left == 0 {
				c.release(s)
			}
			continue
		}
		k := copy(s.prefix[s.pN:], b)
		s.pN += k
		b = b[k:]
		if s.pN < grpcPrefix {
			break
		}
		s.pN = 0
		n := int(binary.BigEndian.Uint32(s.prefix[1:]))
		if n == 0 {
			continue
		}
		if reason, err := c.hold(s, n); err != nil {
			return reason, err
		}
		s.left = n
	}
	return "", nil
}

// hold counts a message of n bytes about to be received on s, or says
// which limit refuses it.
func (c *inspectedConn) hold(s *inStream, n int) (string, error) {
	if n > c.lim.whole {
		// gRPC refuses it from its prefix, before reading it.
		return "", nil
	}
	if n > s.limit {
		return "message_too_large", fmt.Errorf("a message of %d bytes for %q, over its limit of %d", n, s.method, s.limit)
	}
	budget := c.lim.conn
	if c.authenticated {
		budget = c.lim.authedConn
	}
	if c.inflight+int64(n) > budget {
		return "connection_bytes_in_flight", fmt.Errorf("unfinished messages on one connection over %d bytes", budget)
	}
	if c.cluster != nil {
		if !c.cluster.take(int64(n)) {
			return "cluster_bytes_in_flight", fmt.Errorf("unfinished messages of one cluster over %d bytes", c.cluster.max)
		}
		s.budget = c.cluster
	}
	c.inflight += int64(n)
	s.held = int64(n)
	return "", nil
}

// release returns what a finished message held.
func (c *inspectedConn) release(s *inStream) {
	if s.held == 0 {
		return
	}
	c.inflight -= s.held
	if s.budget != nil {
		s.budget.give(s.held)
	}
	s.held, s.budget = 0, nil
}

// end forgets a stream that ended, releasing its unfinished message.
func (c *inspectedConn) end(id uint32) {
	if s, ok := c.streams[id]; ok {
		c.release(s)
		delete(c.streams, id)
	}
}

// written follows the frames the server writes: a stream it resets, or
// whose trailers it sends, is over, and gRPC drops what it held of it.
func (c *inspectedConn) written(p []byte) {
	f := &c.out
	for len(p) > 0 {
		if f.hdrN < h2FrameHeader {
			var complete bool
			if p, complete = f.readHeader(p); !complete {
				return
			}
			switch {
			case f.typ == h2RSTStream, f.typ == h2Headers && f.flag&h2EndStream != 0:
				c.end(f.id)
			}
		}
		k := min(f.left, len(p))
		p = p[k:]
		f.left -= k
		if f.left == 0 {
			f.hdrN = 0
		}
	}
}
