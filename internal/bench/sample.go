package bench

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Growth is how one figure (a process's memory, its goroutines) moved
// over a soak: the slope of a least-squares line through its samples,
// per hour. Samples of one incarnation of the process count (a replica
// killed and started again, a plugin restarted, Redis restarted empty
// begin anew), the longest one, after its warm-up.
type Growth struct {
	Name string `json:"name"`
	Unit string `json:"unit"`
	// Samples were taken over Minutes of the incarnation measured, after
	// its warm-up; Incarnations counts the process's lives.
	Samples      int     `json:"samples"`
	Minutes      float64 `json:"minutes"`
	Incarnations int     `json:"incarnations"`
	First        float64 `json:"first"`
	Last         float64 `json:"last"`
	Max          float64 `json:"max"`
	PerHour      float64 `json:"growth_per_hour"`
}

// sample is one reading of a series.
type sample struct {
	at    time.Time
	value float64
	life  string // the incarnation: a pid, or the plugins' pids
}

// series collects one figure's samples.
type series struct {
	name, unit string
	samples    []sample
}

// sampler reads every replica's server and plugins and Redis every
// interval: RSS, goroutines (servers, from their /metrics), Redis's
// used_memory.
type sampler struct {
	mu     sync.Mutex
	series map[string]*series
	order  []string
}

func newSampler() *sampler { return &sampler{series: map[string]*series{}} }

func (s *sampler) add(name, unit, life string, at time.Time, v float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sr := s.series[name]
	if sr == nil {
		sr = &series{name: name, unit: unit}
		s.series[name] = sr
		s.order = append(s.order, name)
	}
	sr.samples = append(sr.samples, sample{at: at, value: v, life: life})
}

// read takes one sample of everything; a paused or dead process is
// skipped.
func (s *sampler) read(ctx context.Context, servers replicaSet, redis *redisProcess) {
	now := time.Now()
	for _, p := range servers {
		if p.isKilled() {
			continue
		}
		pid := p.pid()
		life := strconv.Itoa(pid)
		if ps, err := readProc(pid); err == nil {
			s.add("server "+p.id+" RSS", "bytes", life, now, float64(ps.RSSBytes))
		}
		gctx, cancel := context.WithTimeout(ctx, time.Second)
		goroutines, gerr := p.goroutines(gctx)
		agents, aerr := scrapeGauge(gctx, "http://"+p.metrics+"/metrics", "meshrelay_relay_connected_agents")
		cancel()
		if gerr == nil {
			s.add("server "+p.id+" goroutines", "goroutines", life, now, float64(goroutines))
		}
		if aerr == nil {
			// Agents move between replicas after faults, and a replica's
			// figures follow the agents it serves.
			s.add("server "+p.id+" agents", "agents", life, now, float64(agents))
			if gerr == nil && agents > 0 {
				s.add("server "+p.id+" goroutines per agent", "goroutines", life, now, float64(goroutines)/float64(agents))
			}
		}
		kids := children(pid)
		slices.Sort(kids)
		var rss int64
		for _, k := range kids {
			if ps, err := readProc(k); err == nil {
				rss += ps.RSSBytes
			}
		}
		if len(kids) > 0 {
			s.add("plugins "+p.id+" RSS", "bytes", fmt.Sprint(kids), now, float64(rss))
		}
	}
	if redis == nil || !redis.isUp() {
		return
	}
	life := strconv.Itoa(redis.pid())
	if ps, err := readProc(redis.pid()); err == nil {
		s.add("redis RSS", "bytes", life, now, float64(ps.RSSBytes))
	}
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if used, err := redisUsedMemory(rctx, redis.URL()); err == nil {
		s.add("redis used_memory", "bytes", life, now, float64(used))
	}
}

// growth computes every series' Growth, ignoring each incarnation's first
// warmup.
func (s *sampler) growth(warmup time.Duration) []Growth {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Growth
	for _, name := range s.order {
		sr := s.series[name]
		out = append(out, seriesGrowth(sr, warmup))
	}
	return out
}

// seriesGrowth fits a line through the longest incarnation's samples
// after warmup.
func seriesGrowth(sr *series, warmup time.Duration) Growth {
	g := Growth{Name: sr.name, Unit: sr.unit}
	var lives [][]sample
	for i, smp := range sr.samples {
		if i == 0 || smp.life != sr.samples[i-1].life {
			lives = append(lives, nil)
		}
		lives[len(lives)-1] = append(lives[len(lives)-1], smp)
	}
	g.Incarnations = len(lives)
	var best []sample
	for _, life := range lives {
		start := life[0].at.Add(warmup)
		i := slices.IndexFunc(life, func(smp sample) bool { return !smp.at.Before(start) })
		if i < 0 {
			continue
		}
		if kept := life[i:]; len(best) == 0 || kept[len(kept)-1].at.Sub(kept[0].at) > best[len(best)-1].at.Sub(best[0].at) {
			best = kept
		}
	}
	if len(best) < 2 {
		return g
	}
	g.Samples, g.First, g.Last = len(best), best[0].value, best[len(best)-1].value
	g.Minutes = best[len(best)-1].at.Sub(best[0].at).Minutes()
	var sx, sy, sxx, sxy float64
	n := float64(len(best))
	for _, smp := range best {
		x := smp.at.Sub(best[0].at).Hours()
		sx, sy, sxx, sxy = sx+x, sy+smp.value, sxx+x*x, sxy+x*smp.value
		g.Max = max(g.Max, smp.value)
	}
	if den := n*sxx - sx*sx; den > 0 {
		g.PerHour = (n*sxy - sx*sy) / den
	}
	return g
}

// scrapeGauge reads one gauge from a Prometheus text endpoint.
func scrapeGauge(ctx context.Context, url, name string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int(f), err
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%s has no %s", url, name)
}
