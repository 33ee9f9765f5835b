package discovery

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	discoveryv1alpha1 "github.com/meshrelay/meshrelay/api/discovery/v1alpha1"
	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/internal/testutil"
)

// exampleDetector is a mesh added as a row of the table: it reads a
// Deployment's container args and a ConfigMap of its own.
var exampleDetector = detector{
	mesh:       "example",
	configMaps: []string{"example-roots"},
	detect: func(c *inventory) (*discoveryv1alpha1.MeshSpec, []discoveryv1alpha1.Gateway) {
		for _, w := range c.workloadsWith("example-destination") {
			if w.Kind != "Deployment" || w.Metadata.Name != "example-destination" {
				continue
			}
			d := w.container("destination")
			domain := ""
			for _, a := range d.Args {
				if v, ok := strings.CutPrefix(a, "-identity-trust-domain="); ok {
					domain = v
				}
			}
			ns := w.Metadata.Namespace
			return &discoveryv1alpha1.MeshSpec{
				Namespace: ns, Version: imageVersion(d.Image), TrustDomain: domain,
				Network: c.configMapData(ns, "example-roots")["network"],
			}, nil
		}
		return nil, nil
	},
}

// withDetector adds d to the table for the test.
func withDetector(t *testing.T, d detector) {
	t.Helper()
	saved := detectors
	detectors = append(slices.Clip(detectors), d)
	t.Cleanup(func() { detectors = saved })
}

// TestComputeDetectorRow checks that a row of the detector table is all a
// new mesh needs: Compute emits its Mesh beside the others, and the
// ConfigMap it reads is never an input of a Dir source's snapshot.
func TestComputeDetectorRow(t *testing.T) {
	withDetector(t, exampleDetector)
	deployment := `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"example-destination","namespace":"example"},
	  "spec":{"template":{"spec":{"containers":[{"name":"proxy","image":"proxy:9"},{"name":"destination","image":"reg/example/controller:v2.1.0","args":["-identity-trust-domain=corp.example"]}]}}}}`
	roots := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"example-roots","namespace":"example"},"data":{"network":"net9"}}`
	istiod := `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"istiod","namespace":"istio-system"},
	  "spec":{"template":{"spec":{"containers":[{"name":"discovery","image":"pilot:1.24.2"}]}}}}`

	got := map[string]discoveryv1alpha1.MeshSpec{}
	for _, r := range Compute(mustResources(t, deployment, roots, istiod)) {
		var m discoveryv1alpha1.Mesh
		if err := r.Decode(&m); err != nil {
			t.Fatal(err)
		}
		got[r.ID.Name] = m.Spec
	}
	want := map[string]discoveryv1alpha1.MeshSpec{
		"example": {Type: "example", Namespace: "example", Version: "v2.1.0", TrustDomain: "corp.example", Network: "net9"},
		"istio":   {Type: "istio", Namespace: "istio-system", Version: "1.24.2", TrustDomain: DefaultTrustDomain},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Compute() meshes mismatch (-want +got):\n%s", diff)
	}

	dir := t.TempDir()
	testutil.WriteFile(t, filepath.Join(dir, "example.yaml"), deployment+"\n---\n"+roots)
	s, err := NewDir(dir, DirOptions{Logger: quietLogger()}).Snapshot()
	if err != nil {
		t.Fatalf("Snapshot() error = %v", err)
	}
	if id := (snapshot.ID{Version: "v1", Kind: "ConfigMap", Namespace: "example", Name: "example-roots"}); has(s, id) {
		t.Errorf("snapshot has %s, a ConfigMap read only by a detector", id)
	}
	if id := (snapshot.ID{Group: discoveryv1alpha1.Group, Version: discoveryv1alpha1.Version, Kind: "Mesh", Name: "example"}); !has(s, id) {
		t.Errorf("snapshot lacks %s", id)
	}
}
