package v1alpha1

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Defaults of a RolloutStrategy's timings.
const (
	DefaultMinHealthy       = 30 * time.Second
	DefaultProgressDeadline = 10 * time.Minute
)

// Validate checks the RolloutStrategy; see Policy.Validate.
func (p *RolloutStrategy) Validate() field.ErrorList {
	errs := validateMeta(&p.ObjectMeta, field.NewPath("metadata"))
	spec := field.NewPath("spec")
	s := &p.Spec
	if len(s.Stages) == 0 {
		errs = append(errs, field.Required(spec.Child("stages"), "a rollout needs at least one stage"))
	}
	errs = append(errs, validateRolloutTimings(s.MinHealthy, s.ProgressDeadline, s.MaxFailures, spec)...)
	names := sets.New[string]()
	for i := range s.Stages {
		st := &s.Stages[i]
		sp := spec.Child("stages").Index(i)
		if len(st.Clusters) == 0 && st.ClusterSelector == nil {
			errs = append(errs, field.Required(sp.Child("clusters"), "name the stage's clusters, or select them by their registry labels with clusterSelector"))
		}
		errs = append(errs, dns1123Labels(st.Clusters, sp.Child("clusters"))...)
		errs = append(errs, validateClusterSelector(st.ClusterSelector, sp.Child("clusterSelector"))...)
		name := st.StageName(i)
		if st.Name != "" {
			errs = append(errs, dns1123Label(st.Name, sp.Child("name"))...)
		}
		if names.Has(name) {
			errs = append(errs, field.Duplicate(sp.Child("name"), name))
		}
		names.Insert(name)
		if st.MaxConcurrent != nil {
			if n, err := scaled(st.MaxConcurrent, 100, true); err != nil {
				errs = append(errs, field.Invalid(sp.Child("maxConcurrent"), st.MaxConcurrent.String(), err.Error()))
			} else if n < 1 {
				errs = append(errs, field.Invalid(sp.Child("maxConcurrent"), st.MaxConcurrent.String(), "must release at least one cluster at a time"))
			}
		}
		errs = append(errs, validateRolloutTimings(st.MinHealthy, st.ProgressDeadline, st.MaxFailures, sp)...)
	}
	return errs
}

func validateRolloutTimings(minHealthy, deadline *metav1.Duration, maxFailures *intstr.IntOrString, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if minHealthy != nil && minHealthy.Duration < 0 {
		errs = append(errs, field.Invalid(path.Child("minHealthy"), minHealthy.Duration.String(), "must not be negative"))
	}
	if deadline != nil {
		errs = append(errs, positiveDuration(*deadline, path.Child("progressDeadline"))...)
	}
	if maxFailures != nil {
		if _, err := scaled(maxFailures, 100, false); err != nil {
			errs = append(errs, field.Invalid(path.Child("maxFailures"), maxFailures.String(), err.Error()))
		}
	}
	return errs
}

// StageName returns the stage's name, "stage-N" (N from 1) when unnamed.
func (s *RolloutStage) StageName(index int) string {
	if s.Name != "" {
		return s.Name
	}
	return "stage-" + strconv.Itoa(index+1)
}

// Scaled resolves a count or percentage of total: a percentage is rounded
// up when roundUp is set, down otherwise; nil, or a value that does not
// validate, gives def.
func Scaled(v *intstr.IntOrString, total, def int, roundUp bool) int {
	if v == nil {
		return def
	}
	n, err := scaled(v, total, roundUp)
	if err != nil {
		return def
	}
	return n
}

func scaled(v *intstr.IntOrString, total int, roundUp bool) (int, error) {
	if v.Type == intstr.Int {
		if v.IntVal < 0 {
			return 0, fmt.Errorf("must not be negative")
		}
		return int(v.IntVal), nil
	}
	s, ok := strings.CutSuffix(v.StrVal, "%")
	if !ok {
		return 0, fmt.Errorf("must be a count or a percentage such as 25%%")
	}
	pct, err := strconv.Atoi(s)
	if err != nil || pct < 0 || pct > 100 {
		return 0, fmt.Errorf("must be a percentage between 0%% and 100%%")
	}
	x := float64(pct) * float64(total) / 100
	if roundUp {
		return int(math.Ceil(x)), nil
	}
	return int(math.Floor(x)), nil
}
