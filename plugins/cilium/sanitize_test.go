// The tests in this file run Cilium's own code (pkg/policy/api, types and
// utils) on the translator's output: every emitted rule must pass Cilium's
// sanitizer, and label matching must agree with Cilium's.

package cilium

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/cilium/cilium/pkg/labels"
	ciliumapi "github.com/cilium/cilium/pkg/policy/api"
	policytypes "github.com/cilium/cilium/pkg/policy/types"
	policyutils "github.com/cilium/cilium/pkg/policy/utils"
)

// ciliumRules decodes the rules of an emitted CiliumNetworkPolicy or
// CiliumClusterwideNetworkPolicy into Cilium's own api.Rule, refusing
// fields Cilium does not know.
func ciliumRules(t *testing.T, obj map[string]any) []*ciliumapi.Rule {
	t.Helper()
	var raws []any
	if spec, ok := obj["spec"]; ok {
		raws = append(raws, spec)
	}
	if specs, ok := obj["specs"].([]any); ok {
		raws = append(raws, specs...)
	}
	if len(raws) == 0 {
		t.Fatalf("%s %v has neither spec nor specs", obj["kind"], obj["metadata"])
	}
	var out []*ciliumapi.Rule
	for _, raw := range raws {
		data, err := json.Marshal(raw)
		if err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		r := &ciliumapi.Rule{}
		if err := dec.Decode(r); err != nil {
			t.Fatalf("decode rule of %v into Cilium's api.Rule: %v\n%s", obj["metadata"], err, data)
		}
		out = append(out, r)
	}
	return out
}

// TestGoldenSanitize passes every rule of every golden output through
// Cilium's own sanitizer, as the Cilium agent and operator do before
// accepting a policy. Sanitize mutates its rule (it fills defaults such as
// enableDefaultDeny), so it runs on a deep copy.
func TestGoldenSanitize(t *testing.T) {
	n := 0
	for _, name := range goldenCases(t) {
		for _, o := range readGolden(t, name) {
			if !isCiliumPolicy(o.Object) {
				continue
			}
			for _, r := range ciliumRules(t, o.Object) {
				before := r.DeepCopy()
				if err := r.DeepCopy().Sanitize(); err != nil {
					t.Errorf("%s: %s %v in %s: Sanitize() = %v", name, o.Object["kind"], o.Object["metadata"], o.Cluster, err)
				}
				if !r.DeepEqual(before) {
					t.Errorf("%s: sanitizing a copy changed the rule", name)
				}
				n++
			}
		}
	}
	if n == 0 {
		t.Fatal("no Cilium rules in the golden files")
	}
}

// TestSanitizeRefusesBrokenRules shows that the sanitizer check can fail:
// rules the translator must never write are refused.
func TestSanitizeRefusesBrokenRules(t *testing.T) {
	tests := map[string]rule{
		"no ingress": {EndpointSelector: selector{}},
		"HTTP on UDP": {EndpointSelector: selector{}, Ingress: []ingressRule{{ToPorts: []portRule{{
			Ports: []portProtocol{{Port: "53", Protocol: "UDP"}}, Rules: &l7Rules{HTTP: []httpRule{{Method: "GET"}}},
		}}}}},
		"bad port": {EndpointSelector: selector{}, Ingress: []ingressRule{{ToPorts: []portRule{{
			Ports: []portProtocol{{Port: "-1", Protocol: "TCP"}},
		}}}}},
	}
	for name, r := range tests {
		t.Run(name, func(t *testing.T) {
			data, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			var obj map[string]any
			if err := json.Unmarshal(data, &obj); err != nil {
				t.Fatal(err)
			}
			rules := ciliumRules(t, map[string]any{"kind": KindNetworkPolicy, "spec": obj})
			if err := rules[0].Sanitize(); err == nil {
				t.Errorf("Sanitize(%s) = nil, want an error", data)
			}
		})
	}
}

// TestSelectorsMatchLikeCilium checks the edge extractor's label matching
// against Cilium's own: every fromEndpoints selector of the golden
// outputs, with the requirements Cilium adds when it parses the policy,
// must select the same client identities under both.
func TestSelectorsMatchLikeCilium(t *testing.T) {
	n := 0
	for _, name := range goldenCases(t) {
		f := loadFleet(t, fixturePath(name))
		for _, o := range readGolden(t, name) {
			if !isCiliumPolicy(o.Object) {
				continue
			}
			data, err := json.Marshal(o.Object)
			if err != nil {
				t.Fatal(err)
			}
			var p networkPolicy
			if err := json.Unmarshal(data, &p); err != nil {
				t.Fatal(err)
			}
			for _, r := range p.rules() {
				for _, in := range r.Ingress {
					for _, sel := range in.FromEndpoints {
						sel = withCiliumDefaults(sel, p.Namespace, o.Cluster)
						theirs := ciliumSelector(t, sel)
						for _, c := range f.clients {
							lbls := labels.ParseLabelArray(
								LabelNamespace+"="+c.Namespace, LabelServiceAccount+"="+c.Name, LabelCluster+"="+c.Cluster)
							if ours, cil := selectorMatches(sel, c.identityLabels()), theirs.Matches(lbls); ours != cil {
								t.Errorf("%s: selector %s on %s: extractor says %v, Cilium %v", name, selectorKey(sel), c, ours, cil)
							}
							n++
						}
					}
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no selectors checked")
	}
}

// ciliumSelector converts a selector to Cilium's, sanitized as the agent
// does (keys without a source get the any: source).
func ciliumSelector(t *testing.T, sel selector) *policytypes.LabelSelector {
	t.Helper()
	data, err := json.Marshal(sel)
	if err != nil {
		t.Fatal(err)
	}
	var es ciliumapi.EndpointSelector
	if err := json.Unmarshal(data, &es); err != nil {
		t.Fatal(err)
	}
	if err := es.Sanitize(); err != nil {
		t.Fatalf("sanitize selector %s: %v", data, err)
	}
	return policytypes.NewLabelSelector(es)
}

// TestDenyRuleIsDefaultDenyForCilium runs a DenyAll rule through Cilium's
// conversion into policy entries: it must turn on ingress default-deny and
// select no peer and no port, so that it admits nothing; and an Allow
// rule for the same endpoints must still admit its peers.
func TestDenyRuleIsDefaultDenyForCilium(t *testing.T) {
	obj := goldenPolicy(t, "access-deny", "east", "access-shop-shop-backends-deny-53a6cb39")
	rules := ciliumRules(t, obj)
	for _, r := range rules {
		if err := r.Sanitize(); err != nil {
			t.Fatal(err)
		}
	}
	entries := policyutils.RulesToPolicyEntries(ciliumapi.Rules(rules))
	if len(entries) != 1 {
		t.Fatalf("RulesToPolicyEntries = %d entries, want 1", len(entries))
	}
	e := entries[0]
	if !e.Ingress || !e.DefaultDeny || e.IsDeny() || len(e.L3) != 0 || e.L4.Len() != 0 {
		t.Errorf("deny rule entry: ingress %v, default-deny %v, deny verdict %v, %d peers, %d ports; want ingress, default-deny, allow verdict, no peers, no ports",
			e.Ingress, e.DefaultDeny, e.IsDeny(), len(e.L3), e.L4.Len())
	}
}
