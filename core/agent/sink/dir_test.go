package sink

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/meshrelay/meshrelay/core/snapshot"
)

func listDir(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestDirApply(t *testing.T) {
	root := t.TempDir()
	d := NewDir(root)
	ctx := context.Background()
	reviews := virtualService(t, "bookinfo", "reviews", "reviews", 80)
	ratings := virtualService(t, "bookinfo", "ratings", "ratings", 50)
	cm := configMap(t, "bookinfo", "ours", "a")

	errs, err := d.Apply(ctx, "istio", snap(t, reviews, ratings, cm), true)
	if err != nil || len(errs) != 0 {
		t.Fatalf("Apply() = %v, %v", errs, err)
	}
	want := []string{
		"configmap.core_bookinfo_ours.yaml",
		"virtualservice.networking.istio.io_bookinfo_ratings.yaml",
		"virtualservice.networking.istio.io_bookinfo_reviews.yaml",
	}
	if got := listDir(t, filepath.Join(root, "istio")); !slices.Equal(got, want) {
		t.Errorf("files = %v, want %v", got, want)
	}
	data, err := os.ReadFile(filepath.Join(root, "istio", want[2]))
	if err != nil {
		t.Fatal(err)
	}
	back, err := snapshot.FromYAML(data)
	if err != nil || back.Hash != reviews.Hash {
		t.Errorf("file does not round-trip: %v", err)
	}

	// Another backend has its own directory.
	if _, err := d.Apply(ctx, "cilium", snap(t, cm), true); err != nil {
		t.Fatal(err)
	}

	// Update in place; prune=false keeps removed resources.
	updated := virtualService(t, "bookinfo", "reviews", "reviews", 20)
	if errs, err := d.Apply(ctx, "istio", snap(t, updated), false); err != nil || len(errs) != 0 {
		t.Fatalf("Apply(prune=false) = %v, %v", errs, err)
	}
	if got := listDir(t, filepath.Join(root, "istio")); !slices.Equal(got, want) {
		t.Errorf("files after prune=false = %v, want %v", got, want)
	}
	data, _ = os.ReadFile(filepath.Join(root, "istio", want[2]))
	if back, _ := snapshot.FromYAML(data); back.Hash != updated.Hash {
		t.Error("file not updated")
	}

	// prune=true removes them, in this backend only.
	if errs, err := d.Apply(ctx, "istio", snap(t, updated), true); err != nil || len(errs) != 0 {
		t.Fatalf("Apply(prune=true) = %v, %v", errs, err)
	}
	if got := listDir(t, filepath.Join(root, "istio")); !slices.Equal(got, want[2:]) {
		t.Errorf("files after prune = %v, want %v", got, want[2:])
	}
	if got := listDir(t, filepath.Join(root, "cilium")); len(got) != 1 {
		t.Errorf("cilium files = %v, want one", got)
	}

	for _, bad := range []string{"", "..", "a/b"} {
		if _, err := d.Apply(ctx, bad, snap(t), true); err == nil {
			t.Errorf("Apply(%q) succeeded, want error", bad)
		}
	}
}

func TestMatches(t *testing.T) {
	tests := map[string]struct {
		desired, live map[string]any
		want          bool
	}{
		"live has defaults": {
			desired: map[string]any{"spec": map[string]any{"ports": []any{map[string]any{"port": int64(80)}}}},
			live:    map[string]any{"spec": map[string]any{"clusterIP": "10.0.0.1", "ports": []any{map[string]any{"port": int64(80), "protocol": "TCP"}}}},
			want:    true,
		},
		"changed value": {
			desired: map[string]any{"spec": map[string]any{"weight": int64(80)}},
			live:    map[string]any{"spec": map[string]any{"weight": int64(20)}},
		},
		"list element removed": {
			desired: map[string]any{"spec": map[string]any{"hosts": []any{"a", "b"}}},
			live:    map[string]any{"spec": map[string]any{"hosts": []any{"a"}}},
		},
		"label removed": {
			desired: map[string]any{"metadata": map[string]any{"labels": map[string]any{"a": "1"}}},
			live:    map[string]any{"metadata": map[string]any{"labels": map[string]any{}, "uid": "x"}},
		},
		"other metadata ignored": {
			desired: map[string]any{"metadata": map[string]any{"name": "n", "labels": map[string]any{"a": "1"}}},
			live:    map[string]any{"metadata": map[string]any{"name": "n", "labels": map[string]any{"a": "1", "b": "2"}, "uid": "x"}},
			want:    true,
		},
		"number kinds": {
			desired: map[string]any{"spec": map[string]any{"x": float64(2)}},
			live:    map[string]any{"spec": map[string]any{"x": int64(2)}},
			want:    true,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := matches(tc.desired, tc.live); got != tc.want {
				t.Errorf("matches() = %v, want %v", got, tc.want)
			}
		})
	}
}
