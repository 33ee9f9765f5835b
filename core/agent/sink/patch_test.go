package sink

import (
	"context"
	"errors"
	"testing"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/internal/testenv"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var svcGVR = schema.GroupVersionResource{Version: "v1", Resource: "services"}

// globalPatch is a Cilium global-service patch of a user's Service, as the
// Cilium translator emits it.
func globalPatch(t *testing.T, ns, name string) snapshot.Resource {
	return res(t, `apiVersion: v1
kind: Service
metadata:
  name: `+name+`
  namespace: `+ns+`
  labels: {app.kubernetes.io/managed-by: meshrelay, meshrelay.io/plugin: cilium}
  annotations: {meshrelay.io/patch: "true", service.cilium.io/global: "true", service.cilium.io/affinity: local}
`)
}

// A patch of a user's Service adds only its annotations, never makes the
// Service look owned, is never deleted by pruning, and is released — its
// fields removed, the Service kept — when no longer desired.
func TestKubePatchesUserObjects(t *testing.T) {
	k := testenv.SharedKube(t)
	ns := k.CreateNamespace(t)
	dyn := k.Dynamic(t)
	ctx := context.Background()
	user := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Service",
		"metadata": map[string]any{"name": "reviews", "namespace": ns, "labels": map[string]any{"app": "reviews"}},
		"spec":     map[string]any{"selector": map[string]any{"app": "reviews"}, "ports": []any{map[string]any{"port": int64(9080)}}},
	}}
	if _, err := dyn.Resource(svcGVR).Namespace(ns).Create(ctx, user, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s := newSink(t, k, KubeOptions{})

	if errs := apply(t, s, "cilium", snap(t, globalPatch(t, ns, "reviews")), true); len(errs) > 0 {
		t.Fatalf("Apply(patch) errors = %v", errs)
	}
	live := get(t, dyn, svcGVR, ns, "reviews")
	if live.GetAnnotations()["service.cilium.io/global"] != "true" {
		t.Fatalf("patch not applied: annotations %v", live.GetAnnotations())
	}
	if live.GetLabels()[ManagedByLabel] == ManagedByValue {
		t.Fatal("a patch made the user's Service look owned by meshrelay")
	}
	if ports, _, _ := unstructured.NestedSlice(live.Object, "spec", "ports"); len(ports) != 1 || live.GetLabels()["app"] != "reviews" {
		t.Fatalf("the patch touched the user's fields: %v", live.Object)
	}

	// No longer desired: released, not deleted.
	if errs := apply(t, s, "cilium", snap(t), true); len(errs) > 0 {
		t.Fatalf("Apply(empty) errors = %v", errs)
	}
	live = get(t, dyn, svcGVR, ns, "reviews")
	if live == nil {
		t.Fatal("pruning deleted the user's Service")
	}
	if _, ok := live.GetAnnotations()["service.cilium.io/global"]; ok {
		t.Errorf("the released patch left its annotation: %v", live.GetAnnotations())
	}
	if _, ok := live.GetLabels()[PatchedByLabel]; ok {
		t.Errorf("the released patch left its label: %v", live.GetLabels())
	}

	// A patch never creates the object it patches.
	errs := apply(t, s, "cilium", snap(t, globalPatch(t, ns, "absent")), true)
	if len(errs) != 1 {
		t.Fatalf("patch of a missing Service: errors = %v, want one", errs)
	}
	if get(t, dyn, svcGVR, ns, "absent") != nil {
		t.Error("a patch created the Service it patches")
	}
	for _, err := range errs {
		if errors.Is(err, ErrNotOwned) {
			t.Errorf("missing target reported as not owned: %v", err)
		}
	}
}
