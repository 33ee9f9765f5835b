package traffic

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"
)

// Slot and history lengths of an Hour.
const (
	// WindowLength is the length of an agent's window, and of an Hour's
	// recent slots.
	WindowLength = 10 * time.Second
	recentSlots  = 6
	hourMinutes  = 60
)

// Key names an edge across the fleet: the reporting cluster and the edge.
type Key struct {
	SourceCluster string
	Edge
}

// Hour keeps the edges a server replica heard of over the last hour, at
// most MaxEdges of them; a window's edges beyond it are dropped and
// counted. It is safe for concurrent use.
type Hour struct {
	// MaxEdges bounds the edges kept.
	MaxEdges int

	mu      sync.Mutex
	edges   map[Key]*series
	dropped map[string]map[string]uint64 // cluster → reason → count
	now     func() time.Time
}

// NewHour returns an empty Hour keeping at most maxEdges edges.
func NewHour(maxEdges int) *Hour {
	return &Hour{MaxEdges: maxEdges, edges: map[Key]*series{}, dropped: map[string]map[string]uint64{}, now: time.Now}
}

// series is what an Hour keeps of one edge.
type series struct {
	total    Stats
	lastSeen int64 // unix milliseconds
	recent   [recentSlots]slot
	minutes  [hourMinutes]minute
}

// slot is an edge's traffic in one 10-second window of the last minute.
type slot struct {
	window        int64 // unix seconds / 10
	codes         [NumClasses]uint32
	latency       [NumBuckets]uint32
	bytesSent     uint32
	bytesReceived uint32
}

// minute is an edge's requests and errors in one minute of the hour.
type minute struct {
	minute   int64 // unix minutes
	requests uint32
	errors   uint32
}

// knownDrops are the reasons an Hour counts; an agent's other keys count
// under "other".
var knownDrops = []string{DropEdges, DropSeries, DropLabel, DropPoints, DropSize, DropRefused, DropUnsent}

// Add records a window of cluster's edges, received now, and what its
// agent dropped.
func (h *Hour) Add(cluster string, edges []Decoded, dropped map[string]uint64) {
	now := h.now()
	win, min := now.Unix()/10, now.Unix()/60
	h.mu.Lock()
	defer h.mu.Unlock()
	for reason, n := range dropped {
		if !slices.Contains(knownDrops, reason) {
			reason = "other"
		}
		h.dropLocked(cluster, reason, min64(n, maxCount))
	}
	for _, d := range edges {
		k := Key{SourceCluster: cluster, Edge: d.Edge}
		s, ok := h.edges[k]
		if !ok {
			if len(h.edges) >= h.MaxEdges {
				h.expireLocked(now)
			}
			if len(h.edges) >= h.MaxEdges {
				h.dropLocked(cluster, DropEdges, 1)
				continue
			}
			s = &series{}
			h.edges[k] = s
		}
		s.add(win, min, now.UnixMilli(), &d.Stats)
	}
}

// Drop counts n things of cluster dropped for reason.
func (h *Hour) Drop(cluster, reason string, n uint64) {
	h.mu.Lock()
	h.dropLocked(cluster, reason, n)
	h.mu.Unlock()
}

func (h *Hour) dropLocked(cluster, reason string, n uint64) {
	if n == 0 {
		return
	}
	m, ok := h.dropped[cluster]
	if !ok {
		m = map[string]uint64{}
		h.dropped[cluster] = m
	}
	m[reason] += n
}

func min64(a, b uint64) uint64 { return min(a, b) }

func sat32(v uint64) uint32 { return uint32(min(v, 1<<32-1)) }

func (s *series) add(win, min, nowMS int64, st *Stats) {
	s.total.Add(st)
	s.lastSeen = nowMS
	r := &s.recent[win%recentSlots]
	if r.window != win {
		*r = slot{window: win}
	}
	for i, v := range st.Codes {
		r.codes[i] = sat32(uint64(r.codes[i]) + v)
	}
	for i, v := range st.Latency {
		r.latency[i] = sat32(uint64(r.latency[i]) + v)
	}
	r.bytesSent = sat32(uint64(r.bytesSent) + st.BytesSent)
	r.bytesReceived = sat32(uint64(r.bytesReceived) + st.BytesReceived)
	m := &s.minutes[min%hourMinutes]
	if m.minute != min {
		*m = minute{minute: min}
	}
	m.requests = sat32(uint64(m.requests) + st.Requests())
	m.errors = sat32(uint64(m.errors) + st.Errors())
}

// Expire forgets the edges not heard of for an hour.
func (h *Hour) Expire() {
	h.mu.Lock()
	h.expireLocked(h.now())
	h.mu.Unlock()
}

func (h *Hour) expireLocked(now time.Time) {
	cutoff := now.Add(-time.Hour).UnixMilli()
	maps.DeleteFunc(h.edges, func(_ Key, s *series) bool { return s.lastSeen < cutoff })
}

// Bytes estimates the memory the Hour holds: its series and their names.
func (h *Hour) Bytes() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for k := range h.edges {
		n += int(unsafe.Sizeof(series{})+unsafe.Sizeof(k)) + 16 +
			len(k.SourceCluster) + len(k.SourceWorkload) + len(k.DestinationCluster) + len(k.DestinationService) + len(k.Protocol)
	}
	return n
}

// Len returns the number of edges kept.
func (h *Hour) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.edges)
}

// Query selects edges.
type Query struct {
	// Window is how far back rates are computed: up to a minute from
	// the 10-second slots (latency too), beyond from the minutes
	// (requests and errors only; latency from the last minute).
	Window time.Duration
	// Cluster keeps the edges from or to it; Destination those to it.
	Cluster, Destination string
	// Minutes asks for the requests and errors of each minute.
	Minutes bool
}

// View is an edge over a query's window.
type View struct {
	Key
	Stats    Stats
	Seconds  float64
	LastSeen time.Time
	Minutes  []MinuteView
}

// MinuteView is an edge's requests and errors in one minute.
type MinuteView struct {
	Minute           int64
	Requests, Errors uint64
}

// RPS returns the view's requests per second.
func (v *View) RPS() float64 {
	if v.Seconds <= 0 {
		return 0
	}
	return float64(v.Stats.Requests()) / v.Seconds
}

// ErrorRate returns the share of the view's requests that failed.
func (v *View) ErrorRate() float64 {
	if r := v.Stats.Requests(); r > 0 {
		return float64(v.Stats.Errors()) / float64(r)
	}
	return 0
}

// Edges returns the edges with traffic within q's window, sorted.
func (h *Hour) Edges(q Query) []View {
	now := h.now()
	window := min(max(q.Window, WindowLength), time.Hour)
	win, min := now.Unix()/10, now.Unix()/60
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []View
	for k, s := range h.edges {
		if q.Cluster != "" && k.SourceCluster != q.Cluster && k.DestinationCluster != q.Cluster {
			continue
		}
		if q.Destination != "" && k.DestinationService != q.Destination {
			continue
		}
		v := View{Key: k, Seconds: window.Seconds(), LastSeen: time.UnixMilli(s.lastSeen)}
		slots := int64(min64(uint64(window/WindowLength), recentSlots))
		for _, r := range s.recent {
			if r.window > win-slots && r.window <= win {
				for i, c := range r.latency {
					v.Stats.Latency[i] += uint64(c)
				}
				if window <= time.Minute {
					for i, c := range r.codes {
						v.Stats.Codes[i] += uint64(c)
					}
					v.Stats.BytesSent += uint64(r.bytesSent)
					v.Stats.BytesReceived += uint64(r.bytesReceived)
				}
			}
		}
		if window > time.Minute {
			mins := int64(window / time.Minute)
			for _, m := range s.minutes {
				if m.minute > min-mins && m.minute <= min {
					ok := uint64(m.requests - m.errors)
					v.Stats.Codes[ClassOther] += ok
					v.Stats.Codes[Class5xx] += uint64(m.errors)
				}
			}
		}
		if q.Minutes {
			for _, m := range s.minutes {
				if m.minute > min-hourMinutes && m.minute <= min && m.requests > 0 {
					v.Minutes = append(v.Minutes, MinuteView{Minute: m.minute, Requests: uint64(m.requests), Errors: uint64(m.errors)})
				}
			}
			slices.SortFunc(v.Minutes, func(a, b MinuteView) int { return int(a.Minute - b.Minute) })
		}
		if v.Stats.Requests() == 0 && v.Stats.BytesSent+v.Stats.BytesReceived == 0 && len(v.Minutes) == 0 {
			continue
		}
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b View) int {
		return strings.Compare(keyString(a.Key), keyString(b.Key))
	})
	return out
}

func keyString(k Key) string {
	return k.SourceCluster + "\x00" + k.SourceWorkload + "\x00" + k.DestinationCluster + "\x00" + k.DestinationService + "\x00" + k.Protocol
}

// Dropped returns, per cluster and reason, what was dropped since the
// Hour started.
func (h *Hour) Dropped() map[string]map[string]uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]map[string]uint64, len(h.dropped))
	for c, m := range h.dropped {
		out[c] = maps.Clone(m)
	}
	return out
}

// each calls f with every edge's totals, under the Hour's lock.
func (h *Hour) each(f func(Key, *Stats)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, s := range h.edges {
		f(k, &s.total)
	}
}

// Counts are requests and the errors among them.
type Counts struct{ Requests, Errors uint64 }

// Around splits minutes around a change at changed: the minutes before
// it, and the minute of the change with those after, each at most span
// minutes long; now is the last span minutes before at. A zero changed
// leaves before and after empty.
func Around(minutes []MinuteView, changed, at time.Time, span int64) (before, after, now Counts) {
	nowMin, changeMin := at.Unix()/60, changed.Unix()/60
	for _, m := range minutes {
		if m.Minute > nowMin-span && m.Minute <= nowMin {
			now.Requests, now.Errors = now.Requests+m.Requests, now.Errors+m.Errors
		}
		if changed.IsZero() {
			continue
		}
		switch {
		case m.Minute < changeMin && m.Minute >= changeMin-span:
			before.Requests, before.Errors = before.Requests+m.Requests, before.Errors+m.Errors
		case m.Minute >= changeMin && m.Minute < changeMin+span:
			after.Requests, after.Errors = after.Requests+m.Requests, after.Errors+m.Errors
		}
	}
	return before, after, now
}
