package traffic

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"google.golang.org/protobuf/proto"
)

// Encoder turns windows into relayv1.TrafficWindow messages for one agent.
// It names each edge once per stream; Reset forgets the names, for a new
// stream or after a window that could not be sent.
type Encoder struct {
	// MaxBytes bounds a message; edges beyond it are dropped and counted.
	MaxBytes int
	// MaxNames bounds the edges named on one stream; the encoder starts
	// numbering again, naming edges anew, when it is reached.
	MaxNames int

	stream uint64
	ids    map[Edge]uint32
}

// Reset forgets the names sent; the next window names its edges again.
func (e *Encoder) Reset() { e.ids = nil }

// Encode returns the message for a window that closed at end, of length
// window, on stream (a number the agent changes with each new stream).
// It returns nil when there is nothing to say.
func (e *Encoder) Encode(stream uint64, end time.Time, window time.Duration, edges map[Edge]*Stats, dropped map[string]uint64) *relayv1.TrafficWindow {
	if stream != e.stream || e.ids == nil || len(e.ids)+len(edges) > e.MaxNames {
		e.stream, e.ids = stream, map[Edge]uint32{}
	}
	if len(edges) == 0 && len(dropped) == 0 {
		return nil
	}
	msg := &relayv1.TrafficWindow{EndUnixMs: end.UnixMilli(), Seconds: uint32(window.Round(time.Second) / time.Second)}
	size := proto.Size(msg) + 64
	type entry struct {
		id    uint32
		stats *Stats
	}
	var entries []entry
	var left uint64
	for _, k := range sortedEdges(edges) {
		s := edges[k]
		id, named := e.ids[k]
		var name *relayv1.TrafficEdgeName
		if !named {
			id = uint32(len(e.ids) + 1)
			name = &relayv1.TrafficEdgeName{Id: id, SourceWorkload: k.SourceWorkload, DestinationCluster: k.DestinationCluster,
				DestinationService: k.DestinationService, Protocol: k.Protocol}
		}
		// An id delta takes at most 5 bytes.
		n := len(appendStats(nil, s)) + 5
		if name != nil {
			n += proto.Size(name) + 3
		}
		if size+n > e.MaxBytes {
			left++
			continue
		}
		size += n
		if name != nil {
			e.ids[k] = id
			msg.Names = append(msg.Names, name)
		}
		entries = append(entries, entry{id, s})
	}
	slices.SortFunc(entries, func(a, b entry) int { return cmp.Compare(a.id, b.id) })
	prev := uint32(0)
	for _, en := range entries {
		msg.Edges = append(msg.Edges, uint64(en.id-prev))
		msg.Edges = appendStats(msg.Edges, en.stats)
		prev = en.id
	}
	if left > 0 {
		if dropped == nil {
			dropped = map[string]uint64{}
		}
		dropped[DropSize] += left
	}
	if len(dropped) > 0 {
		msg.Dropped = dropped
	}
	return msg
}

// Header bits of an edge's counts.
const (
	hasBytesSent     = 1 << 8
	hasBytesReceived = 1 << 9
)

// appendStats appends an edge's counts after its id, as
// relayv1.TrafficWindow.edges says.
func appendStats(out []uint64, s *Stats) []uint64 {
	var codes, buckets uint64
	for _, n := range s.Codes {
		if n > 0 {
			codes++
		}
	}
	for _, n := range s.Latency {
		if n > 0 {
			buckets++
		}
	}
	header := codes | buckets<<4
	if s.BytesSent > 0 {
		header |= hasBytesSent
	}
	if s.BytesReceived > 0 {
		header |= hasBytesReceived
	}
	out = append(out, header)
	for c, n := range s.Codes {
		if n > 0 {
			out = append(out, n<<3|uint64(c))
		}
	}
	for b, n := range s.Latency {
		if n > 0 {
			out = append(out, n<<4|uint64(b))
		}
	}
	if buckets > 0 {
		out = append(out, uint64(math.Round(s.LatencySumMS)))
	}
	if s.BytesSent > 0 {
		out = append(out, s.BytesSent)
	}
	if s.BytesReceived > 0 {
		out = append(out, s.BytesReceived)
	}
	return out
}

// Limits bound what a server accepts of an agent's traffic.
type Limits struct {
	// MaxBytes bounds one window message.
	MaxBytes int
	// MaxEdges bounds the edges of one window, and MaxNames the edges
	// named on one stream.
	MaxEdges, MaxNames int
}

// DefaultLimits are the server's limits: windows of 256 KiB, 5,000 edges,
// 20,000 names per stream.
func DefaultLimits() Limits { return Limits{MaxBytes: 256 << 10, MaxEdges: 5000, MaxNames: 20000} }

// ErrRefused is returned for a window the Decoder refuses whole.
var ErrRefused = errors.New("traffic window refused")

// Decoder reads one stream's windows.
type Decoder struct {
	Limits Limits
	names  map[uint32]Edge
}

// Decoded is one edge of a decoded window.
type Decoded struct {
	Edge  Edge
	Stats Stats
}

// Decode checks a window against the limits and returns its edges and
// the number of entries it refused (an unknown id, an invalid name or
// count). A window over the limits, or whose counts do not parse, is
// refused whole, with ErrRefused.
func (d *Decoder) Decode(w *relayv1.TrafficWindow) ([]Decoded, int, error) {
	if n := proto.Size(w); n > d.Limits.MaxBytes {
		return nil, 0, fmt.Errorf("%w: %d bytes, more than %d", ErrRefused, n, d.Limits.MaxBytes)
	}
	if len(w.GetNames()) > d.Limits.MaxEdges {
		return nil, 0, fmt.Errorf("%w: %d names, more than %d", ErrRefused, len(w.GetNames()), d.Limits.MaxEdges)
	}
	if d.names == nil {
		d.names = map[uint32]Edge{}
	}
	refused := 0
	for _, n := range w.GetNames() {
		e := Edge{SourceWorkload: n.GetSourceWorkload(), DestinationCluster: n.GetDestinationCluster(),
			DestinationService: n.GetDestinationService(), Protocol: n.GetProtocol()}
		if !e.Valid() || n.GetId() == 0 {
			refused++
			continue
		}
		if _, ok := d.names[n.GetId()]; !ok && len(d.names) >= d.Limits.MaxNames {
			// The agent numbers anew when it reaches its own maximum.
			clear(d.names)
		}
		d.names[n.GetId()] = e
	}
	var out []Decoded
	vals := w.GetEdges()
	id := uint64(0)
	for entries := 0; len(vals) > 0; entries++ {
		if entries >= d.Limits.MaxEdges {
			return nil, 0, fmt.Errorf("%w: more than %d edges", ErrRefused, d.Limits.MaxEdges)
		}
		var s Stats
		var ok bool
		id += vals[0]
		if vals, ok = decodeStats(vals[1:], &s); !ok {
			return nil, 0, fmt.Errorf("%w: edge counts do not parse", ErrRefused)
		}
		e, known := d.names[uint32(min(id, math.MaxUint32))]
		if !known || id > math.MaxUint32 {
			refused++
			continue
		}
		out = append(out, Decoded{Edge: e, Stats: s})
	}
	return out, refused, nil
}

// maxCount bounds one count of a window: more requests than any proxy
// serves in a window, small enough that sums never overflow.
const maxCount = 1 << 40

// decodeStats reads one edge's counts after its id into s and returns the
// values after them; false when they do not parse or a count is out of
// bounds.
func decodeStats(vals []uint64, s *Stats) ([]uint64, bool) {
	next := func() (uint64, bool) {
		if len(vals) == 0 {
			return 0, false
		}
		v := vals[0]
		vals = vals[1:]
		return v, true
	}
	header, ok := next()
	codes, buckets := header&0xf, header>>4&0xf
	if !ok || header>>10 != 0 || codes > uint64(NumClasses) || buckets > uint64(NumBuckets) {
		return nil, false
	}
	for range codes {
		v, ok := next()
		if !ok || v>>3 > maxCount {
			return nil, false
		}
		s.Codes[v&7] += v >> 3
	}
	for range buckets {
		v, ok := next()
		if !ok || v&0xf >= uint64(NumBuckets) || v>>4 > maxCount {
			return nil, false
		}
		s.Latency[v&0xf] += v >> 4
	}
	if buckets > 0 {
		v, ok := next()
		if !ok || v > maxCount<<10 {
			return nil, false
		}
		s.LatencySumMS = float64(v)
	}
	for _, f := range []struct {
		bit uint64
		dst *uint64
	}{{hasBytesSent, &s.BytesSent}, {hasBytesReceived, &s.BytesReceived}} {
		if header&f.bit == 0 {
			continue
		}
		v, ok := next()
		if !ok || v > maxCount<<10 {
			return nil, false
		}
		*f.dst = v
	}
	return vals, true
}
