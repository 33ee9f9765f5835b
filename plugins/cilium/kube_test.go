package cilium

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/meshrelay/meshrelay/internal/testenv"
	"github.com/meshrelay/meshrelay/sdk/sdktest"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
)

var (
	cnpGVR       = schema.GroupVersionResource{Group: "cilium.io", Version: "v2", Resource: "ciliumnetworkpolicies"}
	ccnpGVR      = schema.GroupVersionResource{Group: "cilium.io", Version: "v2", Resource: "ciliumclusterwidenetworkpolicies"}
	cecGVR       = schema.GroupVersionResource{Group: "cilium.io", Version: "v2", Resource: "ciliumenvoyconfigs"}
	serviceGVR   = schema.GroupVersionResource{Version: "v1", Resource: "services"}
	namespaceGVR = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
)

// fieldManager is the server-side apply field manager the tests use, as
// the agent uses its own.
const fieldManager = "meshrelay-agent"

// apply server-side applies obj with strict field validation, so that a
// field the CRD schema does not know fails instead of being pruned.
func apply(ctx context.Context, dyn dynamic.Interface, gvr schema.GroupVersionResource, obj map[string]any) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{Object: obj}
	data, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	force := true
	opts := metav1.PatchOptions{FieldManager: fieldManager, Force: &force, FieldValidation: "Strict"}
	if u.GetNamespace() == "" {
		return dyn.Resource(gvr).Patch(ctx, u.GetName(), types.ApplyPatchType, data, opts)
	}
	return dyn.Resource(gvr).Namespace(u.GetNamespace()).Patch(ctx, u.GetName(), types.ApplyPatchType, data, opts)
}

// TestGoldenAcceptedByKube applies every golden output to a real
// kube-apiserver that serves Cilium's CRDs, with their OpenAPI schemas:
// the API server must accept every CiliumNetworkPolicy,
// CiliumClusterwideNetworkPolicy and CiliumEnvoyConfig, and every Service patch must change only
// the Service's annotations and labels, owned by the applying manager.
func TestGoldenAcceptedByKube(t *testing.T) {
	k := testenv.SharedKube(t)
	dyn := k.Dynamic(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	applied := 0
	for _, name := range goldenCases(t) {
		t.Run(name, func(t *testing.T) {
			fx, err := sdktest.LoadFixture(fixturePath(name))
			if err != nil {
				t.Fatal(err)
			}
			inputs := map[string][]map[string]any{}
			for _, c := range fx.Clusters {
				for _, raw := range c.Objects {
					var obj map[string]any
					if err := json.Unmarshal(raw, &obj); err != nil {
						t.Fatal(err)
					}
					inputs[c.Name] = append(inputs[c.Name], obj)
				}
			}
			for _, o := range readGolden(t, name) {
				u := &unstructured.Unstructured{Object: o.Object}
				switch u.GetKind() {
				case KindNetworkPolicy:
					ensureNamespace(ctx, t, dyn, u.GetNamespace())
					if _, err := apply(ctx, dyn, cnpGVR, o.Object); err != nil {
						t.Errorf("apply %s %s/%s of %s: %v", u.GetKind(), u.GetNamespace(), u.GetName(), o.Cluster, err)
					}
				case KindEnvoyConfig:
					ensureNamespace(ctx, t, dyn, u.GetNamespace())
					if _, err := apply(ctx, dyn, cecGVR, o.Object); err != nil {
						t.Errorf("apply %s %s/%s of %s: %v", u.GetKind(), u.GetNamespace(), u.GetName(), o.Cluster, err)
					}
				case KindClusterwidePolicy:
					if _, err := apply(ctx, dyn, ccnpGVR, o.Object); err != nil {
						t.Errorf("apply %s %s of %s: %v", u.GetKind(), u.GetName(), o.Cluster, err)
					}
				case serviceKind:
					checkServicePatch(ctx, t, dyn, inputs[o.Cluster], u)
				default:
					t.Fatalf("unexpected output kind %s", u.GetKind())
				}
				applied++
			}
		})
	}
	if applied == 0 {
		t.Fatal("no golden outputs applied")
	}
}

// TestKubeRefusesBrokenPolicy shows that the API server check can fail:
// a value the CRD schema refuses, and a field it does not know.
func TestKubeRefusesBrokenPolicy(t *testing.T) {
	k := testenv.SharedKube(t)
	dyn := k.Dynamic(t)
	ns := k.CreateNamespace(t)
	tests := map[string]map[string]any{
		"protocol HTTP": {
			"endpointSelector": map[string]any{},
			"ingress": []any{map[string]any{"toPorts": []any{map[string]any{
				"ports": []any{map[string]any{"port": "80", "protocol": "HTTP"}},
			}}}},
		},
		"unknown field": {
			"endpointSelector": map[string]any{},
			"ingress":          []any{map[string]any{"fromIdentities": []any{"productpage"}}},
		},
	}
	for name, spec := range tests {
		t.Run(name, func(t *testing.T) {
			bad := map[string]any{
				"apiVersion": APIVersion, "kind": KindNetworkPolicy,
				"metadata": map[string]any{"name": "bad", "namespace": ns},
				"spec":     spec,
			}
			// Server-side apply refuses a field missing from the schema
			// while building the typed patch, before validation.
			if _, err := apply(t.Context(), dyn, cnpGVR, bad); err == nil {
				t.Errorf("apply a CiliumNetworkPolicy with %s: no error, want one", name)
			}
		})
	}
}

func ensureNamespace(ctx context.Context, t *testing.T, dyn dynamic.Interface, name string) {
	t.Helper()
	ns := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": name},
	}}
	if _, err := dyn.Resource(namespaceGVR).Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create namespace %s: %v", name, err)
	}
}

// checkServicePatch creates the Service the patch is for, as discovery saw
// it in the cluster, applies the patch and checks that the Service's spec
// is untouched and that the applying manager owns only metadata.
func checkServicePatch(ctx context.Context, t *testing.T, dyn dynamic.Interface, inputs []map[string]any, patch *unstructured.Unstructured) {
	t.Helper()
	var svc *unstructured.Unstructured
	for _, in := range inputs {
		u := &unstructured.Unstructured{Object: in}
		if u.GetKind() == serviceKind && u.GetNamespace() == patch.GetNamespace() && u.GetName() == patch.GetName() {
			svc = u.DeepCopy()
		}
	}
	if svc == nil {
		t.Fatalf("Service patch %s/%s for a Service the cluster does not have", patch.GetNamespace(), patch.GetName())
	}
	ensureNamespace(ctx, t, dyn, svc.GetNamespace())
	res := dyn.Resource(serviceGVR).Namespace(svc.GetNamespace())
	_ = res.Delete(ctx, svc.GetName(), metav1.DeleteOptions{}) // fixtures share Service names across clusters
	created, err := res.Create(ctx, svc, metav1.CreateOptions{FieldManager: "kubectl"})
	if err != nil {
		t.Fatalf("create Service %s/%s: %v", svc.GetNamespace(), svc.GetName(), err)
	}
	got, err := apply(ctx, dyn, serviceGVR, patch.Object)
	if err != nil {
		t.Fatalf("apply Service patch %s/%s: %v", patch.GetNamespace(), patch.GetName(), err)
	}
	wantSpec, _, _ := unstructured.NestedMap(created.Object, "spec")
	gotSpec, _, _ := unstructured.NestedMap(got.Object, "spec")
	if a, b := mustJSON(t, wantSpec), mustJSON(t, gotSpec); a != b {
		t.Errorf("Service patch changed the spec of %s/%s:\nbefore %s\nafter  %s", svc.GetNamespace(), svc.GetName(), a, b)
	}
	for k, v := range patch.GetAnnotations() {
		if got.GetAnnotations()[k] != v {
			t.Errorf("Service %s/%s: annotation %s = %q, want %q", svc.GetNamespace(), svc.GetName(), k, got.GetAnnotations()[k], v)
		}
	}
	for _, mf := range got.GetManagedFields() {
		if mf.Manager != fieldManager {
			continue
		}
		var fields map[string]any
		if err := json.Unmarshal(mf.FieldsV1.Raw, &fields); err != nil {
			t.Fatal(err)
		}
		for k := range fields {
			if k != "f:metadata" {
				t.Errorf("Service %s/%s: manager %s owns %s, want only metadata", svc.GetNamespace(), svc.GetName(), fieldManager, k)
			}
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
