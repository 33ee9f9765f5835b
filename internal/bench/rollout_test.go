package bench

import (
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRolloutPhase runs the rollout phase on ten agents — a real server
// process with the real plugins, agents over mTLS — and requires a
// complete report: the convergence's figures measured, every stage
// approved, its two clusters holding the new outputs after the approval
// and none before, the rollout completed, and the windows and ratios
// measured.
func TestRolloutPhase(t *testing.T) {
	bin := buildBinaries(t)
	opts := DefaultRolloutOptions()
	opts.Executable, opts.Plugins = filepath.Join(bin, "meshrelay"), bin
	opts.Agents, opts.Services, opts.RolloutWindow = 10, 3, 2*time.Second
	opts.IdleWindow = time.Second
	opts.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelError}))
	opts.Progress = t.Output()
	rep, err := Run(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if rep.ServerHeapPerAgent <= 0 || rep.PluginsCPUConverge <= 0 || rep.AgentsCPUConverge <= 0 {
		t.Errorf("live heap per agent %v, CPU to converge of the plugins %v and of the agents %v, want each measured",
			rep.ServerHeapPerAgent, rep.PluginsCPUConverge, rep.AgentsCPUConverge)
	}
	ro := rep.Rollout
	if ro == nil {
		t.Fatal("the report has no rollout phase")
	}
	if ro.Phase != "Completed" || ro.CompletedSeconds <= 0 {
		t.Errorf("rollout %s after %.3fs, want Completed after some time", ro.Phase, ro.CompletedSeconds)
	}
	if ro.EarlyReceipts != 0 {
		t.Errorf("%d clusters received the new outputs before their stage was approved, want 0", ro.EarlyReceipts)
	}
	if len(ro.StageReports) != RolloutStages {
		t.Fatalf("%d stage reports, want %d", len(ro.StageReports), RolloutStages)
	}
	for k, s := range ro.StageReports {
		if s.Name != rolloutStageName(k) || s.Clusters != opts.Agents/RolloutStages || s.Held != s.Clusters {
			t.Errorf("stage %d = %+v, want %s with %d clusters, all holding the new outputs", k, s, rolloutStageName(k), opts.Agents/RolloutStages)
		}
		if s.AllHeldSeconds <= 0 || s.HeldLatency.Count != s.Clusters || s.DoneSeconds <= 0 {
			t.Errorf("stage %s timed %+v, want a latency per cluster and a positive time to done", s.Name, s)
		}
	}
	for name, w := range map[string]RolloutWindow{"one": ro.One, "two": ro.Two, "after": ro.After} {
		if w.ServerRSS <= 0 || w.PluginsRSS <= 0 || w.ServerHeap <= 0 || w.CPUPerSecond <= 0 {
			t.Errorf("window %s = %+v, want memory and CPU measured", name, w)
		}
		if w.InputChanges == 0 || w.InputLatency.Count != w.InputChanges {
			t.Errorf("window %s: %d input changes, %d received, want some, all received", name, w.InputChanges, w.InputLatency.Count)
		}
	}
	for name, v := range map[string]float64{"memory": ro.MemoryRatio, "peak": ro.PeakMemoryRatio, "after": ro.AfterMemoryRatio, "heap": ro.HeapRatio, "cpu": ro.CPURatio} {
		if v <= 0 {
			t.Errorf("%s ratio = %v, want it computed", name, v)
		}
	}
	if ro.PeakRSSBytes < ro.One.RSS()/2 {
		t.Errorf("peak RSS %d, want about the one-revision RSS %d or more", ro.PeakRSSBytes, ro.One.RSS())
	}
}

func TestRolloutStrategyYAML(t *testing.T) {
	y := string(RolloutStrategyYAML())
	for k := range RolloutStages {
		if !strings.Contains(y, "{matchLabels: {"+rolloutLabel+": "+rolloutStageName(k)+"}}") {
			t.Errorf("the strategy has no stage selecting %s:\n%s", rolloutStageName(k), y)
		}
	}
	if n := strings.Count(y, "approval: true"); n != RolloutStages {
		t.Errorf("%d stages gated by approval, want %d", n, RolloutStages)
	}
	// Every stage has clusters, the first and last included.
	for _, n := range []int{5, 10, 1000, 1003} {
		counts := make([]int, RolloutStages)
		for i := range n {
			counts[rolloutStage(i, n)]++
		}
		for k, c := range counts {
			if c < n/RolloutStages {
				t.Errorf("%d clusters: stage %d has %d, want %d or more", n, k, c, n/RolloutStages)
			}
		}
	}
}
