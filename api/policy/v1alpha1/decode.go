package v1alpha1

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// ErrUnknownKind is wrapped by a DocumentError whose document has an
// apiVersion or kind that is not a policy of this package.
var ErrUnknownKind = errors.New("unknown kind")

// DocumentError is a problem with one document of a YAML stream.
//
// +kubebuilder:object:generate=false
type DocumentError struct {
	// Index is the document's position in the stream, counting from 0;
	// empty documents between two separators are not counted.
	Index int
	// Kind and Name are the document's kind and metadata.name, when known.
	Kind string
	Name string
	// Err is the problem.
	Err error
}

// Error implements error, e.g. `document 2 (kind "Gateway"): unknown kind ...`.
func (e *DocumentError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "document %d", e.Index)
	switch {
	case e.Kind != "" && e.Name != "":
		fmt.Fprintf(&b, " (%s %q)", e.Kind, e.Name)
	case e.Kind != "":
		fmt.Fprintf(&b, " (kind %q)", e.Kind)
	}
	return b.String() + ": " + e.Err.Error()
}

// Unwrap returns the problem.
func (e *DocumentError) Unwrap() error { return e.Err }

// Decode decodes a multi-document YAML (or JSON) stream of policies into
// typed objects, in stream order. Documents that are empty or hold only
// comments are skipped.
//
// Decoding is strict: an apiVersion other than policy.meshrelay.io/v1alpha1,
// an unknown kind, an unknown or duplicate field, or a value of the wrong
// type is an error. Decode does not validate; call Policy.Validate.
//
// Decode returns the documents it could decode together with an error
// joining one *DocumentError per document it could not (use errors.As to
// find them). A stream that cannot be split into documents stops decoding
// at that point.
func Decode(data []byte) ([]Policy, error) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var (
		policies []Policy
		errs     []error
	)
	for index := 0; ; index++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			errs = append(errs, &DocumentError{Index: index, Err: fmt.Errorf("split documents: %w", err)})
			break
		}
		p, err := decodeDocument(doc)
		if err != nil {
			errs = append(errs, withIndex(err, index))
			continue
		}
		if p != nil {
			policies = append(policies, p)
		}
	}
	return policies, errors.Join(errs...)
}

func withIndex(err error, index int) error {
	var de *DocumentError
	if errors.As(err, &de) {
		de.Index = index
		return de
	}
	return &DocumentError{Index: index, Err: err}
}

// decodeDocument decodes one document; it returns nil, nil for an empty one.
func decodeDocument(doc []byte) (Policy, error) {
	data, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return nil, fmt.Errorf("parse yaml: %w", err)
	}
	if s := string(bytes.TrimSpace(data)); s == "null" || s == "" {
		return nil, nil
	}
	var object map[string]any
	if err := kjson.UnmarshalCaseSensitivePreserveInts(data, &object); err != nil {
		return nil, errors.New("not an object")
	}
	apiVersion, _ := object["apiVersion"].(string)
	kind, _ := object["kind"].(string)
	var name string
	if meta, ok := object["metadata"].(map[string]any); ok {
		name, _ = meta["name"].(string)
	}
	derr := func(err error) error { return &DocumentError{Kind: kind, Name: name, Err: err} }

	if apiVersion != SchemeGroupVersion.String() {
		if apiVersion == "" {
			return nil, derr(errors.New("missing apiVersion"))
		}
		return nil, derr(fmt.Errorf("%w: apiVersion %q, want %q", ErrUnknownKind, apiVersion, SchemeGroupVersion.String()))
	}
	var p Policy
	switch kind {
	case KindTrafficPolicy:
		p = &TrafficPolicy{}
	case KindAccessPolicy:
		p = &AccessPolicy{}
	case KindVirtualDestination:
		p = &VirtualDestination{}
	case KindMeshTrust:
		p = &MeshTrust{}
	case KindRolloutStrategy:
		p = &RolloutStrategy{}
	case "":
		return nil, derr(errors.New("missing kind"))
	default:
		return nil, derr(fmt.Errorf("%w, want one of %s, %s, %s, %s, %s", ErrUnknownKind,
			KindAccessPolicy, KindMeshTrust, KindRolloutStrategy, KindTrafficPolicy, KindVirtualDestination))
	}
	strictErrs, err := kjson.UnmarshalStrict(data, p)
	if err != nil {
		return nil, derr(fmt.Errorf("decode: %w", err))
	}
	if len(strictErrs) > 0 {
		return nil, derr(fmt.Errorf("decode: %w", errors.Join(strictErrs...)))
	}
	return p, nil
}
