package offline

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// offlineFleet writes the demo's clusters, a labels.yaml with body (none
// when empty) and a policy admitting the details Service's clients from
// the clusters labelled region=eu, and returns the clusters and policies
// directories.
func offlineFleet(t *testing.T, labels string) (clusters, policies string) {
	t.Helper()
	dir := t.TempDir()
	clusters, policies = filepath.Join(dir, "clusters"), filepath.Join(dir, "policies")
	for _, c := range []string{"central", "east", "north", "west"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "demo", "clusters", c, "cluster.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(clusters, c, "cluster.yaml"), string(b))
	}
	if labels != "" {
		write(t, filepath.Join(clusters, LabelsFile), labels)
	}
	write(t, filepath.Join(policies, "p.yaml"), `apiVersion: policy.meshrelay.io/v1alpha1
kind: AccessPolicy
metadata: {name: details-by-region, namespace: bookinfo}
spec:
  destinationSelectors: [{namespaces: [bookinfo], names: [details]}]
  action: Allow
  from: [{clusterSelector: {matchLabels: {region: eu}}}]
  ports: [9080]
`)
	return clusters, policies
}

func write(t *testing.T, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// The clusters directory's labels.yaml gives the clusters the labels a
// server's registry would: a client clusterSelector translates offline to
// the clients of the clusters it matches, and to none without labels.
func TestTranslateReadsClusterLabels(t *testing.T) {
	clientsIn := func(labels string) string {
		clusters, policies := offlineFleet(t, labels)
		res, err := Translate(t.Context(), Options{ClustersDir: clusters, PoliciesDir: policies, Translators: translators(t)})
		if err != nil {
			t.Fatal(err)
		}
		for k, s := range res.Outputs {
			if k.Cluster != "central" || k.Backend != "cilium" {
				continue
			}
			for r := range s.All() {
				if b := string(r.Body); strings.Contains(b, "details-by-region") {
					return b
				}
			}
		}
		return ""
	}
	labeled := clientsIn("central: {region: eu}\neast: {region: eu}\nwest: {region: us}\n")
	for _, want := range []string{`"central"`, `"east"`} {
		if !strings.Contains(labeled, want) {
			t.Errorf("central's Cilium policy does not admit %s's clients:\n%s", want, labeled)
		}
	}
	if strings.Contains(labeled, `"west"`) || strings.Contains(labeled, `"north"`) {
		t.Errorf("central's Cilium policy admits clients of clusters not labelled region=eu:\n%s", labeled)
	}
	unlabeled := clientsIn("")
	if unlabeled == "" || strings.Contains(unlabeled, "fromEndpoints") {
		t.Errorf("without labels the clusterSelector matches no cluster, so the policy must admit no client:\n%s", unlabeled)
	}
	if d := cmp.Diff(labeled, unlabeled); d == "" {
		t.Error("labels.yaml changed nothing")
	}
}

// A labels.yaml naming a cluster with no directory, or with an invalid
// label, is refused.
func TestReadFleetRefusesBadLabels(t *testing.T) {
	for name, body := range map[string]string{
		"unknown cluster": "south: {region: eu}\n",
		"invalid label":   "east: {\"bad key\": x}\n",
		"not a map":       "- east\n",
	} {
		t.Run(name, func(t *testing.T) {
			clusters, _ := offlineFleet(t, body)
			if _, err := ReadFleet(clusters, "", nil); err == nil {
				t.Errorf("ReadFleet with labels.yaml %q: no error", body)
			}
		})
	}
}
