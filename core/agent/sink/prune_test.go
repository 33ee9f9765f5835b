package sink

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/internal/testenv"
)

var npGVR = schema.GroupVersionResource{Group: "networking.k8s.io", Version: "v1", Resource: "networkpolicies"}

func networkPolicy(t *testing.T, ns, name string) snapshot.Resource {
	return res(t, `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: `+name+`
  namespace: `+ns+`
  labels: {app.kubernetes.io/managed-by: meshrelay, meshrelay.io/plugin: netpol}
spec:
  podSelector: {matchLabels: {app: `+name+`}}
  policyTypes: [Ingress]
`)
}

// A sink started after another (an agent restart) prunes the objects the
// first one left only in the kinds declared to it: the kinds it applied
// itself are not enough once nothing of a kind is desired any more.
func TestKubePrunesDeclaredKindsAfterRestart(t *testing.T) {
	k := testenv.SharedKube(t)
	dyn := k.Dynamic(t)
	ns := k.CreateNamespace(t)
	ctx := context.Background()

	before := newSink(t, k, KubeOptions{})
	if errs := apply(t, before, "mixed", snap(t, virtualService(t, ns, "reviews", "reviews", 80), networkPolicy(t, ns, "api")), true); len(errs) != 0 {
		t.Fatalf("Apply() errors = %v", errs)
	}
	unowned := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
		"metadata": map[string]any{"name": "theirs", "namespace": ns},
		"spec":     map[string]any{"podSelector": map[string]any{}},
	}}
	if _, err := dyn.Resource(npGVR).Namespace(ns).Create(ctx, unowned, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	after := newSink(t, k, KubeOptions{})
	if errs := apply(t, after, "mixed", snap(t), true); len(errs) != 0 {
		t.Fatalf("Apply(nothing) errors = %v", errs)
	}
	if get(t, dyn, vsGVR, ns, "reviews") == nil || get(t, dyn, npGVR, ns, "api") == nil {
		t.Fatal("a restarted sink without declared kinds pruned kinds it never applied")
	}

	declared, err := snapshot.ParseGroupKinds([]string{"networking.istio.io/VirtualService", "networking.k8s.io/NetworkPolicy", "example.meshrelay.io/NotServed"})
	if err != nil {
		t.Fatal(err)
	}
	if err := after.DeclareKinds("mixed", declared); err != nil {
		t.Fatalf("DeclareKinds() = %v", err)
	}
	if errs := apply(t, after, "mixed", snap(t), true); len(errs) != 0 {
		t.Fatalf("Apply(nothing) with declared kinds: errors = %v", errs)
	}
	if get(t, dyn, vsGVR, ns, "reviews") != nil || get(t, dyn, npGVR, ns, "api") != nil {
		t.Error("objects of declared kinds left before the restart were not pruned")
	}
	if get(t, dyn, npGVR, ns, "theirs") == nil {
		t.Error("an unowned NetworkPolicy was pruned")
	}
	if err := after.DeclareKinds("not a label value", declared); err == nil {
		t.Error("DeclareKinds with an invalid backend name succeeded")
	}
}
