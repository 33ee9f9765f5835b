package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/meshrelay/meshrelay/core/rollout"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// RolloutStages is how many stages the rollout phase's strategy has.
const RolloutStages = 5

// rolloutLabel is the cluster label the rollout phase's stages select
// on: cluster i of N is in stage s<1+i*RolloutStages/N>.
const rolloutLabel = "bench.meshrelay.io/stage"

// rolloutMarker is the marker of the policy edit the rollout phase stages.
const rolloutMarker = "rollout"

// RolloutReport is the rollout phase (--rollout): the fleet-wide policy
// edited once under a RolloutStrategy of RolloutStages stages, each gated
// by approval, which the benchmark gives one stage at a time.
type RolloutReport struct {
	Stages int `json:"stages"`
	// Gate says how a stage is released and how it completes.
	Gate          string  `json:"gate"`
	WindowSeconds float64 `json:"window_seconds"`
	// ChurnPerSecond is the rate of input changes during each window.
	ChurnPerSecond float64 `json:"churn_per_second"`
	// One, Two and After are the steady states: one revision before the
	// edit; two while the first stage is released and the second waits
	// for approval; one again once the rollout completed.
	One   RolloutWindow `json:"one_revision"`
	Two   RolloutWindow `json:"two_revisions"`
	After RolloutWindow `json:"after_completion"`
	// PeakRSSBytes is the highest server and plugins RSS sampled from the
	// edit to the rollout's completion.
	PeakRSSBytes int64 `json:"peak_server_and_plugins_rss_bytes"`
	// MemoryRatio is Two's server and plugins RSS over One's;
	// PeakMemoryRatio PeakRSSBytes over One's; AfterMemoryRatio After's
	// over One's; HeapRatio and AfterHeapRatio the same for the servers'
	// live heap; CPURatio Two's CPU seconds per second over One's.
	MemoryRatio      float64 `json:"memory_two_over_one"`
	PeakMemoryRatio  float64 `json:"memory_peak_over_one"`
	AfterMemoryRatio float64 `json:"memory_after_over_one"`
	HeapRatio        float64 `json:"server_live_heap_two_over_one"`
	AfterHeapRatio   float64 `json:"server_live_heap_after_over_one"`
	CPURatio         float64 `json:"cpu_two_over_one"`
	// StartedSeconds is from the policy edit to the servers reporting the
	// rollout, its first stage waiting for approval.
	StartedSeconds float64 `json:"started_seconds"`
	// CompletedSeconds is from the first approval to the rollout
	// Completed; Phase is its phase at the end.
	CompletedSeconds float64 `json:"completed_seconds"`
	Phase            string  `json:"phase"`
	// EarlyReceipts counts the clusters that received the new outputs
	// before their stage was approved: 0 when the stages hold.
	EarlyReceipts int                  `json:"early_receipts"`
	StageReports  []RolloutStageReport `json:"stage_reports"`
}

// RolloutWindow is one steady state of the rollout phase, measured over
// a window while inputs churn: the servers' and their plugins' memory
// (the mean of one sample a second) and CPU.
type RolloutWindow struct {
	ServerRSS  int64 `json:"server_rss_bytes"`
	PluginsRSS int64 `json:"plugins_rss_bytes"`
	// ServerHeap is the servers' live Go heap: what their last collection
	// kept (go_gc_heap_live_bytes), without the garbage and the headroom
	// that RSS carries.
	ServerHeap int64 `json:"server_live_heap_bytes"`
	// CPUPerSecond is the servers' and plugins' CPU seconds per second.
	CPUPerSecond float64 `json:"server_and_plugins_cpu_seconds_per_second"`
	InputChanges int     `json:"input_changes"`
	InputLatency Latency `json:"input_latency"`
}

// RSS returns the window's server and plugins RSS together.
func (w RolloutWindow) RSS() int64 { return w.ServerRSS + w.PluginsRSS }

// RolloutStageReport is one stage of the rollout phase, timed from its
// approval.
type RolloutStageReport struct {
	Name     string `json:"name"`
	Clusters int    `json:"clusters"`
	// Held counts the stage's clusters whose agents received the new
	// outputs; HeldLatency is each one's time from the approval, and
	// AllHeldSeconds the last one's.
	Held           int     `json:"clusters_holding_new_outputs"`
	HeldLatency    Latency `json:"held_latency"`
	AllHeldSeconds float64 `json:"all_held_seconds"`
	// DoneSeconds is from the approval to the servers counting the stage
	// done: every output of the new revision acked by each of its
	// clusters (within the servers' --rollout-interval).
	DoneSeconds float64 `json:"done_seconds"`
	// CPUSeconds is the servers' and plugins' CPU from the approval to
	// the stage done.
	CPUSeconds float64 `json:"server_and_plugins_cpu_seconds"`
	// RSSBytes is the servers' and plugins' RSS once the stage was done.
	RSSBytes int64 `json:"server_and_plugins_rss_bytes"`
}

// DefaultRolloutOptions returns the defaults of --rollout: 1,000 agents of
// 5 services, 2 input changes per second during each 20s window, no
// churn phase before and no other policy edits.
func DefaultRolloutOptions() Options {
	o := DefaultOptions()
	o.Rollout, o.Agents, o.Services = true, 1000, 5
	o.Churn, o.Duration, o.PolicyChanges = 2, 0, 0
	o.RolloutWindow = 20 * time.Second
	return o
}

// validateRollout checks the options of the rollout phase.
func (o *Options) validateRollout() []error {
	if !o.Rollout {
		return nil
	}
	var errs []error
	if o.Chaos {
		errs = append(errs, errors.New("--rollout is a measurement of its own; leave --chaos out"))
	}
	if o.PolicyChanges > 0 {
		errs = append(errs, errors.New("--rollout stages one policy edit of its own: --policy-changes must be 0"))
	}
	if o.Agents < RolloutStages {
		errs = append(errs, fmt.Errorf("--rollout needs --agents %d or more: one cluster a stage at least", RolloutStages))
	}
	if o.RolloutWindow < 0 {
		errs = append(errs, errors.New("--rollout-window must not be negative"))
	}
	return errs
}

// rolloutStage returns the stage of cluster i of n, from 0.
func rolloutStage(i, n int) int { return i * RolloutStages / n }

// rolloutStageName returns the name of stage k, from 0, and the value of
// its clusters' rolloutLabel.
func rolloutStageName(k int) string { return fmt.Sprintf("s%d", k+1) }

// clusterLabels returns the labels sim's cluster is registered with: its
// stage's in the rollout phase, none otherwise.
func (r *run) clusterLabels(s *sim) map[string]string {
	if !r.opts.Rollout {
		return nil
	}
	return map[string]string{rolloutLabel: rolloutStageName(rolloutStage(s.index, len(r.sims)))}
}

// RolloutStrategyYAML returns the rollout phase's strategy: RolloutStages
// stages selected by rolloutLabel, each waiting for approval and done as
// soon as its clusters are healthy (minHealthy 0s), so that the benchmark
// alone sets the pace.
func RolloutStrategyYAML() []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: policy.meshrelay.io/v1alpha1\nkind: RolloutStrategy\nmetadata:\n  name: bench-stages\n  namespace: %s\nspec:\n  minHealthy: 0s\n  progressDeadline: 1h\n  stages:\n", Namespace)
	for k := range RolloutStages {
		fmt.Fprintf(&b, "  - name: %[1]s\n    clusterSelector: {matchLabels: {%[2]s: %[1]s}}\n    approval: true\n", rolloutStageName(k), rolloutLabel)
	}
	return []byte(b.String())
}

// rolloutPhase measures one revision, edits the policy, approves the
// stages one by one timing each, measures two revisions after the first
// stage, and one again after the rollout completed.
func (r *run) rolloutPhase(ctx context.Context) error {
	opts := r.opts
	rep := &RolloutReport{
		Stages: RolloutStages, Gate: "approval; minHealthy 0s", WindowSeconds: opts.RolloutWindow.Seconds(), ChurnPerSecond: opts.Churn,
	}
	r.rep.Rollout = rep
	rng := rand.New(rand.NewPCG(uint64(opts.Agents), 28))
	seq := r.rep.InputChanges
	var err error
	// The servers' memory still grows toward its steady state after the
	// fleet converged; each steady state is measured after a window of
	// settling, this one as the one after the rollout.
	r.say("rollout: settling for %s", opts.RolloutWindow)
	if err := sleep(ctx, opts.RolloutWindow); err != nil {
		return err
	}
	r.say("rollout: one revision, %s window at %.1f input changes/s", opts.RolloutWindow, opts.Churn)
	if rep.One, err = r.rolloutWindow(ctx, rng, &seq); err != nil {
		return err
	}

	// The edit, sampled until the rollout completes.
	peak := r.sampleRSS(ctx)
	at := time.Now()
	r.watch.start(`"/`+rolloutMarker+`/*"`, at)
	defer r.watch.stop()
	if err := writeFile(r.policy, PolicyYAML(rolloutMarker)); err != nil {
		return err
	}
	st, err := r.waitRollout(ctx, "the rollout to start", func(st *relayv1.RolloutStatus) bool {
		return st.GetPhase() == string(rollout.Progressing) && len(st.GetStages()) == RolloutStages && st.GetStage() == 0
	})
	if err != nil {
		return err
	}
	rep.StartedSeconds = time.Since(at).Seconds()
	r.say("rollout %d started after %.3fs: %s", st.GetId(), rep.StartedSeconds, st.GetReason())

	var first time.Time
	for k := range RolloutStages {
		sr, approved, err := r.rolloutStage(ctx, k, at, rep)
		if err != nil {
			return err
		}
		if k == 0 {
			first = approved
		}
		rep.StageReports = append(rep.StageReports, sr)
		r.say("stage %s: %d/%d clusters hold the new outputs %.3fs after the approval (p50 %.1fms); done after %.3fs",
			sr.Name, sr.Held, sr.Clusters, sr.AllHeldSeconds, sr.HeldLatency.P50, sr.DoneSeconds)
		if k == 0 {
			r.say("rollout: two revisions, %s window", opts.RolloutWindow)
			if rep.Two, err = r.rolloutWindow(ctx, rng, &seq); err != nil {
				return err
			}
		}
	}
	st, err = r.waitRollout(ctx, "the rollout to complete", func(st *relayv1.RolloutStatus) bool { return !rolloutActive(st) })
	if err != nil {
		return err
	}
	rep.Phase = st.GetPhase()
	if st.GetEnded() != nil {
		rep.CompletedSeconds = st.GetEnded().AsTime().Sub(first).Seconds()
	}
	rep.PeakRSSBytes = peak()
	// What the previous revision held is garbage now; the window lets the
	// runtimes collect it and hand it back.
	r.say("rollout %s after %.3fs; settling for %s", rep.Phase, rep.CompletedSeconds, opts.RolloutWindow)
	if err := sleep(ctx, opts.RolloutWindow); err != nil {
		return err
	}
	r.say("rollout: one revision again, %s window", opts.RolloutWindow)
	if rep.After, err = r.rolloutWindow(ctx, rng, &seq); err != nil {
		return err
	}
	rep.ratios()
	r.say("rollout: memory two/one %.2f (peak %.2f), after/one %.2f; server heap two/one %.2f, after/one %.2f; CPU two/one %.2f",
		rep.MemoryRatio, rep.PeakMemoryRatio, rep.AfterMemoryRatio, rep.HeapRatio, rep.AfterHeapRatio, rep.CPURatio)
	return nil
}

// ratios fills in the report's ratios.
func (rep *RolloutReport) ratios() {
	ratio := func(a, b float64) float64 {
		if b <= 0 {
			return 0
		}
		return a / b
	}
	one := float64(rep.One.RSS())
	rep.MemoryRatio = ratio(float64(rep.Two.RSS()), one)
	rep.PeakMemoryRatio = ratio(float64(rep.PeakRSSBytes), one)
	rep.AfterMemoryRatio = ratio(float64(rep.After.RSS()), one)
	rep.HeapRatio = ratio(float64(rep.Two.ServerHeap), float64(rep.One.ServerHeap))
	rep.AfterHeapRatio = ratio(float64(rep.After.ServerHeap), float64(rep.One.ServerHeap))
	rep.CPURatio = ratio(rep.Two.CPUPerSecond, rep.One.CPUPerSecond)
}

// rolloutStage approves stage k and waits until every one of its
// clusters received the new outputs (the edit was written at edited) and
// the servers count the stage done.
func (r *run) rolloutStage(ctx context.Context, k int, edited time.Time, rep *RolloutReport) (RolloutStageReport, time.Time, error) {
	name := rolloutStageName(k)
	sr := RolloutStageReport{Name: name}
	var members []int
	for i := range r.sims {
		if rolloutStage(i, len(r.sims)) == k {
			members = append(members, i)
		}
	}
	sr.Clusters = len(members)
	// A cluster that holds the new outputs before its stage is approved
	// was released too early.
	for _, i := range members {
		if r.watch.receipt(i) != 0 {
			rep.EarlyReceipts++
		}
	}
	cpu0 := r.servers.cpu()
	srv := r.servers[0]
	approved := time.Now()
	if _, err := srv.admin.ActOnRollout(srv.adminCtx, &relayv1.RolloutActionRequest{Action: relayv1.RolloutActionRequest_ACTION_APPROVE, Stage: name}); err != nil {
		return sr, approved, fmt.Errorf("approve stage %s: %w", name, err)
	}
	// The clusters' receipts, counted from the approval.
	deadline := approved.Add(r.opts.Timeout)
	var lat []time.Duration
	for {
		lat = lat[:0]
		for _, i := range members {
			if d := r.watch.receipt(i); d != 0 {
				lat = append(lat, max(edited.Add(d).Sub(approved), time.Nanosecond))
			}
		}
		if len(lat) == len(members) || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return sr, approved, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	sr.Held = len(lat)
	sr.HeldLatency = summarize(lat)
	if len(lat) > 0 {
		sr.AllHeldSeconds = slices.Max(lat).Seconds()
	}
	if _, err := r.waitRollout(ctx, "stage "+name+" to be done", func(st *relayv1.RolloutStatus) bool {
		return !rolloutActive(st) || int(st.GetStage()) > k
	}); err != nil {
		return sr, approved, err
	}
	sr.DoneSeconds = time.Since(approved).Seconds()
	sr.CPUSeconds = r.servers.cpu() - cpu0
	server, plugins := r.servers.totals()
	sr.RSSBytes = server.RSSBytes + plugins.RSSBytes
	return sr, approved, nil
}

func rolloutActive(st *relayv1.RolloutStatus) bool {
	return st.GetPhase() == string(rollout.Progressing) || st.GetPhase() == string(rollout.Paused)
}

// waitRollout polls replica 0's GetRollout until done accepts the
// rollout, for at most opts.Timeout; what names what it waits for.
func (r *run) waitRollout(ctx context.Context, what string, done func(*relayv1.RolloutStatus) bool) (*relayv1.RolloutStatus, error) {
	srv := r.servers[0]
	deadline := time.Now().Add(r.opts.Timeout)
	for {
		st, err := srv.admin.GetRollout(srv.adminCtx, &relayv1.GetRolloutRequest{})
		switch {
		case err == nil && st.GetPhase() == string(rollout.Paused):
			return st, fmt.Errorf("wait for %s: the rollout paused: %s", what, st.GetReason())
		case err == nil && done(st):
			return st, nil
		case err != nil && status.Code(err) != codes.NotFound:
			return nil, fmt.Errorf("wait for %s: %w", what, err)
		}
		if time.Now().After(deadline) {
			return st, fmt.Errorf("wait for %s: not within %s (rollout: %s %s)", what, r.opts.Timeout, st.GetPhase(), st.GetReason())
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// rolloutWindow measures one steady state over opts.RolloutWindow:
// inputs churn at opts.Churn (seq numbers the changes), memory is
// sampled every second, and the changes are waited for.
func (r *run) rolloutWindow(ctx context.Context, rng *rand.Rand, seq *int) (RolloutWindow, error) {
	var w RolloutWindow
	lat0 := make([]int, len(r.sims))
	for i, s := range r.sims {
		s.mu.Lock()
		lat0[i] = len(s.inputLat)
		s.mu.Unlock()
	}
	var changes <-chan time.Time
	if r.opts.Churn > 0 {
		t := time.NewTicker(time.Duration(float64(time.Second) / r.opts.Churn))
		defer t.Stop()
		changes = t.C
	}
	samples := time.NewTicker(time.Second)
	defer samples.Stop()
	var rss, plugins, heap []int64
	sample := func() {
		server, pl := r.servers.totals()
		rss, plugins = append(rss, server.RSSBytes), append(plugins, pl.RSSBytes)
		if h, err := r.serverHeap(ctx); err == nil {
			heap = append(heap, h)
		} else {
			r.opts.Logger.Warn("read the servers' heap", "error", err)
		}
	}
	start, cpu0 := time.Now(), r.servers.cpu()
	end := time.After(r.opts.RolloutWindow)
	sample()
	for running := true; running; {
		select {
		case <-ctx.Done():
			return w, ctx.Err()
		case <-end:
			running = false
		case <-samples.C:
			sample()
		case <-changes:
			*seq++
			w.InputChanges++
			if err := r.change(rng, *seq); err != nil {
				return w, err
			}
		}
	}
	for wait := time.Now().Add(r.opts.Timeout); time.Now().Before(wait) && sumFunc(r.sims, (*sim).outstanding) > 0; {
		time.Sleep(20 * time.Millisecond)
	}
	w.CPUPerSecond = (r.servers.cpu() - cpu0) / time.Since(start).Seconds()
	w.ServerRSS, w.PluginsRSS, w.ServerHeap = mean(rss), mean(plugins), mean(heap)
	var lat []time.Duration
	for i, s := range r.sims {
		s.mu.Lock()
		lat = append(lat, s.inputLat[lat0[i]:]...)
		s.mu.Unlock()
	}
	w.InputLatency = summarize(lat)
	r.say("window: server RSS %.1f MiB (live heap %.1f MiB), plugins RSS %.1f MiB, CPU %.3f s/s; %d input changes, p50 %.1fms",
		mib(w.ServerRSS), mib(w.ServerHeap), mib(w.PluginsRSS), w.CPUPerSecond, w.InputChanges, w.InputLatency.P50)
	return w, nil
}

// sampleRSS samples the servers' and plugins' RSS every second until the
// returned function is called, which returns the highest.
func (r *run) sampleRSS(ctx context.Context) (peak func() int64) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan int64)
	go func() {
		var top int64
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			server, plugins := r.servers.totals()
			top = max(top, server.RSSBytes+plugins.RSSBytes)
			select {
			case <-ctx.Done():
				done <- top
				return
			case <-t.C:
			}
		}
	}()
	return func() int64 {
		cancel()
		return <-done
	}
}

// serverHeap sums the running replicas' go_gc_heap_live_bytes.
func (r *run) serverHeap(ctx context.Context) (int64, error) {
	const live = "go_gc_heap_live_bytes"
	var sum int64
	for _, p := range r.servers {
		if p.isKilled() {
			continue
		}
		m, err := scrapeGauges(ctx, p.metrics, live)
		if err != nil {
			return 0, err
		}
		if _, ok := m[live]; !ok {
			return 0, fmt.Errorf("replica %s has no %s", p.id, live)
		}
		sum += int64(m[live])
	}
	return sum, nil
}

// receipt returns when an agent received the edit watched, from its
// start; 0 before.
func (w *policyWatch) receipt(agent int) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.received[agent]
}

// sleep waits for d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

func mean(xs []int64) int64 {
	if len(xs) == 0 {
		return 0
	}
	var sum int64
	for _, x := range xs {
		sum += x
	}
	return sum / int64(len(xs))
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }
