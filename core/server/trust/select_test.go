package trust

import (
	"strings"
	"testing"

	"github.com/meshrelay/meshrelay/api/meta"
	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Which clusters a MeshTrust selects, and what it says about the others:
// the clusters it names and no other, whatever meshes they report, a
// cluster in one MeshTrust only, a warning for names not registered and
// for Cilium clusters.
func TestSelectClusters(t *testing.T) {
	fleet := members{
		names:  []string{"central", "east", "west"},
		meshes: map[string][]string{"central": {"cilium"}, "east": {"istio"}, "west": {"istio", "envoy"}},
	}
	mt := func(name string, clusters ...string) *policyv1alpha1.MeshTrust {
		return &policyv1alpha1.MeshTrust{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "meshrelay"}, Spec: policyv1alpha1.MeshTrustSpec{Clusters: clusters}}
	}
	owner := map[string]string{}
	if got, _ := selectClusters(mt("none"), fleet, owner, nil); len(got) != 0 {
		t.Errorf("a MeshTrust naming no cluster selected %v, want none (not the clusters reporting Istio)", got)
	}
	got, diags := selectClusters(mt("a", "central", "east", "west"), fleet, owner, nil)
	if strings.Join(got, ",") != "central,east,west" {
		t.Errorf("selection = %v, want the named clusters central,east,west", got)
	}
	if len(diags) != 1 || diags[0].Severity != meta.SeverityWarning || diags[0].Cluster != "central" || !strings.Contains(diags[0].Summary, "Cilium CA") {
		t.Errorf("diagnostics = %+v, want one warning that central's Cilium cluster mesh needs its own shared CA", diags)
	}
	got, diags = selectClusters(mt("b", "west", "north"), fleet, owner, nil)
	if len(got) != 0 {
		t.Errorf("a second MeshTrust took %v, which the first one owns", got)
	}
	var summaries []string
	for _, d := range diags {
		summaries = append(summaries, d.Severity.String()+": "+d.Summary)
	}
	want := []string{`warning: cluster "north" is not registered`, `error: cluster "west" already shares the root of MeshTrust meshrelay/a; a cluster belongs to one MeshTrust`}
	if strings.Join(summaries, "|") != strings.Join(want, "|") {
		t.Errorf("diagnostics = %q, want %q", summaries, want)
	}
}
