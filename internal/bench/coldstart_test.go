package bench

import (
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	storeredis "github.com/meshrelay/meshrelay/core/store/redis"
	"github.com/meshrelay/meshrelay/internal/testenv"
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

// The cold start's fill, batched and with the outputs built once, writes
// what writing each cluster through the store's methods would: every
// cluster's record as the gone replica's, the input of [NewCluster] and
// [coldStartOutput] of it for every plugin, including the clusters of a
// last, partial batch.
func TestColdStartFill(t *testing.T) {
	const clusters, services = fillBatch*2 + 5, 3
	ctx := t.Context()
	server := testenv.StartRedis(t)
	opts := DefaultOptions()
	opts.Store, opts.Agents, opts.Services, opts.Concurrency = server.URL(), clusters, services, 2
	opts.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelError}))
	if err := fillColdStart(ctx, opts); err != nil {
		t.Fatalf("fillColdStart: %v", err)
	}
	ropts, err := storeredis.ParseURL(server.URL())
	if err != nil {
		t.Fatal(err)
	}
	st, err := storeredis.New(ctx, ropts)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	records, err := st.ListClusters(ctx)
	if err != nil || len(records) != clusters {
		t.Fatalf("ListClusters() = %d records, %v; want %d", len(records), err, clusters)
	}
	for _, r := range records {
		if r.Replica != coldStartReplica || time.Since(r.LastSeen) < time.Hour {
			t.Fatalf("record %s: replica %q last seen %v, want %q an hour ago", r.Name, r.Replica, r.LastSeen, coldStartReplica)
		}
	}
	for i := range clusters {
		c, err := NewCluster(i, services)
		if err != nil {
			t.Fatal(err)
		}
		want, err := c.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		in, err := st.GetInput(ctx, c.Name)
		if err != nil || in.Hash() != want.Hash() {
			t.Fatalf("GetInput(%s) = %v, %v; want the input of NewCluster(%d)", c.Name, in, err, i)
		}
		for _, backend := range Plugins {
			want, err := coldStartOutput(c, backend)
			if err != nil {
				t.Fatal(err)
			}
			out, err := st.GetOutput(ctx, c.Name, backend)
			if err != nil || out.Hash() != want.Hash() || out.Version() != want.Version() {
				t.Fatalf("GetOutput(%s, %s) = %v, %v; want coldStartOutput of it", c.Name, backend, out, err)
			}
		}
	}
}
