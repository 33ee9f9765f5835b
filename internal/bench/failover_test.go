package bench

import (
	"fmt"
	"testing"

	"github.com/meshrelay/meshrelay/api/snapshot"
)

// configMap returns a ConfigMap output resource.
func configMap(t *testing.T, name, value string) snapshot.Resource {
	t.Helper()
	r, err := snapshot.FromObject(map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": name, "namespace": "ns"},
		"data":     map[string]any{"v": value},
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func outputOf(t *testing.T, rs ...snapshot.Resource) *snapshot.Snapshot {
	t.Helper()
	s, err := snapshot.New(0, rs)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestChurnWatch(t *testing.T) {
	a, b, c := configMap(t, "a", "1"), configMap(t, "b", "1"), configMap(t, "c", "1")
	base := outputOf(t, a, b)
	type step struct {
		backend string
		next    *snapshot.Snapshot
	}
	for _, tc := range []struct {
		name  string
		steps []step
		want  OutputChurn
	}{
		{"the same outputs again", []step{{"istio", base}, {"istio", base.WithVersion(7)}}, OutputChurn{}},
		{"deleted and re-created", []step{{"istio", outputOf(t, a)}, {"istio", base}},
			OutputChurn{Changes: 2, Deleted: 1, Recreated: 1}},
		{"emptied and refilled", []step{{"istio", snapshot.Empty}, {"istio", base}},
			OutputChurn{Changes: 2, Deleted: 2, Recreated: 2}},
		{"modified and back", []step{{"istio", outputOf(t, a, configMap(t, "b", "2"))}, {"istio", base}},
			OutputChurn{Changes: 2, Modified: 2}},
		{"added", []step{{"istio", outputOf(t, a, b, c)}}, OutputChurn{Changes: 1, Added: 1}},
		{"a deletion in another backend is not re-created by this one", []step{{"envoy", outputOf(t, a)}, {"istio", base}},
			OutputChurn{Changes: 1, Deleted: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newChurnWatch()
			prev := map[string]*snapshot.Snapshot{"istio": base, "envoy": base}
			for _, s := range tc.steps {
				w.observe(s.backend, prev[s.backend], snapshot.Diff(prev[s.backend], s.next))
				prev[s.backend] = s.next
			}
			if w.OutputChurn != tc.want {
				t.Errorf("churn = %+v, want %+v", w.OutputChurn, tc.want)
			}
		})
	}
}

// TestSimCountsChurnOnlyWhileWatched drives a sim's sink: outputs it
// receives count as churn only between watchChurn(w) and watchChurn(nil).
func TestSimCountsChurnOnlyWhileWatched(t *testing.T) {
	s := &sim{policy: newPolicyWatch(1)}
	apply := func(rs ...snapshot.Resource) {
		t.Helper()
		if _, err := s.Apply(t.Context(), "istio", outputOf(t, rs...), true); err != nil {
			t.Fatal(err)
		}
	}
	a := configMap(t, "a", "1")
	apply(a)
	w := newChurnWatch()
	s.watchChurn(w)
	apply(a)
	apply(a, configMap(t, "b", "1"))
	s.watchChurn(nil)
	apply(a)
	if want := (OutputChurn{Changes: 1, Added: 1}); w.OutputChurn != want {
		t.Errorf("churn = %+v, want %+v", w.OutputChurn, want)
	}
	if got, want := s.held(), map[string]string{"istio": outputOf(t, a).Hash().Short()}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("held() = %v, want %v", got, want)
	}
}
