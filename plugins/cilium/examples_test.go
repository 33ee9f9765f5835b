package cilium

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"sigs.k8s.io/yaml"
)

// readExample reads a Cilium example policy from testdata/cilium-examples.
func readExample(t *testing.T, name string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "cilium-examples", name))
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := yaml.Unmarshal(data, &obj); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return obj
}

// goldenPolicy returns the emitted Cilium policy of a golden file with the
// given cluster and name.
func goldenPolicy(t *testing.T, golden, cluster, name string) map[string]any {
	t.Helper()
	for _, o := range readGolden(t, golden) {
		meta, _ := o.Object["metadata"].(map[string]any)
		if o.Cluster == cluster && meta["name"] == name {
			return o.Object
		}
	}
	t.Fatalf("golden %s has no object %s in %s", golden, name, cluster)
	return nil
}

// at follows a path of map keys and list indexes.
func at(t *testing.T, v any, path ...any) any {
	t.Helper()
	for _, p := range path {
		switch p := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("at %v: %T is not an object", path, v)
			}
			v = m[p]
		case int:
			l, ok := v.([]any)
			if !ok || p >= len(l) {
				t.Fatalf("at %v: no element %d", path, p)
			}
			v = l[p]
		}
	}
	return v
}

// shape returns the structure of a JSON value: objects keep their keys
// (label maps become "labels"), lists the merged shape of their elements,
// scalars their type.
func shape(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range v {
			if k == "matchLabels" {
				out[k] = "labels"
				continue
			}
			out[k] = shape(e)
		}
		return out
	case []any:
		merged := map[string]any{}
		var scalar any
		for _, e := range v {
			if m, ok := shape(e).(map[string]any); ok {
				for k, s := range m {
					merged[k] = s
				}
			} else {
				scalar = shape(e)
			}
		}
		if scalar != nil {
			return []any{scalar}
		}
		return []any{merged}
	case string:
		return "string"
	case nil:
		return nil
	default:
		return reflect.TypeOf(v).Kind().String()
	}
}

// TestL7RuleShapeMatchesCiliumExample compares the translator's L3/L4/L7
// ingress rule with Cilium's "Allow HTTP GET /public" example.
func TestL7RuleShapeMatchesCiliumExample(t *testing.T) {
	example := at(t, readExample(t, "l7.yaml"), "spec", "ingress", 0)
	ours := at(t, goldenPolicy(t, "access-allow", "east", "access-bookinfo-reviews-from-productpage-44a75e54"), "spec", "ingress", 0)
	if want, got := shape(example), shape(ours); !reflect.DeepEqual(want, got) {
		t.Errorf("ingress rule shape = %v, want the example's %v", got, want)
	}
	http := at(t, ours, "toPorts", 0, "rules", "http", 0)
	if at(t, http, "method") != "GET" || at(t, http, "path") != "^/reviews.*" {
		t.Errorf("HTTP rule = %v, want GET ^/reviews.*", http)
	}
}

// TestDenyRuleMatchesCiliumExample compares the DenyAll rule with Cilium's
// default-deny example: an ingress section with one empty rule.
func TestDenyRuleMatchesCiliumExample(t *testing.T) {
	example := readExample(t, "sw_deny_policy.yaml")
	ours := goldenPolicy(t, "access-deny", "east", "access-shop-shop-backends-deny-53a6cb39")
	for _, obj := range []map[string]any{example, ours} {
		if got := at(t, obj, "spec", "ingress"); !reflect.DeepEqual(got, []any{map[string]any{}}) {
			t.Errorf("%v: ingress = %v, want [{}]", at(t, obj, "metadata", "name"), got)
		}
	}
	if got := at(t, ours, "spec", "enableDefaultDeny", "ingress"); got != true {
		t.Errorf("enableDefaultDeny.ingress = %v, want true", got)
	}
}

// TestIdentityLabelsMatchCiliumExamples checks the identity label keys
// against Cilium's examples that select by namespace, cluster and service
// account.
func TestIdentityLabelsMatchCiliumExamples(t *testing.T) {
	var keys []string
	for _, e := range at(t, readExample(t, "cross-cluster-any-namespace-policy.yaml"), "spec", "egress", 0, "toEndpoints", 0, "matchExpressions").([]any) {
		keys = append(keys, at(t, e, "key").(string))
	}
	for _, k := range []string{LabelNamespace, LabelCluster} {
		if !slices.Contains(keys, k) {
			t.Errorf("label %s is not among the cross-cluster example's keys %v", k, keys)
		}
	}
	ns := at(t, readExample(t, "namespace-policy.yaml"), "spec", "ingress", 0, "fromEndpoints", 0, "matchLabels").(map[string]any)
	if _, ok := ns[LabelNamespace]; !ok {
		t.Errorf("label %s is not in the namespace example's selector %v", LabelNamespace, ns)
	}
	sa := at(t, readExample(t, "serviceaccount-policy.yaml"), "spec", "ingress", 0, "fromEndpoints", 0, "matchLabels").(map[string]any)
	if _, ok := sa[bare(LabelServiceAccount)]; !ok {
		t.Errorf("label %s is not in the service account example's selector %v", bare(LabelServiceAccount), sa)
	}
}
