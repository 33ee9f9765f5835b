package istio_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/meshrelay/meshrelay/internal/testenv"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// resources maps the kinds the translator emits to their API resources.
var resources = map[string]schema.GroupVersionResource{
	"VirtualService":      {Group: "networking.istio.io", Version: "v1", Resource: "virtualservices"},
	"DestinationRule":     {Group: "networking.istio.io", Version: "v1", Resource: "destinationrules"},
	"ServiceEntry":        {Group: "networking.istio.io", Version: "v1", Resource: "serviceentries"},
	"Gateway":             {Group: "networking.istio.io", Version: "v1", Resource: "gateways"},
	"AuthorizationPolicy": {Group: "security.istio.io", Version: "v1", Resource: "authorizationpolicies"},
	"PeerAuthentication":  {Group: "security.istio.io", Version: "v1", Resource: "peerauthentications"},
}

// apply server-side applies obj into namespace and returns the API server's error.
func apply(ctx context.Context, client dynamic.Interface, namespace string, obj map[string]any) error {
	u := &unstructured.Unstructured{Object: obj}
	gvr, ok := resources[u.GetKind()]
	if !ok {
		return &unknownKindError{u.GetKind()}
	}
	u.SetNamespace(namespace)
	_, err := client.Resource(gvr).Namespace(namespace).Apply(ctx, u.GetName(), u, metav1.ApplyOptions{FieldManager: "meshrelay-istio-test", Force: true})
	return err
}

type unknownKindError struct{ kind string }

func (e *unknownKindError) Error() string { return "no API resource known for kind " + e.kind }

// TestGoldenOutputsApply applies every object of every golden file to a real
// kube-apiserver with Istio's CRDs, whose schemas and CEL rules must accept
// it. Each cluster's namespaces map to fresh namespaces of their own.
func TestGoldenOutputsApply(t *testing.T) {
	goldens, err := filepath.Glob(filepath.Join("testdata", "*.golden.yaml"))
	if err != nil || len(goldens) == 0 {
		t.Fatalf("no golden files: %v", err)
	}
	k := testenv.SharedKube(t)
	client := k.Dynamic(t)
	for _, path := range goldens {
		t.Run(caseName(path), func(t *testing.T) {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var golden struct {
				Outputs []struct {
					Cluster string           `json:"cluster"`
					Objects []map[string]any `json:"objects"`
				} `json:"outputs"`
			}
			if err := yaml.Unmarshal(data, &golden); err != nil {
				t.Fatalf("parse %s: %v", path, err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			applied := 0
			for _, out := range golden.Outputs {
				namespaces := map[string]string{}
				for _, obj := range out.Objects {
					u := unstructured.Unstructured{Object: obj}
					ns, ok := namespaces[u.GetNamespace()]
					if !ok {
						ns = k.CreateNamespace(t)
						namespaces[u.GetNamespace()] = ns
					}
					if err := apply(ctx, client, ns, obj); err != nil {
						t.Errorf("cluster %s: apply %s %s/%s: %v", out.Cluster, u.GetKind(), u.GetNamespace(), u.GetName(), err)
						continue
					}
					applied++
				}
			}
			t.Logf("%s: the API server accepted %d objects", path, applied)
		})
	}
}

// TestAPIServerRejectsInvalid shows that the API server validates what
// TestGoldenOutputsApply applies: Istio's CEL rules refuse a ServiceEntry
// with both endpoints and a workload selector.
func TestAPIServerRejectsInvalid(t *testing.T) {
	k := testenv.SharedKube(t)
	ns := k.CreateNamespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bad := map[string]any{
		"apiVersion": "networking.istio.io/v1",
		"kind":       "ServiceEntry",
		"metadata":   map[string]any{"name": "both"},
		"spec": map[string]any{
			"hosts":            []any{"a.example"},
			"ports":            []any{map[string]any{"name": "http", "number": int64(80), "protocol": "HTTP"}},
			"endpoints":        []any{map[string]any{"address": "10.0.0.1"}},
			"workloadSelector": map[string]any{"labels": map[string]any{"app": "a"}},
		},
	}
	if err := apply(ctx, k.Dynamic(t), ns, bad); err == nil {
		t.Fatal("apply ServiceEntry with endpoints and workloadSelector: accepted, want rejected")
	}
}
