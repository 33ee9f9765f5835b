package v1alpha1

import (
	"strings"
	"testing"

	"github.com/meshrelay/meshrelay/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func prodSelector() *metav1.LabelSelector {
	return &metav1.LabelSelector{
		MatchLabels:      map[string]string{"env": "prod"},
		MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "region", Operator: metav1.LabelSelectorOpIn, Values: []string{"eu-west", "eu-north"}}},
	}
}

// A selector's names and clusterSelector select the union of the clusters
// each selects; neither set admits every cluster; MeshTrust membership
// needs one of them.
func TestClusterSelection(t *testing.T) {
	east := ClusterMeta{Name: "east", Labels: map[string]string{"env": "prod", "region": "eu-west"}}
	west := ClusterMeta{Name: "west", Labels: map[string]string{"env": "prod", "region": "us-east"}}
	central := ClusterMeta{Name: "central"}
	tests := map[string]struct {
		sel  DestinationSelector
		want map[string]bool
	}{
		"no cluster fields":      {DestinationSelector{}, map[string]bool{"east": true, "west": true, "central": true}},
		"names only":             {DestinationSelector{Clusters: []string{"west"}}, map[string]bool{"west": true}},
		"clusterSelector only":   {DestinationSelector{ClusterSelector: prodSelector()}, map[string]bool{"east": true}},
		"names and selector":     {DestinationSelector{Clusters: []string{"central"}, ClusterSelector: prodSelector()}, map[string]bool{"east": true, "central": true}},
		"empty clusterSelector":  {DestinationSelector{ClusterSelector: &metav1.LabelSelector{}}, map[string]bool{"east": true, "west": true, "central": true}},
		"selector and namespace": {DestinationSelector{ClusterSelector: prodSelector(), Namespaces: []string{"other"}}, map[string]bool{}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			for _, c := range []ClusterMeta{east, west, central} {
				if got := tt.sel.Matches(c, "bookinfo", "reviews", nil); got != tt.want[c.Name] {
					t.Errorf("Matches(%s) = %v, want %v", c.Name, got, tt.want[c.Name])
				}
			}
		})
	}
	mt := MeshTrustSpec{Clusters: []string{"central"}, ClusterSelector: prodSelector()}
	for _, c := range []struct {
		c    ClusterMeta
		want bool
	}{{east, true}, {west, false}, {central, true}} {
		if got := mt.SelectsCluster(c.c); got != c.want {
			t.Errorf("MeshTrust SelectsCluster(%s) = %v, want %v", c.c.Name, got, c.want)
		}
	}
	if (&MeshTrustSpec{}).SelectsCluster(east) {
		t.Error("a MeshTrust with neither clusters nor clusterSelector selected east")
	}
}

// A workload cluster's policy cannot reach other clusters by label: its
// clusterSelector is dropped with a warning, and a selector that chose its
// clusters by label only selects nothing.
func TestScopeToClusterDropsClusterSelector(t *testing.T) {
	ap := &AccessPolicy{Spec: AccessPolicySpec{DestinationSelectors: []DestinationSelector{
		{ClusterSelector: prodSelector(), Names: []string{"a"}},
		{Clusters: []string{"west"}, ClusterSelector: prodSelector(), Names: []string{"b"}},
	}}}
	diags := ScopeToCluster(ap, "west")
	sels := ap.Spec.DestinationSelectors
	if len(sels) != 1 || sels[0].Names[0] != "b" || sels[0].ClusterSelector != nil || len(sels[0].Clusters) != 1 || sels[0].Clusters[0] != "west" {
		t.Errorf("narrowed selectors = %+v, want only b's, in west, without clusterSelector", sels)
	}
	if len(diags) != 2 || diags[0].Severity != meta.SeverityWarning || !strings.Contains(diags[0].Summary, "clusterSelector selects clusters outside the tenancy") {
		t.Errorf("diagnostics = %+v, want a warning per clusterSelector", diags)
	}
}

// An invalid clusterSelector is an error on the object naming the field.
func TestClusterSelectorValidation(t *testing.T) {
	bad := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "region", Operator: metav1.LabelSelectorOpIn}}}
	tp := validTrafficPolicy()
	tp.Spec.DestinationSelectors[0].ClusterSelector = bad
	errs := tp.Validate()
	if len(errs) != 1 || errs[0].Field != "spec.destinationSelectors[0].clusterSelector.matchExpressions[0].values" {
		t.Errorf("Validate() = %v, want one error at spec.destinationSelectors[0].clusterSelector.matchExpressions[0].values", errs)
	}
	mt := &MeshTrust{ObjectMeta: metav1.ObjectMeta{Name: "fleet", Namespace: "meshrelay"}, Spec: MeshTrustSpec{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"bad key": "x"}}}}
	errs = mt.Validate()
	if len(errs) != 1 || !strings.HasPrefix(errs[0].Field, "spec.clusterSelector.matchLabels") {
		t.Errorf("MeshTrust Validate() = %v, want one error at spec.clusterSelector.matchLabels", errs)
	}
	mt.Spec.ClusterSelector = prodSelector()
	mt.Spec.Rotation.ExcludedClusters = []string{"east"}
	if errs := mt.Validate(); len(errs) != 0 {
		t.Errorf("a MeshTrust selecting by label, excluding a cluster it may select: Validate() = %v, want none", errs)
	}
}

// A client selector's cluster fields admit the union of the clusters they
// name and select; neither set admits every cluster, but a clusterSelector
// that matches no cluster admits none — it is never read as "any".
func TestClientClusterSelection(t *testing.T) {
	east := ClusterMeta{Name: "east", Labels: map[string]string{"env": "prod", "region": "eu-west"}}
	west := ClusterMeta{Name: "west", Labels: map[string]string{"env": "prod", "region": "us-east"}}
	central := ClusterMeta{Name: "central"}
	tests := map[string]struct {
		sel      ClientSelector
		restrict bool
		want     map[string]bool
	}{
		"no cluster fields":      {ClientSelector{Namespaces: []string{"a"}}, false, map[string]bool{"east": true, "west": true, "central": true}},
		"names only":             {ClientSelector{Clusters: []string{"west"}}, true, map[string]bool{"west": true}},
		"clusterSelector only":   {ClientSelector{ClusterSelector: prodSelector()}, true, map[string]bool{"east": true}},
		"names and selector":     {ClientSelector{Clusters: []string{"central"}, ClusterSelector: prodSelector()}, true, map[string]bool{"east": true, "central": true}},
		"empty clusterSelector":  {ClientSelector{ClusterSelector: &metav1.LabelSelector{}}, true, map[string]bool{"east": true, "west": true, "central": true}},
		"selector matching none": {ClientSelector{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "staging"}}}, true, map[string]bool{}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			if got := tt.sel.RestrictsClusters(); got != tt.restrict {
				t.Errorf("RestrictsClusters() = %v, want %v", got, tt.restrict)
			}
			for _, c := range []ClusterMeta{east, west, central} {
				if got := tt.sel.AdmitsCluster(c); got != tt.want[c.Name] {
					t.Errorf("AdmitsCluster(%s) = %v, want %v", c.Name, got, tt.want[c.Name])
				}
			}
		})
	}
}

// A client selector may set only a clusterSelector; an invalid one is an
// error naming the field.
func TestClientClusterSelectorValidation(t *testing.T) {
	ap := validAccessPolicy()
	ap.Spec.From = []ClientSelector{{ClusterSelector: prodSelector()}}
	if errs := ap.Validate(); len(errs) != 0 {
		t.Errorf("from with a clusterSelector only: Validate() = %v, want none", errs)
	}
	ap.Spec.From = []ClientSelector{{}, {ClusterSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "region", Operator: metav1.LabelSelectorOpIn}}}}}
	errs := ap.Validate()
	if len(errs) != 2 || errs[0].Field != "spec.from[0]" || errs[1].Field != "spec.from[1].clusterSelector.matchExpressions[0].values" {
		t.Errorf("Validate() = %v, want errors at spec.from[0] (nothing set) and spec.from[1].clusterSelector.matchExpressions[0].values", errs)
	}
}
