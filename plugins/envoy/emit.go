package envoy

import (
	"encoding/json"
	"fmt"

	"github.com/meshrelay/meshrelay/api/xds"
	"github.com/meshrelay/meshrelay/sdk"
	"google.golang.org/protobuf/proto"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// emit emits a node group's resources to the target.
func (idx *index) emit(resp *sdk.Response, node string, rs []*resource) error {
	for _, r := range rs {
		spec, err := idx.encode(r.msg)
		if err != nil {
			return fmt.Errorf("node %q: %w", node, err)
		}
		resp.Emit(newEmitted(node, r.msg, spec), r.parents...)
	}
	return nil
}

// encode returns the JSON of a resource as emitted objects carry it, once
// per resource: node groups share most of their resources.
func (idx *index) encode(m proto.Message) (json.RawMessage, error) {
	if spec, ok := idx.encoded[m]; ok {
		return spec, nil
	}
	spec, err := xds.JSON(m)
	if err != nil {
		return nil, err
	}
	if spec, err = canonicalJSON(spec); err != nil {
		return nil, fmt.Errorf("encode %s %q: %w", xds.KindOf(m), xds.ResourceName(m), err)
	}
	idx.encoded[m] = spec
	return spec, nil
}

// canonicalJSON rewrites JSON as json.Marshal writes decoded JSON: object
// keys sorted, numbers as float64, HTML characters escaped. It is what the
// SDK's generic encoding of an [Object] makes of its resource, so emitted
// bodies are byte for byte those of an emitted Object.
func canonicalJSON(raw json.RawMessage) (json.RawMessage, error) {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

// emitted is a wrapper [Object] as the translator emits it: a typed
// object, which the SDK marshals in one pass with the ownership labels set
// on it for the time of the call, rather than through a generic map. Emit
// sets its labels, so each emit takes a fresh one.
type emitted struct {
	metav1.TypeMeta   `json:"-"`
	metav1.ObjectMeta `json:"-"`
	// resource is the xDS resource's canonical JSON (see canonicalJSON).
	resource json.RawMessage
}

// newEmitted wraps an encoded resource for node group nodeID.
func newEmitted(nodeID string, m proto.Message, resource json.RawMessage) *emitted {
	return &emitted{
		TypeMeta:   metav1.TypeMeta{APIVersion: xds.APIVersion, Kind: xds.KindOf(m)},
		ObjectMeta: metav1.ObjectMeta{Name: xds.ResourceName(m), Namespace: nodeID},
		resource:   resource,
	}
}

// emittedMeta is the metadata of an emitted object, its fields in the
// order json.Marshal writes a map's keys.
type emittedMeta struct {
	Annotations map[string]string `json:"annotations,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Name        string            `json:"name"`
	Namespace   string            `json:"namespace"`
}

// MarshalJSON writes the object as [Object] through a generic map: keys
// sorted at every level. The resource is already canonical and is copied
// as it is (json.Marshal checks and compacts it once, after this).
func (e *emitted) MarshalJSON() ([]byte, error) {
	head, err := json.Marshal(struct {
		APIVersion string      `json:"apiVersion"`
		Kind       string      `json:"kind"`
		Metadata   emittedMeta `json:"metadata"`
	}{
		APIVersion: e.APIVersion,
		Kind:       e.Kind,
		Metadata:   emittedMeta{Annotations: e.Annotations, Labels: e.Labels, Name: e.Name, Namespace: e.Namespace},
	})
	if err != nil {
		return nil, err
	}
	// head ends with the metadata's closing brace and its own.
	out := make([]byte, 0, len(head)+len(e.resource)+len(`,"spec":{"resource":}}`))
	out = append(out, head[:len(head)-1]...)
	out = append(out, `,"spec":{"resource":`...)
	out = append(out, e.resource...)
	return append(out, "}}"...), nil
}
