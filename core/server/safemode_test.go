package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/store"
	"github.com/meshrelay/meshrelay/core/store/memory"
)

// lockedBuffer is a bytes.Buffer safe for the server's concurrent logging.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A cold start of many clusters waiting for their agents logs how many it
// waits for and names only the first few, in the "fleet loaded" line and
// in /readyz, while GetStatus still lists them all.
func TestFleetLoadedNamesFewWaiting(t *testing.T) {
	const clusters = waitingShown + 15
	ctx := context.Background()
	st := memory.New()
	var want []string
	for i := range clusters {
		name := fmt.Sprintf("c%03d", i)
		want = append(want, name)
		if _, err := store.UpdateCluster(ctx, st, name, func(*store.Cluster, bool) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if err := st.PutInput(ctx, name, snapshot.Empty.WithVersion(1)); err != nil {
			t.Fatal(err)
		}
	}
	var logs lockedBuffer
	ts := startServerDeps(t, st, "", func(d *Deps) { d.Logger = slog.New(slog.NewJSONHandler(&logs, nil)) })

	var line struct {
		Waiting    int      `json:"waiting"`
		WaitingFor []string `json:"waiting_for"`
	}
	found := false
	for l := range strings.Lines(logs.String()) {
		var m struct {
			Msg string `json:"msg"`
		}
		if json.Unmarshal([]byte(l), &m) == nil && m.Msg == "fleet loaded" {
			if err := json.Unmarshal([]byte(l), &line); err != nil {
				t.Fatal(err)
			}
			found = true
		}
	}
	if !found {
		t.Fatalf("no \"fleet loaded\" line in the log:\n%s", logs.String())
	}
	if line.Waiting != clusters || !cmp.Equal(line.WaitingFor, want[:waitingShown]) {
		t.Fatalf("fleet loaded: waiting %d for %v, want %d for the first %d: %v", line.Waiting, line.WaitingFor, clusters, waitingShown, want[:waitingShown])
	}

	req, _ := http.NewRequest(http.MethodGet, "http://"+ts.AdminAddr()+"/readyz", nil)
	req.Header.Set("Authorization", "Bearer "+ts.adminToken())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	wantReady := fmt.Sprintf("ok; safe mode: waiting for %d clusters: %s and 15 more\n", clusters, strings.Join(want[:waitingShown], ","))
	if string(body) != wantReady {
		t.Fatalf("/readyz = %q, want %q", body, wantReady)
	}

	status, err := ts.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !cmp.Equal(status.GetWaitingFor(), want) {
		t.Fatalf("GetStatus waiting for %v, want all %d clusters", status.GetWaitingFor(), clusters)
	}
}
