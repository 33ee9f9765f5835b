package bench

import (
	"log/slog"
	"path/filepath"
	"testing"
)

// TestColdStart runs the cold start on 30 clusters — a redis-server of
// its own, the fleet written through the store API, a real server process
// with the real plugins — and requires a complete report: every cluster's
// outputs loaded from Redis, the server in safe mode with no agent
// connected, and the stages measured in order.
func TestColdStart(t *testing.T) {
	bin := buildBinaries(t)
	opts := DefaultOptions()
	opts.Executable, opts.Plugins = filepath.Join(bin, "meshrelay"), bin
	opts.Agents, opts.Services, opts.ColdStart = 30, 5, true
	opts.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelError}))
	opts.Progress = t.Output()
	rep, err := RunColdStart(t.Context(), opts)
	if err != nil {
		t.Fatalf("RunColdStart: %v", err)
	}
	if want := 30 * len(Plugins); rep.LoadedOutputs != want {
		t.Errorf("LoadedOutputs = %d, want %d", rep.LoadedOutputs, want)
	}
	if !rep.SafeMode {
		t.Error("SafeMode = false, want true: no agent has reported since the start")
	}
	if !(0 < rep.StoreLoaded && rep.StoreLoaded <= rep.FleetLoaded && rep.FleetLoaded <= rep.Serving) {
		t.Errorf("stages store %.3fs, fleet %.3fs, serving %.3fs: want 0 < store ≤ fleet ≤ serving", rep.StoreLoaded, rep.FleetLoaded, rep.Serving)
	}
	if rep.RedisBytes == 0 || rep.Server.RSSBytes == 0 {
		t.Errorf("RedisBytes %d, server RSS %d: want both measured", rep.RedisBytes, rep.Server.RSSBytes)
	}
}
