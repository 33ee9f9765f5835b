package sdk

import (
	"encoding"
	"maps"
	"slices"
	"sync"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	json "github.com/go-json-experiment/json/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// marshalStamped encodes a typed object with the SDK's stamp on its
// metadata, to the bytes jsonv1.Marshal gives for the object with the
// stamp's labels and annotations added. metaWriter writes the metadata of
// an object that holds only what a translator sets (plainMeta) and that
// the engine encodes; any other is stamped for the time of the call and
// encoded whole (marshalSetting), as is an object whose encoding did not
// go through its ObjectMeta: one that writes itself (MarshalJSON, as the
// Envoy plugin's do) or leaves its metadata out.
func marshalStamped(obj typedObject, s stamp) ([]byte, error) {
	body, written, err := writeStamped(obj, s)
	if written {
		return body, err
	}
	return marshalSetting(obj, s)
}

// writeStamped encodes obj with metaWriter, and says whether it wrote
// obj's metadata; nothing is encoded when plainMeta refuses obj or obj
// encodes itself.
func writeStamped(obj typedObject, s stamp) (body []byte, written bool, err error) {
	top, ok := plainMeta(obj)
	if !ok || encodesItself(obj) {
		return nil, false, nil
	}
	w := metaWriters.Get().(*metaWriter)
	w.top, w.stamp, w.wrote = top, s, false
	body, err = jsonv2.Marshal(obj, w.opts)
	written = w.wrote
	w.top, w.stamp, w.keys = nil, stamp{}, w.keys[:0]
	metaWriters.Put(w)
	return body, written, err
}

// encodesItself says whether obj has a JSON encoding method of its own,
// which would not write its metadata through metaWriter.
func encodesItself(obj typedObject) bool {
	switch obj.(type) {
	case json.Marshaler, jsonv2.MarshalerTo, encoding.TextMarshaler:
		return true
	}
	return false
}

// marshalSetting sets the stamped labels and annotations on obj, encodes
// it and sets back what it had.
func marshalSetting(obj typedObject, s stamp) ([]byte, error) {
	labels, ann := obj.GetLabels(), obj.GetAnnotations()
	stamped := make(map[string]string, len(labels)+len(s.labels))
	maps.Copy(stamped, labels)
	maps.Copy(stamped, s.labels)
	obj.SetLabels(stamped)
	if len(s.annotations) > 0 {
		a := make(map[string]string, len(ann)+len(s.annotations))
		maps.Copy(a, ann)
		maps.Copy(a, s.annotations)
		obj.SetAnnotations(a)
	}
	body, err := json.Marshal(obj)
	obj.SetLabels(labels)
	obj.SetAnnotations(ann)
	return body, err
}

// plainMeta returns obj's own ObjectMeta when it holds nothing but a
// name, generateName, namespace, labels and annotations: what
// translators set, and all metaWriter writes.
func plainMeta(obj typedObject) (*metav1.ObjectMeta, bool) {
	acc, ok := obj.(metav1.ObjectMetaAccessor)
	if !ok {
		return nil, false
	}
	m, ok := acc.GetObjectMeta().(*metav1.ObjectMeta)
	if !ok || m == nil {
		return nil, false
	}
	plain := m.SelfLink == "" && m.UID == "" && m.ResourceVersion == "" && m.Generation == 0 &&
		m.CreationTimestamp.IsZero() && m.DeletionTimestamp == nil && m.DeletionGracePeriodSeconds == nil &&
		len(m.OwnerReferences) == 0 && len(m.Finalizers) == 0 && len(m.ManagedFields) == 0
	return m, plain
}

// metaWriter writes the metadata of the object being encoded, with the
// stamp merged in, in ObjectMeta's member order and with jsonv1's rules
// (empty members left out, map keys sorted bytewise). Reflection over
// ObjectMeta's members and copies of its maps to stamp them were most of
// the cost of an emit (docs/performance.md). Any other ObjectMeta, such
// as a pod template's, is left to the engine.
type metaWriter struct {
	top   *metav1.ObjectMeta
	stamp stamp
	keys  []string
	// wrote says top was written.
	wrote bool
	opts  jsonv2.Options
}

var metaWriters = sync.Pool{New: func() any {
	w := new(metaWriter)
	w.opts = jsonv2.JoinOptions(json.DefaultOptionsV1(), jsonv2.WithMarshalers(jsonv2.MarshalToFunc(w.write)))
	return w
}}

func (w *metaWriter) write(enc *jsontext.Encoder, m *metav1.ObjectMeta) error {
	if m != w.top {
		return jsonv2.SkipFunc
	}
	w.wrote = true
	e := tokenWriter{enc: enc}
	e.token(jsontext.BeginObject)
	e.member("name", m.Name)
	e.member("generateName", m.GenerateName)
	e.member("namespace", m.Namespace)
	w.writeMap(&e, "labels", m.Labels, w.stamp.labels)
	w.writeMap(&e, "annotations", m.Annotations, w.stamp.annotations)
	e.token(jsontext.EndObject)
	return e.err
}

// writeMap writes the member name: own with over's entries set over it;
// nothing when that is empty.
func (w *metaWriter) writeMap(e *tokenWriter, name string, own, over map[string]string) {
	keys := w.keys[:0]
	for k := range own {
		if _, ok := over[k]; !ok {
			keys = append(keys, k)
		}
	}
	for k := range over {
		keys = append(keys, k)
	}
	w.keys = keys
	if len(keys) == 0 {
		return
	}
	slices.Sort(keys)
	e.token(jsontext.String(name))
	e.token(jsontext.BeginObject)
	for _, k := range keys {
		v, ok := over[k]
		if !ok {
			v = own[k]
		}
		e.token(jsontext.String(k))
		e.token(jsontext.String(v))
	}
	e.token(jsontext.EndObject)
}

// tokenWriter writes tokens and keeps the first error.
type tokenWriter struct {
	enc *jsontext.Encoder
	err error
}

func (e *tokenWriter) token(t jsontext.Token) {
	if e.err == nil {
		e.err = e.enc.WriteToken(t)
	}
}

// member writes name: value, or nothing for an empty value.
func (e *tokenWriter) member(name, value string) {
	if value != "" {
		e.token(jsontext.String(name))
		e.token(jsontext.String(value))
	}
}
