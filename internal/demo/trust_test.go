package demo

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// checkTrust checks that the demo's Istio clusters share one root: each
// reports an intermediate issued by the MeshTrust's root, with its expiry,
// and holds its cacerts Secret as a file.
func checkTrust(t *testing.T, report *Report, out, stdout string) {
	t.Helper()
	trust := report.Status.GetTrust()
	if len(trust) != 1 || trust[0].GetPhase() != "Active" || len(trust[0].GetRoots()) != 1 {
		t.Fatalf("mesh trust = %v, want one Active MeshTrust with one root", trust)
	}
	var clusters []string
	for _, c := range trust[0].GetClusters() {
		clusters = append(clusters, c.GetCluster())
		if c.GetIssuerRoot() != trust[0].GetRoots()[0] || c.GetIntermediateNotAfter() == nil {
			t.Errorf("%s: issuer %s, expiry %v; want the root %s and an expiry", c.GetCluster(), c.GetIssuerRoot(), c.GetIntermediateNotAfter(), trust[0].GetRoots()[0])
		}
		if _, err := os.Stat(filepath.Join(out, "outputs", c.GetCluster(), "mesh-trust", "istio-system", "cacerts.yaml")); err != nil {
			t.Errorf("%s: no cacerts Secret: %v", c.GetCluster(), err)
		}
	}
	if want := "Mesh trust meshrelay/fleet (Active), root sha256 " + trust[0].GetRoots()[0]; !strings.Contains(stdout, want) {
		t.Errorf("the demo's report does not show the shared root (%q):\n%s", want, stdout)
	}
	slices.Sort(clusters)
	if !slices.Equal(clusters, []string{"east", "west"}) {
		t.Errorf("mesh trust clusters = %v, want the Istio clusters east and west", clusters)
	}
}
