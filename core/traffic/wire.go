package traffic

import (
	"errors"
	"fmt"
	"math"
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
		stats := encodeStats(id, s)
		n := proto.Size(stats) + 3
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
		msg.Edges = append(msg.Edges, stats)
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

func encodeStats(id uint32, s *Stats) *relayv1.TrafficEdgeStats {
	out := &relayv1.TrafficEdgeStats{Id: id, LatencySumMs: uint64(math.Round(s.LatencySumMS)), BytesSent: s.BytesSent, BytesReceived: s.BytesReceived}
	for c, n := range s.Codes {
		if n > 0 {
			out.Codes = append(out.Codes, uint64(c), n)
		}
	}
	for b, n := range s.Latency {
		if n > 0 {
			out.Latency = append(out.Latency, uint64(b), n)
		}
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
// count). A window over the limits is refused whole, with ErrRefused.
func (d *Decoder) Decode(w *relayv1.TrafficWindow) ([]Decoded, int, error) {
	if n := proto.Size(w); n > d.Limits.MaxBytes {
		return nil, 0, fmt.Errorf("%w: %d bytes, more than %d", ErrRefused, n, d.Limits.MaxBytes)
	}
	if len(w.GetEdges()) > d.Limits.MaxEdges || len(w.GetNames()) > d.Limits.MaxEdges {
		return nil, 0, fmt.Errorf("%w: %d edges, more than %d", ErrRefused, len(w.GetEdges()), d.Limits.MaxEdges)
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
	out := make([]Decoded, 0, len(w.GetEdges()))
	for _, es := range w.GetEdges() {
		e, ok := d.names[es.GetId()]
		if !ok {
			refused++
			continue
		}
		s, ok := decodeStats(es)
		if !ok {
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

func decodeStats(es *relayv1.TrafficEdgeStats) (Stats, bool) {
	var s Stats
	codes, lat := es.GetCodes(), es.GetLatency()
	if len(codes)%2 != 0 || len(lat)%2 != 0 || len(codes) > 2*int(NumClasses) || len(lat) > 2*NumBuckets {
		return s, false
	}
	for i := 0; i < len(codes); i += 2 {
		if codes[i] >= uint64(NumClasses) || codes[i+1] > maxCount {
			return s, false
		}
		s.Codes[codes[i]] += codes[i+1]
	}
	for i := 0; i < len(lat); i += 2 {
		if lat[i] >= uint64(NumBuckets) || lat[i+1] > maxCount {
			return s, false
		}
		s.Latency[lat[i]] += lat[i+1]
	}
	if es.GetBytesSent() > maxCount<<10 || es.GetBytesReceived() > maxCount<<10 || es.GetLatencySumMs() > maxCount<<10 {
		return s, false
	}
	s.LatencySumMS, s.BytesSent, s.BytesReceived = float64(es.GetLatencySumMs()), es.GetBytesSent(), es.GetBytesReceived()
	return s, true
}
