package istio

import (
	"strings"
	"testing"

	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"k8s.io/apimachinery/pkg/util/validation"
)

func TestObjectName(t *testing.T) {
	long := strings.Repeat("a", 40)
	tests := map[string]struct {
		parts []string
		want  string
	}{
		"joined":      {parts: []string{"reviews-split", "reviews"}, want: "reviews-split-reviews"},
		"dots":        {parts: []string{"my.policy", "Reviews"}, want: "my-policy-reviews"},
		"long":        {parts: []string{long, long}, want: (long + "-" + long)[:54] + "-"},
		"long-other":  {parts: []string{long, long + "b"}, want: (long + "-" + long)[:54] + "-"},
		"edge dashes": {parts: []string{"-x-", ""}, want: "x"},
	}
	seen := map[string]string{}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := objectName(tc.parts...)
			if errs := validation.IsDNS1123Label(got); len(errs) > 0 {
				t.Errorf("objectName(%q) = %q, not a DNS-1123 label: %v", tc.parts, got, errs)
			}
			if !strings.HasPrefix(got, tc.want) {
				t.Errorf("objectName(%q) = %q, want prefix %q", tc.parts, got, tc.want)
			}
		})
		seen[objectName(tc.parts...)] = name
	}
	if len(seen) != len(tests) {
		t.Errorf("objectName gave %d distinct names for %d inputs: %v", len(seen), len(tests), seen)
	}
}

func TestSubsetName(t *testing.T) {
	tests := map[string]struct {
		labels map[string]string
		want   string
	}{
		"version":   {labels: map[string]string{"version": "v1"}, want: "v1"},
		"two":       {labels: map[string]string{"version": "v2", "track": "Canary"}, want: "canary-v2"},
		"no values": {labels: map[string]string{"gpu": ""}, want: "gpu"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := subsetName(tc.labels); got != tc.want {
				t.Errorf("subsetName(%v) = %q, want %q", tc.labels, got, tc.want)
			}
		})
	}
}

func TestSplitWeights(t *testing.T) {
	route := func(weights ...int32) []policyv1alpha1.WeightedDestination {
		var out []policyv1alpha1.WeightedDestination
		for _, w := range weights {
			out = append(out, policyv1alpha1.WeightedDestination{Weight: w})
		}
		return out
	}
	tests := map[string]struct {
		route []policyv1alpha1.WeightedDestination
		want  []int32
	}{
		"given":       {route: route(80, 20), want: []int32{80, 20}},
		"equal":       {route: route(0, 0, 0), want: []int32{34, 33, 33}},
		"single":      {route: route(0), want: []int32{0}},
		"single 100":  {route: route(100), want: []int32{0}},
		"zero weight": {route: route(100, 0), want: []int32{100, 0}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := splitWeights(tc.route)
			if !slicesEqual(got, tc.want) {
				t.Errorf("splitWeights(%v) = %v, want %v", tc.route, got, tc.want)
			}
		})
	}
}

func slicesEqual(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// FuzzObjectName checks that any parts give a DNS-1123 label of at most 63
// characters, the same one each time.
func FuzzObjectName(f *testing.F) {
	f.Add("reviews-split", "reviews")
	f.Add("My.Policy", "Ünïcode")
	f.Add(strings.Repeat("x", 70), "-")
	f.Fuzz(func(t *testing.T, a, b string) {
		got := objectName(a, b)
		if got == "" {
			return // nothing usable in the parts; callers pass non-empty names
		}
		if errs := validation.IsDNS1123Label(got); len(errs) > 0 {
			t.Fatalf("objectName(%q, %q) = %q: %v", a, b, got, errs)
		}
		if again := objectName(a, b); again != got {
			t.Fatalf("objectName(%q, %q) = %q, then %q", a, b, got, again)
		}
	})
}
