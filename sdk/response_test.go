package sdk

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"strings"
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

// An object encoded with Encode and emitted, into any target of the
// translator, is the output Emit makes of it, digest included.
func TestEncodedEmitsAsEmit(t *testing.T) {
	d := Description{Name: "encoded", Backends: []string{"b"}, OutputKinds: []string{"/ConfigMap"}}
	p := &policyv1alpha1.AccessPolicy{TypeMeta: metav1.TypeMeta{Kind: "AccessPolicy"}, ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}}
	cm := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: "ns", Labels: map[string]string{"app": "x"}}, Data: map[string]string{"k": "v"}}
	plain := NewResponse(d, "east")
	plain.Emit(cm, p)
	enc, err := NewResponse(d, "west").Encode(cm, p)
	if err != nil {
		t.Fatal(err)
	}
	resp := NewResponse(d, "east")
	resp.Emit(enc)
	if err := errors.Join(plain.Err(), resp.Err()); err != nil {
		t.Fatal(err)
	}
	want, got := plain.Outputs(), resp.Outputs()
	if len(got) != 1 || len(want) != 1 {
		t.Fatalf("%d outputs, want 1", len(got))
	}
	if got[0].Cluster != "east" || got[0].Backend != "b" || got[0].ID != want[0].ID || string(got[0].Body) != string(want[0].Body) {
		t.Errorf("emitted encoded %+v, want %+v", got[0], want[0])
	}
	if got[0].sum() != sha256.Sum256(want[0].Body) || enc.ID() != want[0].ID || string(enc.Body()) != string(want[0].Body) {
		t.Error("the encoded object's digest or accessors do not match its body")
	}
}

// What Encode and an emit of an Encoded refuse, with the reason.
func TestEncodedRefusals(t *testing.T) {
	d := Description{Name: "encoded", Backends: []string{"b"}, OutputKinds: []string{"/ConfigMap"}}
	p := &policyv1alpha1.AccessPolicy{TypeMeta: metav1.TypeMeta{Kind: "AccessPolicy"}, ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}}
	cm := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{Name: "cm"}}
	secret := &corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"}, ObjectMeta: metav1.ObjectMeta{Name: "s"}}
	enc, err := NewResponse(d, "east").Encode(cm)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewResponse(d, "east").Encode(secret); err == nil || !strings.Contains(err.Error(), `kind "/Secret" is not in the translator's OutputKinds`) {
		t.Errorf("encode of an undeclared kind: %v", err)
	}
	if _, err := NewResponse(d, "east").Encode(enc); err == nil || !strings.Contains(err.Error(), "encoded already") {
		t.Errorf("encode of an Encoded: %v", err)
	}
	other := d
	other.Name = "other"
	for name, c := range map[string]struct {
		d    Description
		obj  Encoded
		with []policyv1alpha1.Policy
		want string
	}{
		"zero":              {d, Encoded{}, nil, "the zero Encoded is not an object"},
		"other translator":  {other, enc, nil, `encoded by translator "encoded", not this one`},
		"parents given too": {d, enc, []policyv1alpha1.Policy{p}, "emit it without parents"},
	} {
		resp := NewResponse(c.d, "east")
		resp.Emit(c.obj, c.with...)
		if err := resp.Err(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: emit failed with %v, want %q", name, err, c.want)
		}
		if len(resp.Outputs()) != 0 {
			t.Errorf("%s: a refused emit added an output", name)
		}
	}
}
