package snapshot

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

// Hash is a SHA-256 content hash.
type Hash [sha256.Size]byte

// String returns the hash in hex.
func (h Hash) String() string { return hex.EncodeToString(h[:]) }

// Short returns the first twelve hex digits, for logs and tables.
func (h Hash) Short() string { return h.String()[:12] }

// IsZero reports whether h is the zero hash.
func (h Hash) IsZero() bool { return h == Hash{} }

// HashFromBytes converts b to a Hash; b must be empty or 32 bytes long.
func HashFromBytes(b []byte) (Hash, error) {
	var h Hash
	if len(b) == 0 {
		return h, nil
	}
	if len(b) != len(h) {
		return h, fmt.Errorf("hash has %d bytes, want %d", len(b), len(h))
	}
	copy(h[:], b)
	return h, nil
}

// ID identifies a resource. Group is empty for the Kubernetes core group and
// Namespace is empty for cluster-scoped resources.
type ID struct {
	Group     string
	Version   string
	Kind      string
	Namespace string
	Name      string
}

// String returns the ID as "group/version/Kind/namespace/name", with "core"
// for the empty group and "-" for no namespace.
func (id ID) String() string {
	g, ns := id.Group, id.Namespace
	if g == "" {
		g = "core"
	}
	if ns == "" {
		ns = "-"
	}
	return g + "/" + id.Version + "/" + id.Kind + "/" + ns + "/" + id.Name
}

// appendString appends what String returns to b.
func (id ID) appendString(b []byte) []byte {
	g, ns := id.Group, id.Namespace
	if g == "" {
		g = "core"
	}
	if ns == "" {
		ns = "-"
	}
	for _, s := range [...]string{g, id.Version, id.Kind, ns} {
		b = append(append(b, s...), '/')
	}
	return append(b, id.Name...)
}

// GroupKind returns "group/Kind", the form translators use to name kinds
// ("/Service" for the core group).
func (id ID) GroupKind() string { return id.Group + "/" + id.Kind }

// APIVersion returns the Kubernetes apiVersion of the resource.
func (id ID) APIVersion() string {
	if id.Group == "" {
		return id.Version
	}
	return id.Group + "/" + id.Version
}

// Compare orders IDs by group, kind, namespace, name and version.
func (id ID) Compare(o ID) int {
	return cmp.Or(
		strings.Compare(id.Group, o.Group),
		strings.Compare(id.Kind, o.Kind),
		strings.Compare(id.Namespace, o.Namespace),
		strings.Compare(id.Name, o.Name),
		strings.Compare(id.Version, o.Version),
	)
}

// Bounds on every ID, whatever it names: Kubernetes objects, and outputs
// such as xDS resources whose names are not Kubernetes names
// ("outbound|9080||reviews.default.svc.cluster.local").
const (
	// MaxFieldBytes bounds an ID's group, version, kind and namespace.
	MaxFieldBytes = 253
	// MaxNameBytes bounds an ID's name.
	MaxNameBytes = 4096
)

// Validate reports whether the ID names something: a version, kind and
// name, each field within its bound ([MaxFieldBytes], [MaxNameBytes]), of
// valid UTF-8 without control characters. Every ID that is decoded or
// built passes it; what an agent sends as input must also pass
// [ID.ValidateObject].
func (id ID) Validate() error {
	switch {
	case id.Kind == "":
		return errors.New("resource has no kind")
	case id.Version == "":
		return fmt.Errorf("%s %q has no version", bounded(id.Kind), bounded(id.Name))
	case id.Name == "":
		return fmt.Errorf("%s has no name", bounded(id.Kind))
	}
	for _, f := range []struct {
		field, value string
		max          int
	}{
		{"group", id.Group, MaxFieldBytes},
		{"version", id.Version, MaxFieldBytes},
		{"kind", id.Kind, MaxFieldBytes},
		{"namespace", id.Namespace, MaxFieldBytes},
		{"name", id.Name, MaxNameBytes},
	} {
		switch {
		case len(f.value) > f.max:
			return fmt.Errorf("resource %s has %d bytes, over the limit of %d", f.field, len(f.value), f.max)
		case !utf8.ValidString(f.value):
			return fmt.Errorf("resource %s %q is not valid UTF-8", f.field, f.value)
		case strings.ContainsFunc(f.value, unicode.IsControl):
			return fmt.Errorf("resource %s %q has a control character", f.field, f.value)
		}
	}
	return nil
}

// ValidateObject reports whether the ID names a Kubernetes object, as an
// agent's input must: the group a DNS-1123 subdomain or empty, the version
// a DNS-1035 label, the kind a DNS-1035 label once lowercased (as a
// CustomResourceDefinition's kind must be), the namespace a DNS-1123 label
// or empty, and the name a DNS-1123 subdomain. The errors name the field.
func (id ID) ValidateObject() error {
	if err := id.Validate(); err != nil {
		return err
	}
	if id.objectNamesValid() {
		return nil
	}
	check := func(field, value string, msgs []string) error {
		if len(msgs) == 0 {
			return nil
		}
		return fmt.Errorf("%s: %s %q is not valid: %s", id, field, value, strings.Join(msgs, "; "))
	}
	var errs []error
	if id.Group != "" {
		errs = append(errs, check("group", id.Group, validation.IsDNS1123Subdomain(id.Group)))
	}
	errs = append(errs,
		check("version", id.Version, validation.IsDNS1035Label(id.Version)),
		check("kind", id.Kind, validation.IsDNS1035Label(strings.ToLower(id.Kind))))
	if id.Namespace != "" {
		errs = append(errs, check("namespace", id.Namespace, validation.IsDNS1123Label(id.Namespace)))
	}
	errs = append(errs, check("name", id.Name, validation.IsDNS1123Subdomain(id.Name)))
	return errors.Join(errs...)
}

// Size returns the bytes of the ID's fields, which count in every size
// of resources, deltas and snapshots.
func (id ID) Size() int {
	return len(id.Group) + len(id.Version) + len(id.Kind) + len(id.Namespace) + len(id.Name)
}

// bounded shortens s for an error message.
func bounded(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	return s[:max] + "…"
}

// Resource is one object in a snapshot: its identity, its canonical JSON body
// and the hash of that body. Resources are values; their Body must not be
// modified once built.
type Resource struct {
	ID   ID
	Body []byte
	Hash Hash
}

// Size returns the size of the resource in bytes, its ID and its body: the
// measure by which messages are split and inputs are bounded.
func (r Resource) Size() int { return r.ID.Size() + len(r.Body) }

// ValidateObject reports whether the resource is a Kubernetes object, as an
// agent's input must be: its ID passes [ID.ValidateObject] and its body is
// a JSON object whose apiVersion, kind, metadata.name and
// metadata.namespace are those of the ID.
func (r Resource) ValidateObject() error {
	if err := r.ID.ValidateObject(); err != nil {
		return err
	}
	h, err := DecodeHeader(r.Body)
	if _, syntax := errors.AsType[*json.SyntaxError](err); syntax {
		return fmt.Errorf("%s: body is not valid JSON: %w", r.ID, err)
	}
	if err != nil {
		return fmt.Errorf("%s: body is not a Kubernetes object: %w", r.ID, err)
	}
	switch {
	case h.APIVersion != r.ID.APIVersion():
		return fmt.Errorf("%s: body has apiVersion %q", r.ID, bounded(h.APIVersion))
	case h.Kind != r.ID.Kind:
		return fmt.Errorf("%s: body has kind %q", r.ID, bounded(h.Kind))
	case h.Metadata.Namespace != r.ID.Namespace:
		return fmt.Errorf("%s: body has metadata.namespace %q", r.ID, bounded(h.Metadata.Namespace))
	case h.Metadata.Name != r.ID.Name:
		return fmt.Errorf("%s: body has metadata.name %q", r.ID, bounded(h.Metadata.Name))
	}
	return nil
}

// NewResource builds a resource from an ID and a JSON body, canonicalizing
// the body (sorted keys, no insignificant space) so equal objects hash
// equally. It does not strip Kubernetes noise: see [FromObject].
func NewResource(id ID, body []byte) (Resource, error) {
	if err := id.Validate(); err != nil {
		return Resource{}, err
	}
	canon, err := Canonical(body)
	if err != nil {
		return Resource{}, fmt.Errorf("%s: %w", id, err)
	}
	return Resource{ID: id, Body: canon, Hash: sha256.Sum256(canon)}, nil
}

// Canonical returns the canonical JSON form of body: object keys sorted,
// numbers kept as written, no insignificant white space.
func Canonical(body []byte) ([]byte, error) {
	var v any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("decode body: %w", err)
	}
	if dec.More() {
		return nil, errors.New("decode body: trailing data after the object")
	}
	return marshalCanonical(v)
}

func marshalCanonical(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("encode body: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// FromObject builds a resource from a decoded Kubernetes object (as produced
// by encoding/json into map[string]any, or by unstructured.Unstructured's
// Object). Its identity comes from apiVersion, kind and metadata; its body is
// the object with the noise of [Normalize] removed. The object itself is not
// modified.
func FromObject(obj map[string]any) (Resource, error) {
	id, err := idOf(obj)
	if err != nil {
		return Resource{}, err
	}
	canon, err := marshalCanonical(Normalize(obj))
	if err != nil {
		return Resource{}, fmt.Errorf("%s: %w", id, err)
	}
	return Resource{ID: id, Body: canon, Hash: sha256.Sum256(canon)}, nil
}

// FromJSON builds a resource from one Kubernetes object in JSON.
func FromJSON(data []byte) (Resource, error) {
	var obj map[string]any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&obj); err != nil {
		return Resource{}, fmt.Errorf("decode object: %w", err)
	}
	if obj == nil {
		return Resource{}, errors.New("decode object: not a JSON object")
	}
	return FromObject(obj)
}

// FromYAML builds a resource from one Kubernetes object in YAML.
func FromYAML(data []byte) (Resource, error) {
	j, err := yaml.YAMLToJSON(data)
	if err != nil {
		return Resource{}, fmt.Errorf("decode yaml: %w", err)
	}
	return FromJSON(j)
}

// Decode unmarshals the resource's body into v.
func (r Resource) Decode(v any) error {
	if err := json.Unmarshal(r.Body, v); err != nil {
		return fmt.Errorf("decode %s: %w", r.ID, err)
	}
	return nil
}

// Object returns the resource's body as a generic object.
func (r Resource) Object() (map[string]any, error) {
	var obj map[string]any
	dec := json.NewDecoder(bytes.NewReader(r.Body))
	dec.UseNumber()
	if err := dec.Decode(&obj); err != nil {
		return nil, fmt.Errorf("decode %s: %w", r.ID, err)
	}
	return obj, nil
}

func idOf(obj map[string]any) (ID, error) {
	var h Header
	h.APIVersion, _ = obj["apiVersion"].(string)
	h.Kind, _ = obj["kind"].(string)
	meta, _ := obj["metadata"].(map[string]any)
	h.Metadata.Name, _ = meta["name"].(string)
	h.Metadata.Namespace, _ = meta["namespace"].(string)
	if h.APIVersion == "" {
		return ID{}, fmt.Errorf("object %q of kind %q has no apiVersion", h.Metadata.Name, h.Kind)
	}
	id := h.ID()
	return id, id.Validate()
}
