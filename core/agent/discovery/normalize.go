package discovery

import (
	"maps"
	"strings"

	"github.com/meshrelay/meshrelay/api/snapshot"
)

// topologyLabelPrefixes are the Node label prefixes kept in snapshots: where
// a node is, which is what locality-aware routing needs.
var topologyLabelPrefixes = []string{
	"topology.kubernetes.io/",
	"topology.istio.io/",
	"failure-domain.beta.kubernetes.io/",
}

// churnAnnotations are annotations controllers rewrite without a change of
// meaning, on top of those [snapshot.Normalize] drops.
var churnAnnotations = []string{
	"endpoints.kubernetes.io/last-change-trigger-time",
	"deployment.kubernetes.io/desired-replicas",
	"deployment.kubernetes.io/max-replicas",
	"deployment.kubernetes.io/revision-history",
}

// workloadKinds are the apps/v1 kinds with a pod template.
var workloadKinds = map[string]bool{
	"Deployment": true, "StatefulSet": true, "DaemonSet": true, "ReplicaSet": true,
}

// Normalize returns obj without the fields that change without changing its
// meaning: [snapshot.Normalize] plus what this package knows about kinds a
// cluster churns on. A Node keeps only its name and topology labels; an
// EndpointSlice keeps of each endpoint's conditions only "ready", and no
// resource versions of target references; a Service keeps of its status only
// the load balancer; a workload's pod template loses its restartedAt
// annotation; controller bookkeeping annotations go. The input is not
// modified.
func Normalize(obj map[string]any) map[string]any {
	apiVersion, _ := obj["apiVersion"].(string)
	kind, _ := obj["kind"].(string)
	switch {
	case apiVersion == "v1" && kind == "Node":
		return normalizeNode(obj)
	case apiVersion == "discovery.k8s.io/v1" && kind == "EndpointSlice":
		obj = normalizeEndpointSlice(obj)
	case apiVersion == "v1" && kind == "Service":
		obj = normalizeServiceStatus(obj)
	case strings.HasPrefix(apiVersion, "apps/") && workloadKinds[kind]:
		obj = normalizeTemplate(obj)
	}
	out := snapshot.Normalize(obj)
	if meta, ok := out["metadata"].(map[string]any); ok {
		if ann, ok := meta["annotations"].(map[string]any); ok && hasAny(ann, churnAnnotations) {
			a := maps.Clone(ann)
			for _, k := range churnAnnotations {
				delete(a, k)
			}
			m := maps.Clone(meta)
			if len(a) == 0 {
				delete(m, "annotations")
			} else {
				m["annotations"] = a
			}
			out["metadata"] = m
		}
	}
	return out
}

func hasAny(m map[string]any, keys []string) bool {
	for _, k := range keys {
		if _, ok := m[k]; ok {
			return true
		}
	}
	return false
}

// normalizeNode keeps a Node's name and topology labels.
func normalizeNode(obj map[string]any) map[string]any {
	meta, _ := obj["metadata"].(map[string]any)
	m := map[string]any{"name": meta["name"]}
	if lbls, ok := meta["labels"].(map[string]any); ok {
		kept := map[string]any{}
		for k, v := range lbls {
			for _, p := range topologyLabelPrefixes {
				if strings.HasPrefix(k, p) {
					kept[k] = v
					break
				}
			}
		}
		if len(kept) > 0 {
			m["labels"] = kept
		}
	}
	return map[string]any{"apiVersion": obj["apiVersion"], "kind": obj["kind"], "metadata": m}
}

// normalizeEndpointSlice drops the serving and terminating conditions, which
// flip during rollouts without changing where traffic may go, and the
// resource versions and UIDs of target Pods.
func normalizeEndpointSlice(obj map[string]any) map[string]any {
	eps, ok := obj["endpoints"].([]any)
	if !ok {
		return obj
	}
	out := maps.Clone(obj)
	neps := make([]any, len(eps))
	for i, e := range eps {
		ep, ok := e.(map[string]any)
		if !ok {
			neps[i] = e
			continue
		}
		ep = maps.Clone(ep)
		if c, ok := ep["conditions"].(map[string]any); ok {
			nc := map[string]any{}
			if r, ok := c["ready"]; ok {
				nc["ready"] = r
			}
			ep["conditions"] = nc
		}
		if ref, ok := ep["targetRef"].(map[string]any); ok {
			ref = maps.Clone(ref)
			delete(ref, "resourceVersion")
			delete(ref, "uid")
			ep["targetRef"] = ref
		}
		neps[i] = ep
	}
	out["endpoints"] = neps
	return out
}

// normalizeServiceStatus keeps only status.loadBalancer, the addresses other
// clusters reach a gateway on.
func normalizeServiceStatus(obj map[string]any) map[string]any {
	st, ok := obj["status"].(map[string]any)
	if !ok {
		return obj
	}
	out := maps.Clone(obj)
	lb, ok := st["loadBalancer"].(map[string]any)
	if !ok || len(lb) == 0 {
		delete(out, "status")
		return out
	}
	out["status"] = map[string]any{"loadBalancer": lb}
	return out
}

// normalizeTemplate drops the restartedAt annotation `kubectl rollout
// restart` writes on a pod template.
func normalizeTemplate(obj map[string]any) map[string]any {
	spec, _ := obj["spec"].(map[string]any)
	tmpl, _ := spec["template"].(map[string]any)
	tmeta, _ := tmpl["metadata"].(map[string]any)
	ann, _ := tmeta["annotations"].(map[string]any)
	if _, ok := ann["kubectl.kubernetes.io/restartedAt"]; !ok {
		return obj
	}
	a := maps.Clone(ann)
	delete(a, "kubectl.kubernetes.io/restartedAt")
	tm := maps.Clone(tmeta)
	if len(a) == 0 {
		delete(tm, "annotations")
	} else {
		tm["annotations"] = a
	}
	t := maps.Clone(tmpl)
	t["metadata"] = tm
	s := maps.Clone(spec)
	s["template"] = t
	out := maps.Clone(obj)
	out["spec"] = s
	return out
}

// resourceOf builds a snapshot resource from a decoded object, normalized.
func resourceOf(obj map[string]any) (snapshot.Resource, error) {
	return snapshot.FromObject(Normalize(obj))
}
