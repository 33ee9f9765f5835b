package redis

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/gzip"
	"github.com/meshrelay/meshrelay/api/snapshot"
)

// formatGzip tags a stored snapshot as gzip-compressed snapshot.Marshal
// bytes. The tag lets a later release add formats and still read old data.
const formatGzip = 'g'

// DefaultMaxDecodedBytes bounds a stored snapshot's decompressed size: a
// corrupt or hostile value cannot make a reader allocate more.
const DefaultMaxDecodedBytes = 1 << 30

// codec compresses and decompresses snapshots, reusing gzip state.
type codec struct {
	// maxDecoded bounds a decompressed snapshot; DefaultMaxDecodedBytes
	// when 0.
	maxDecoded int64
	writers    sync.Pool // *gzip.Writer
	readers    sync.Pool // *gzip.Reader
	// decodes counts the snapshots decoded (or tried), for tests.
	decodes atomic.Int64
}

// maxDeflateRatio bounds how many times larger than its compressed form
// deflate can make data (about 1032:1), so that a gzip trailer's size,
// which the data states itself, never makes a reader allocate more than
// the data could decompress to.
const maxDeflateRatio = 1032

// encode returns the stored form of s.
func (c *codec) encode(s *snapshot.Snapshot) ([]byte, error) {
	raw, err := snapshot.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("encode snapshot: %w", err)
	}
	var buf bytes.Buffer
	buf.Grow(len(raw)/4 + 64)
	buf.WriteByte(formatGzip)
	w, _ := c.writers.Get().(*gzip.Writer)
	if w == nil {
		w, _ = gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	} else {
		w.Reset(&buf)
	}
	defer c.writers.Put(w)
	if _, err := w.Write(raw); err != nil {
		return nil, fmt.Errorf("compress snapshot: %w", err)
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("compress snapshot: %w", err)
	}
	return buf.Bytes(), nil
}

// decode parses a stored snapshot, as Redis returned it, and checks it
// against the version and hash stored beside it.
func (c *codec) decode(data, version, hash string) (*snapshot.Snapshot, error) {
	c.decodes.Add(1)
	if len(data) == 0 || data[0] != formatGzip {
		return nil, errors.New("decode snapshot: unknown format")
	}
	r, _ := c.readers.Get().(*gzip.Reader)
	var err error
	if r == nil {
		r, err = gzip.NewReader(strings.NewReader(data[1:]))
	} else {
		err = r.Reset(strings.NewReader(data[1:]))
	}
	if err != nil {
		return nil, fmt.Errorf("decompress snapshot: %w", err)
	}
	limit := c.maxDecoded
	if limit <= 0 {
		limit = DefaultMaxDecodedBytes
	}
	// The gzip trailer states the decompressed size (modulo 2^32): read
	// into a buffer of that size, not one grown by doubling, which cost a
	// cold start of thousands of clusters more than decompressing.
	hint := min(int64(binary.LittleEndian.Uint32([]byte(data[max(len(data)-4, 0):]))), int64(len(data))*maxDeflateRatio, limit)
	raw, err := readAll(io.LimitReader(r, limit+1), nil, int(hint))
	c.readers.Put(r)
	if err != nil {
		return nil, fmt.Errorf("decompress snapshot: %w", err)
	}
	if int64(len(raw)) > limit {
		return nil, fmt.Errorf("decompress snapshot: larger than the limit of %d bytes", limit)
	}
	// The snapshot's bodies share raw (snapshot.Unmarshal), which it keeps
	// alive: no more of it than the data, whatever the trailer said.
	if cap(raw) > len(raw)+len(raw)/8+64 {
		raw = slices.Clone(raw)
	}
	s, err := snapshot.Unmarshal(raw)
	if err != nil {
		return nil, err
	}
	v, h, err := storedHead(version, hash)
	if err != nil {
		return nil, err
	}
	if s.Version() != v {
		return nil, fmt.Errorf("decode snapshot: version %d, stored beside it %d", s.Version(), v)
	}
	if s.Hash() != h {
		return nil, fmt.Errorf("decode snapshot: hash %s, stored beside it %s", s.Hash().Short(), h.Short())
	}
	return s, nil
}

// storedHead parses the version and hash stored beside a snapshot.
func storedHead(version, hash string) (uint64, snapshot.Hash, error) {
	v, err := strconv.ParseUint(version, 10, 64)
	if err != nil {
		return 0, snapshot.Hash{}, fmt.Errorf("decode snapshot: version %q: %w", version, err)
	}
	h, err := snapshot.HashFromBytes([]byte(hash))
	if err != nil {
		return 0, snapshot.Hash{}, fmt.Errorf("decode snapshot: %w", err)
	}
	return v, h, nil
}

// readAll reads r to its end into buf, grown first to hold size bytes and
// one more, so that a size that is right reads to the end without growing.
func readAll(r io.Reader, buf []byte, size int) ([]byte, error) {
	buf = slices.Grow(buf[:0], size+1)
	for {
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, len(buf))
		}
	}
}

// versionField formats a version so that Lua compares versions as strings
// in numeric order: twenty digits hold every uint64 and Lua numbers do not.
func versionField(v uint64) string {
	return fmt.Sprintf("%020d", v)
}
