package gatewayapi_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshrelay/meshrelay/internal/testenv"
	"github.com/meshrelay/meshrelay/plugins/gatewayapi"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// resources maps each kind the translator emits to its resource.
var resources = map[string]schema.GroupVersionResource{
	"gateway.networking.k8s.io/v1/HTTPRoute":         {Group: gatewayapi.GatewayGroup, Version: "v1", Resource: "httproutes"},
	"gateway.networking.k8s.io/v1/GRPCRoute":         {Group: gatewayapi.GatewayGroup, Version: "v1", Resource: "grpcroutes"},
	"policy.linkerd.io/v1beta3/Server":               {Group: gatewayapi.LinkerdPolicyGroup, Version: "v1beta3", Resource: "servers"},
	"policy.linkerd.io/v1beta3/HTTPRoute":            {Group: gatewayapi.LinkerdPolicyGroup, Version: "v1beta3", Resource: "httproutes"},
	"policy.linkerd.io/v1alpha1/AuthorizationPolicy": {Group: gatewayapi.LinkerdPolicyGroup, Version: "v1alpha1", Resource: "authorizationpolicies"},
	"policy.linkerd.io/v1alpha1/MeshTLSAuthentication": {
		Group: gatewayapi.LinkerdPolicyGroup, Version: "v1alpha1", Resource: "meshtlsauthentications",
	},
}

var namespaceGVR = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}

// kube starts a kube-apiserver serving the Gateway API's standard-channel
// route CRDs and Linkerd's policy CRDs, with their schemas and CEL rules.
func kube(t *testing.T) dynamic.Interface {
	t.Helper()
	k := testenv.StartKube(t, testenv.KubeCRDs(testenv.GatewayAPICRDs, testenv.LinkerdCRDs))
	return k.Dynamic(t)
}

// apply server-side applies obj with strict field validation, so that a
// field the schema does not know fails instead of being pruned.
func apply(ctx context.Context, dyn dynamic.Interface, obj map[string]any) error {
	u := &unstructured.Unstructured{Object: obj}
	gvr, ok := resources[u.GetAPIVersion()+"/"+u.GetKind()]
	if !ok {
		return &unknownKind{u.GetAPIVersion() + "/" + u.GetKind()}
	}
	ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": u.GetNamespace()}}}
	if _, err := dyn.Resource(namespaceGVR).Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	data, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	force := true
	_, err = dyn.Resource(gvr).Namespace(u.GetNamespace()).Patch(ctx, u.GetName(), types.ApplyPatchType, data,
		metav1.PatchOptions{FieldManager: "meshrelay-agent", Force: &force, FieldValidation: "Strict"})
	return err
}

type unknownKind struct{ kind string }

func (e *unknownKind) Error() string { return "no resource known for " + e.kind }

// readGolden returns every object of a golden file.
func readGolden(t *testing.T, name string) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name+".golden.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		Outputs []struct {
			Objects []map[string]any `json:"objects"`
		} `json:"outputs"`
	}
	if err := yaml.Unmarshal(data, &g); err != nil {
		t.Fatalf("read golden %s: %v", name, err)
	}
	var out []map[string]any
	for _, o := range g.Outputs {
		out = append(out, o.Objects...)
	}
	return out
}

// TestGoldenAcceptedByKube applies every golden output to a real
// kube-apiserver with the Gateway API and Linkerd CRDs installed: each
// must pass their schemas and CEL validation rules.
func TestGoldenAcceptedByKube(t *testing.T) {
	dyn := kube(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	applied := 0
	for _, name := range goldenCases(t) {
		for _, obj := range readGolden(t, name) {
			u := &unstructured.Unstructured{Object: obj}
			if err := apply(ctx, dyn, obj); err != nil {
				t.Errorf("%s: apply %s %s/%s: %v", name, u.GetKind(), u.GetNamespace(), u.GetName(), err)
			}
			applied++
		}
	}
	if applied == 0 {
		t.Fatal("no golden outputs applied")
	}
}

// TestKubeRefusesBrokenRoute shows that the check can fail: the CEL rules
// of the standard channel refuse a Service backendRef without a port, and
// the schema a field it does not know.
func TestKubeRefusesBrokenRoute(t *testing.T) {
	dyn := kube(t)
	route := func(backend map[string]any) map[string]any {
		return map[string]any{
			"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
			"metadata": map[string]any{"name": "bad", "namespace": "bookinfo"},
			"spec": map[string]any{
				"parentRefs": []any{map[string]any{"group": "", "kind": "Service", "name": "reviews"}},
				"rules":      []any{map[string]any{"backendRefs": []any{backend}}},
			},
		}
	}
	tests := map[string]struct {
		obj  map[string]any
		want string
	}{
		"no port":       {route(map[string]any{"group": "", "kind": "Service", "name": "reviews"}), "port"},
		"unknown field": {route(map[string]any{"group": "", "kind": "Service", "name": "reviews", "port": 9080, "subset": "v2"}), "subset"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := apply(t.Context(), dyn, tc.obj)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("apply an HTTPRoute with %s: error %v, want one naming %q", name, err, tc.want)
			}
		})
	}
}
