package discovery

import (
	"bytes"
	"encoding/json"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshrelay/meshrelay/api/snapshot"
)

// inventory is what detectors read of a cluster's objects. It decodes an
// object only when a detector asks for it, and asks callers for a marker:
// bytes the body of an object that matters must contain, so that most
// objects are never decoded.
type inventory struct {
	objects []snapshot.Resource
	// named indexes the Namespaces and ConfigMaps by name, in order.
	named map[namedKey][]int
}

// namedKey names a Namespace or ConfigMap.
type namedKey struct{ kind, namespace, name string }

// newInventory indexes a cluster's objects for detectors.
func newInventory(objects []snapshot.Resource) *inventory {
	c := &inventory{objects: objects, named: map[namedKey][]int{}}
	for i, r := range objects {
		if id := r.ID; id.Group == "" && (id.Kind == "Namespace" || id.Kind == "ConfigMap") {
			k := namedKey{id.Kind, id.Namespace, id.Name}
			c.named[k] = append(c.named[k], i)
		}
	}
	return c
}

// workloadsWith returns, in order, the Deployments, StatefulSets, DaemonSets
// and ReplicaSets whose bodies contain marker and decode.
func (c *inventory) workloadsWith(marker string) []*workload {
	var out []*workload
	for _, r := range c.objects {
		if r.ID.Group != "apps" || !workloadKinds[r.ID.Kind] || !bytes.Contains(r.Body, []byte(marker)) {
			continue
		}
		w := &workload{}
		if err := json.Unmarshal(r.Body, w); err != nil {
			continue
		}
		w.Kind = r.ID.Kind
		out = append(out, w)
	}
	return out
}

// servicesWith returns, in order, the Services whose bodies contain one of
// markers and decode.
func (c *inventory) servicesWith(markers ...string) []*service {
	var out []*service
	for _, r := range c.objects {
		if r.ID.Group != "" || r.ID.Kind != "Service" || !containsAny(r.Body, markers) {
			continue
		}
		s := &service{}
		if err := json.Unmarshal(r.Body, s); err != nil {
			continue
		}
		out = append(out, s)
	}
	return out
}

// namespaceLabels returns the labels of the Namespace called name, when its
// body contains marker.
func (c *inventory) namespaceLabels(name, marker string) map[string]string {
	ns, _ := lastNamed[struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
	}](c, namedKey{"Namespace", "", name}, marker)
	return ns.Metadata.Labels
}

// configMapData returns the data of the ConfigMap namespace/name.
func (c *inventory) configMapData(namespace, name string) map[string]string {
	cm, _ := lastNamed[struct {
		Data map[string]string `json:"data"`
	}](c, namedKey{"ConfigMap", namespace, name}, "")
	return cm.Data
}

// lastNamed decodes the last object called k whose body contains marker and
// decodes, and reports whether there is one.
func lastNamed[T any](c *inventory, k namedKey, marker string) (T, bool) {
	idx := c.named[k]
	for i := len(idx) - 1; i >= 0; i-- {
		r := c.objects[idx[i]]
		if !bytes.Contains(r.Body, []byte(marker)) {
			continue
		}
		var v T
		if err := json.Unmarshal(r.Body, &v); err == nil {
			return v, true
		}
	}
	var zero T
	return zero, false
}

// containsAny reports whether body contains one of markers.
func containsAny(body []byte, markers []string) bool {
	for _, m := range markers {
		if bytes.Contains(body, []byte(m)) {
			return true
		}
	}
	return false
}

// workload is the part of a Deployment, StatefulSet, DaemonSet or ReplicaSet
// that detectors read.
type workload struct {
	Kind     string            `json:"kind"`
	Metadata metav1.ObjectMeta `json:"metadata"`
	Spec     struct {
		Template struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
			Spec     struct {
				Containers []container `json:"containers"`
			} `json:"spec"`
		} `json:"template"`
	} `json:"spec"`
}

// container is the part of a pod template's container that detectors read.
type container struct {
	Name  string   `json:"name"`
	Image string   `json:"image"`
	Args  []string `json:"args"`
	Env   []struct {
		Name  string `json:"name"`
		Value string `json:"value"`
	} `json:"env"`
}

// service is the part of a Service that detectors read.
type service struct {
	Metadata metav1.ObjectMeta `json:"metadata"`
	Spec     struct {
		Type        string            `json:"type"`
		Selector    map[string]string `json:"selector"`
		ExternalIPs []string          `json:"externalIPs"`
		Ports       []struct {
			Name string `json:"name"`
			Port int32  `json:"port"`
		} `json:"ports"`
	} `json:"spec"`
	Status struct {
		LoadBalancer struct {
			Ingress []struct {
				IP       string `json:"ip"`
				Hostname string `json:"hostname"`
			} `json:"ingress"`
		} `json:"loadBalancer"`
	} `json:"status"`
}

// container returns the workload's container called name, else its first
// one, else nothing.
func (w *workload) container(name string) container {
	cs := w.Spec.Template.Spec.Containers
	if len(cs) == 0 {
		return container{}
	}
	for _, c := range cs {
		if c.Name == name {
			return c
		}
	}
	return cs[0]
}

// env returns the value of the container's environment variable called
// name: the last one, as Kubernetes does.
func (c container) env(name string) string {
	v := ""
	for _, e := range c.Env {
		if e.Name == name {
			v = e.Value
		}
	}
	return v
}

// imageVersion returns an image's tag without digest or variant suffix:
// "docker.io/istio/pilot:1.24.0-distroless" gives "1.24.0",
// "quay.io/cilium/cilium:v1.16.1@sha256:…" gives "v1.16.1".
func imageVersion(image string) string {
	image, _, _ = strings.Cut(image, "@")
	slash := strings.LastIndex(image, "/")
	colon := strings.LastIndex(image, ":")
	if colon <= slash {
		return ""
	}
	tag := image[colon+1:]
	for _, suffix := range []string{"-distroless", "-debug"} {
		tag = strings.TrimSuffix(tag, suffix)
	}
	return tag
}
