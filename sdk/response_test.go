package sdk

import (
	"encoding/json"
	"testing"

	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Every object is stamped for its own parents, whatever the objects
// emitted before it in the same response had.
func TestEmitStampsEachObjectForItsParents(t *testing.T) {
	access := func(name string) *policyv1alpha1.AccessPolicy {
		return &policyv1alpha1.AccessPolicy{TypeMeta: metav1.TypeMeta{Kind: "AccessPolicy"}, ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
	}
	a, b := access("a"), access("b")
	cases := []struct {
		parents             []policyv1alpha1.Policy
		policyLabel, policy string
	}{
		{[]policyv1alpha1.Policy{a}, "accesspolicy.a", "AccessPolicy/ns/a"},
		{[]policyv1alpha1.Policy{b}, "accesspolicy.b", "AccessPolicy/ns/b"},
		{nil, "", ""},
		{[]policyv1alpha1.Policy{b, a}, "accesspolicy.b", "AccessPolicy/ns/a,AccessPolicy/ns/b"},
		{[]policyv1alpha1.Policy{access("a")}, "accesspolicy.a", "AccessPolicy/ns/a"},
		{nil, "", ""},
	}
	resp := NewResponse(Description{Name: "stamps", Backends: []string{"b"}, OutputKinds: []string{"/ConfigMap"}}, "east")
	for i, c := range cases {
		cm := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{Name: string(rune('a' + i)), Labels: map[string]string{"app": "x"}}}
		resp.Emit(cm, c.parents...)
	}
	if err := resp.Err(); err != nil {
		t.Fatal(err)
	}
	outs := resp.Outputs()
	if len(outs) != len(cases) {
		t.Fatalf("%d outputs, want %d", len(outs), len(cases))
	}
	for i, c := range cases {
		var got corev1.ConfigMap
		if err := json.Unmarshal(outs[i].Body, &got); err != nil {
			t.Fatal(err)
		}
		if got.Labels[PolicyLabel] != c.policyLabel || got.Annotations[PoliciesAnnotation] != c.policy {
			t.Errorf("object %d: policy label %q, policies %q; want %q, %q", i, got.Labels[PolicyLabel], got.Annotations[PoliciesAnnotation], c.policyLabel, c.policy)
		}
		if got.Labels[ManagedByLabel] != ManagedByValue || got.Labels[PluginLabel] != "stamps" || got.Labels["app"] != "x" {
			t.Errorf("object %d: labels %v", i, got.Labels)
		}
	}
}
