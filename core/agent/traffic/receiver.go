package traffic

import (
	"context"
	"errors"
	"hash/fnv"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	metricsv3 "github.com/envoyproxy/go-control-plane/envoy/service/metrics/v3"
	"github.com/meshrelay/meshrelay/core/traffic"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	collectorv1 "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	"google.golang.org/grpc"
)

// Options bound a Receiver.
type Options struct {
	// Cluster is the agent's cluster: the destination cluster of edges
	// whose proxies do not know it.
	Cluster string
	// Window is the length of a window; traffic.WindowLength when 0.
	Window time.Duration
	// MaxMessageBytes bounds one received message (4 MiB when 0).
	MaxMessageBytes int
	// MaxStreams bounds the metrics streams open at once (256 when 0).
	MaxStreams int
	// MaxSeriesPerStream bounds the series one Envoy stream keeps
	// (20,000 when 0).
	MaxSeriesPerStream int
	// MaxSeries bounds the series the receiver keeps over all its Envoy
	// streams together, and those of the OTLP receiver (50,000 each when 0).
	MaxSeries int
	// MaxPoints bounds the data points of one OTLP Export (20,000 when 0).
	MaxPoints int
	// MaxEdges bounds the edges of one window: the cluster's label
	// cardinality (2,000 when 0).
	MaxEdges int
	// MaxWindowBytes bounds a relayed window (64 KiB when 0).
	MaxWindowBytes int
	// Logger receives what was dropped; discarded when nil.
	Logger *slog.Logger
}

func (o *Options) defaults() {
	o.Window = cmpOr(o.Window, traffic.WindowLength)
	o.MaxMessageBytes = cmpOr(o.MaxMessageBytes, 4<<20)
	o.MaxStreams = cmpOr(o.MaxStreams, 256)
	o.MaxSeriesPerStream = cmpOr(o.MaxSeriesPerStream, 20000)
	o.MaxSeries = cmpOr(o.MaxSeries, 50000)
	o.MaxPoints = cmpOr(o.MaxPoints, 20000)
	o.MaxEdges = cmpOr(o.MaxEdges, 2000)
	o.MaxWindowBytes = cmpOr(o.MaxWindowBytes, 64<<10)
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Relay sends a window on the agent's stream: build is called with the
// stream's number and returns the message, or nil for none. It reports
// whether the message was queued. *agent.Agent implements it.
type Relay interface {
	SendTraffic(build func(stream uint64) *relayv1.TrafficWindow) bool
}

// Receiver receives the proxies' metrics and relays windows of edges.
type Receiver struct {
	opts    Options
	log     *slog.Logger
	started time.Time
	window  *traffic.Window
	enc     traffic.Encoder
	streams chan struct{}
	otlp    *series
	// envoySeries counts the series of every Envoy stream.
	envoySeries atomic.Int64

	// dropped counts, by reason, what was dropped since the start.
	droppedMu sync.Mutex
	dropped   map[string]uint64
	// Windows counts the windows relayed.
	Windows atomic.Int64
}

// New returns a receiver bounded by opts.
func New(opts Options) *Receiver {
	opts.defaults()
	return &Receiver{
		opts:    opts,
		log:     opts.Logger.With("component", "traffic"),
		started: time.Now(),
		window:  traffic.NewWindow(opts.MaxEdges),
		enc:     traffic.Encoder{MaxBytes: opts.MaxWindowBytes, MaxNames: 4 * opts.MaxEdges},
		streams: make(chan struct{}, opts.MaxStreams),
		otlp:    newSeries(opts.MaxSeries),
		dropped: map[string]uint64{},
	}
}

// Register adds the Envoy metrics service and the OTLP metrics service to s.
func (r *Receiver) Register(s grpc.ServiceRegistrar) {
	metricsv3.RegisterMetricsServiceServer(s, envoyService{r})
	collectorv1.RegisterMetricsServiceServer(s, otlpService{r: r})
}

// ServerOptions are the options of a gRPC server the receiver is
// registered on: its message size limit.
func (r *Receiver) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.MaxRecvMsgSize(r.opts.MaxMessageBytes)}
}

// Dropped returns, by reason, what the receiver dropped since it started.
func (r *Receiver) Dropped() map[string]uint64 {
	r.droppedMu.Lock()
	defer r.droppedMu.Unlock()
	return maps.Clone(r.dropped)
}

// Run closes a window every Options.Window and relays it, until ctx ends.
func (r *Receiver) Run(ctx context.Context, relay Relay) error {
	t := time.NewTicker(r.opts.Window)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-t.C:
			r.Flush(now, relay)
		}
	}
}

// Flush closes the current window at now and relays it; an empty window
// sends nothing.
func (r *Receiver) Flush(now time.Time, relay Relay) {
	edges, dropped := r.window.Take()
	r.otlp.expire(now.Add(-10 * time.Minute))
	if len(dropped) > 0 {
		r.droppedMu.Lock()
		for k, v := range dropped {
			r.dropped[k] += v
		}
		r.droppedMu.Unlock()
		r.log.Warn("traffic samples dropped by a limit", "dropped", dropped)
	}
	if len(edges) == 0 && len(dropped) == 0 {
		return
	}
	sent := relay.SendTraffic(func(stream uint64) *relayv1.TrafficWindow {
		return r.enc.Encode(stream, now, r.opts.Window, edges, dropped)
	})
	if sent {
		r.Windows.Add(1)
	} else {
		// The names the encoder marked sent may not have left; the next
		// window reports what this one lost.
		r.enc.Reset()
		r.window.Drop(traffic.DropUnsent, uint64(len(edges)))
	}
}

// errBusy refuses a stream beyond Options.MaxStreams.
var errBusy = errors.New("too many metrics streams")

// acquire takes a stream slot.
func (r *Receiver) acquire() (release func(), ok bool) {
	select {
	case r.streams <- struct{}{}:
		return func() { <-r.streams }, true
	default:
		return nil, false
	}
}

// series keeps the last cumulative values of series, at most max of them,
// and, with shared set, while shared counts fewer than sharedMax.
type series struct {
	mu        sync.Mutex
	max       int
	last      map[uint64]*point
	shared    *atomic.Int64
	sharedMax int64
}

type point struct {
	values []float64
	// start is when the series' counting started, as its sender says
	// (OTLP's start time of a cumulative point); 0 when unknown (Envoy).
	start uint64
	seen  time.Time
}

func newSeries(max int) *series { return &series{max: max, last: map[uint64]*point{}} }

// delta returns how much values grew since the series' last values, and
// whether the series is kept. A series first seen returns nil (it counts
// from there) unless fresh, when its values are the delta. A series was
// reset, and its values are the delta, when they went down or when it
// started later than its last values did (start, when the sender says:
// a restarted client counts from zero again, and may pass its old counts
// before the next report). A point that started before the last values
// did is late and counts nothing.
func (s *series) delta(key uint64, values []float64, start uint64, fresh bool, now time.Time) ([]float64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.last[key]
	if !ok {
		if len(s.last) >= s.max {
			return nil, false
		}
		if s.shared != nil && s.shared.Add(1) > s.sharedMax {
			s.shared.Add(-1)
			return nil, false
		}
		s.last[key] = &point{values: slices.Clone(values), start: start, seen: now}
		if fresh {
			return values, true
		}
		return nil, true
	}
	p.seen = now
	if start < p.start {
		return nil, true
	}
	if start > p.start {
		p.start = start
		p.values = slices.Clone(values)
		return values, true
	}
	if len(p.values) != len(values) {
		p.values = slices.Clone(values)
		return nil, true
	}
	out := make([]float64, len(values))
	reset := false
	for i := range values {
		out[i] = values[i] - p.values[i]
		if out[i] < 0 {
			reset = true
		}
	}
	copy(p.values, values)
	if reset {
		return values, true
	}
	return out, true
}

// expire forgets the series not seen since before.
func (s *series) expire(before time.Time) {
	s.mu.Lock()
	maps.DeleteFunc(s.last, func(_ uint64, p *point) bool { return p.seen.Before(before) })
	s.mu.Unlock()
}

// release gives back the shared count of every series kept.
func (s *series) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shared != nil {
		s.shared.Add(-int64(len(s.last)))
	}
	clear(s.last)
}

func (s *series) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.last)
}

// seriesKey hashes a metric's name and its labels.
func seriesKey(name string, labels ...string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	for _, l := range labels {
		h.Write([]byte{0})
		h.Write([]byte(l))
	}
	return h.Sum64()
}
