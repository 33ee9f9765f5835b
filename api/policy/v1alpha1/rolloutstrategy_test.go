package v1alpha1

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestRolloutStrategyValidate(t *testing.T) {
	const head = "apiVersion: policy.meshrelay.io/v1alpha1\nkind: RolloutStrategy\nmetadata: {name: fleet}\n"
	tests := map[string]struct {
		spec string
		want []string // substrings of the errors, in order; none for valid
	}{
		"valid": {spec: `spec:
  minHealthy: 300ms
  stages:
  - name: canary
    clusterSelector: {matchLabels: {tier: canary}}
    maxConcurrent: 50%
  - clusters: [east, west]
    approval: true
    maxFailures: 1`},
		"no stages":          {spec: "spec: {stages: []}", want: []string{"spec.stages: Required value"}},
		"stage selects none": {spec: "spec: {stages: [{name: a}]}", want: []string{"spec.stages[0].clusters: Required value"}},
		"duplicate names": {spec: "spec: {stages: [{name: a, clusters: [east]}, {name: a, clusters: [west]}]}",
			want: []string{`spec.stages[1].name: Duplicate value: "a"`}},
		"default name taken": {spec: "spec: {stages: [{name: stage-2, clusters: [east]}, {clusters: [west]}]}",
			want: []string{`spec.stages[1].name: Duplicate value: "stage-2"`}},
		"zero concurrency": {spec: "spec: {stages: [{clusters: [east], maxConcurrent: 0}]}",
			want: []string{"spec.stages[0].maxConcurrent: Invalid value"}},
		"bad percentage": {spec: "spec: {stages: [{clusters: [east], maxFailures: 120%}]}",
			want: []string{"spec.stages[0].maxFailures: Invalid value"}},
		"bad selector": {spec: "spec: {stages: [{clusterSelector: {matchExpressions: [{key: tier, operator: In}]}}]}",
			want: []string{"spec.stages[0].clusterSelector.matchExpressions[0].values: Required value"}},
		"negative soak": {spec: "spec: {minHealthy: -1s, stages: [{clusters: [east]}]}",
			want: []string{"spec.minHealthy: Invalid value"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ps, err := Decode([]byte(head + tc.spec))
			if err != nil || len(ps) != 1 {
				t.Fatalf("Decode = %v, %v", ps, err)
			}
			errs := ps[0].Validate()
			if len(errs) != len(tc.want) {
				t.Fatalf("Validate() = %v, want %d errors %q", errs, len(tc.want), tc.want)
			}
			for i, e := range errs {
				if !strings.Contains(e.Error(), tc.want[i]) {
					t.Errorf("Validate()[%d] = %q, want it to contain %q", i, e.Error(), tc.want[i])
				}
			}
		})
	}
}

func TestScaled(t *testing.T) {
	pct := intstr.FromString("34%")
	count := intstr.FromInt32(2)
	tests := map[string]struct {
		v       *intstr.IntOrString
		roundUp bool
		want    int
	}{
		"nil is the default": {v: nil, want: 7},
		"count":              {v: &count, want: 2},
		"percentage up":      {v: &pct, roundUp: true, want: 4},
		"percentage down":    {v: &pct, want: 3},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := Scaled(tc.v, 10, 7, tc.roundUp); got != tc.want {
				t.Errorf("Scaled(%v, 10) = %d, want %d", tc.v, got, tc.want)
			}
		})
	}
}
