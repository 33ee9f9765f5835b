package meta

import "strings"

// Ownership labels and annotations. The SDK stamps them on every object a
// plugin emits; the agent applies and prunes only objects that carry
// ManagedByLabel=ManagedByValue, and the server folds a policy's status from
// the outputs whose PoliciesAnnotation names it.
const (
	// ManagedByLabel marks an object meshrelay owns, with ManagedByValue.
	ManagedByLabel = "app.kubernetes.io/managed-by"
	// ManagedByValue is the value of ManagedByLabel on objects meshrelay owns.
	ManagedByValue = "meshrelay"
	// PluginLabel names the plugin that emitted an object.
	PluginLabel = "meshrelay.io/plugin"
	// PolicyLabel names an object's first parent policy as "kind.name", cut
	// to 63 characters.
	PolicyLabel = "meshrelay.io/policy"
	// PoliciesAnnotation lists every parent policy of an object as
	// "Kind/namespace/name" ([PolicyRef.Key]), comma separated.
	PoliciesAnnotation = "meshrelay.io/policies"
	// SourceClusterAnnotation is set on a policy defined in a workload
	// cluster rather than in the management source; its value is the
	// cluster's name.
	SourceClusterAnnotation = "meshrelay.io/source-cluster"
)

// JoinPolicies returns the value of PoliciesAnnotation for keys
// ([PolicyRef.Key]) already sorted and without duplicates.
func JoinPolicies(keys []string) string { return strings.Join(keys, ",") }

// SplitPolicies returns the policy keys a PoliciesAnnotation value lists;
// none for an empty value.
func SplitPolicies(v string) []string {
	if v == "" {
		return nil
	}
	return strings.Split(v, ",")
}
