package istio_test

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshrelay/meshrelay/plugins/istio"
	"github.com/meshrelay/meshrelay/sdk"
	"github.com/meshrelay/meshrelay/sdk/sdktest"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// goldenCases are the fixtures under testdata, each with a golden file.
var goldenCases = []string{
	"access",
	"bookinfo",
	"diagnostics",
	"gateway",
	"ports",
	"traffic",
	"virtualdestination",
}

func TestGolden(t *testing.T) {
	for _, name := range goldenCases {
		t.Run(name, func(t *testing.T) {
			got := sdktest.Run(t, istio.New(), filepath.Join("testdata", name+".yaml"))
			sdktest.Golden(t, name, got)
		})
	}
}

// caseName is the golden name of a fixture path.
func caseName(path string) string {
	return strings.TrimSuffix(strings.TrimSuffix(filepath.Base(path), ".yaml"), ".golden")
}

// TestOutputsOwnedAndNamed checks every object of every fixture: a DNS-1123
// label of at most 63 characters as name, a namespace, and the ownership
// labels and policy annotation that trace it to its policies.
func TestOutputsOwnedAndNamed(t *testing.T) {
	for _, name := range goldenCases {
		t.Run(name, func(t *testing.T) {
			got := sdktest.Run(t, istio.New(), filepath.Join("testdata", name+".yaml"))
			if len(got.Outputs) == 0 {
				t.Fatal("no outputs")
			}
			for _, o := range got.Outputs {
				id := o.Cluster + " " + o.Kind + " " + o.Namespace + "/" + o.Name
				if errs := validation.IsDNS1123Label(o.Name); len(errs) > 0 {
					t.Errorf("%s: name is not a DNS-1123 label: %v", id, errs)
				}
				if o.Namespace == "" || o.Backend != istio.Backend {
					t.Errorf("%s: namespace %q backend %q, want a namespace and backend istio", id, o.Namespace, o.Backend)
				}
				var obj metav1.PartialObjectMetadata
				if err := json.Unmarshal(o.Body, &obj); err != nil {
					t.Fatalf("%s: %v", id, err)
				}
				if obj.Labels[sdk.ManagedByLabel] != sdk.ManagedByValue || obj.Labels[sdk.PluginLabel] != istio.Name ||
					obj.Labels[sdk.PolicyLabel] == "" || obj.Annotations[sdk.PoliciesAnnotation] == "" {
					t.Errorf("%s: labels %v annotations %v, want the ownership labels and policies annotation", id, obj.Labels, obj.Annotations)
				}
			}
		})
	}
}
