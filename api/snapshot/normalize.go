package snapshot

import "maps"

// noiseMetadata are metadata fields the API server maintains that carry no
// meaning for translation.
var noiseMetadata = []string{
	"managedFields", "resourceVersion", "uid", "generation",
	"creationTimestamp", "selfLink", "deletionGracePeriodSeconds",
}

// noiseAnnotations are annotations that tools write and that change without
// changing meaning.
var noiseAnnotations = []string{
	"kubectl.kubernetes.io/last-applied-configuration",
	"deployment.kubernetes.io/revision",
	"kubectl.kubernetes.io/restartedAt",
}

// meaningfulStatus lists the kinds, as "group/Kind", whose status carries
// meaning for translation: a Service's load-balancer addresses are how
// gateways are reached from other clusters.
var meaningfulStatus = map[string]bool{
	"/Service": true,
}

// Normalize returns a copy of a Kubernetes object without the fields that
// change without changing its meaning: the metadata the API server
// maintains, annotations written by tools, and status for every kind whose
// status is churn. The input is not modified; nested values that are not
// touched are shared with it.
func Normalize(obj map[string]any) map[string]any {
	out := maps.Clone(obj)
	if meta, ok := obj["metadata"].(map[string]any); ok {
		m := maps.Clone(meta)
		for _, k := range noiseMetadata {
			delete(m, k)
		}
		if ann, ok := m["annotations"].(map[string]any); ok {
			a := maps.Clone(ann)
			for _, k := range noiseAnnotations {
				delete(a, k)
			}
			if len(a) == 0 {
				delete(m, "annotations")
			} else {
				m["annotations"] = a
			}
		}
		if labels, ok := m["labels"].(map[string]any); ok && len(labels) == 0 {
			delete(m, "labels")
		}
		out["metadata"] = m
	}
	if _, ok := out["status"]; ok {
		apiVersion, _ := obj["apiVersion"].(string)
		kind, _ := obj["kind"].(string)
		group := ""
		for i := range len(apiVersion) {
			if apiVersion[i] == '/' {
				group = apiVersion[:i]
				break
			}
		}
		if !meaningfulStatus[group+"/"+kind] {
			delete(out, "status")
		}
	}
	return out
}
