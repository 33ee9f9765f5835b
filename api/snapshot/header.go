package snapshot

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"unicode/utf8"
)

// Header is what names a Kubernetes object in its JSON: apiVersion, kind,
// metadata.name and metadata.namespace.
type Header struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
}

// DecodeHeader decodes the header of a JSON object, ignoring its other
// fields; the whole body must be valid JSON. The header and the error are
// what json.Unmarshal returns for body.
//
// A valid object costs one scan of body ([ValidJSON]) and a walk of its
// outline ([ObjectMembers]) that decodes only the header's members, where
// json.Unmarshal scans all of body twice (once to check it, once to skip
// what it does not decode). Anything else (invalid JSON, another value
// than an object, a header member of the wrong type) is decoded by
// json.Unmarshal, for its error.
func DecodeHeader(body []byte) (Header, error) {
	if h, ok := decodeValidHeader(body); ok {
		return h, nil
	}
	var h Header
	err := json.Unmarshal(body, &h)
	return h, err
}

// decodeValidHeader decodes the header of a valid JSON object, as
// json.Unmarshal does: each of its members, repeated or not, decodes into
// the header in order. ok is false, and the header to be ignored, for any
// other body or when a member does not decode.
func decodeValidHeader(body []byte) (h Header, ok bool) {
	ok, err := validObjectMembers(body, func(key, value []byte) error {
		switch {
		case bytes.EqualFold(key, []byte("apiVersion")):
			return decodeString(value, &h.APIVersion)
		case bytes.EqualFold(key, []byte("kind")):
			return decodeString(value, &h.Kind)
		case bytes.EqualFold(key, []byte("metadata")):
			if value[0] != '{' {
				return json.Unmarshal(value, &h.Metadata)
			}
			_, err := ObjectMembers(value, func(key, value []byte) error {
				switch {
				case bytes.EqualFold(key, []byte("name")):
					return decodeString(value, &h.Metadata.Name)
				case bytes.EqualFold(key, []byte("namespace")):
					return decodeString(value, &h.Metadata.Namespace)
				}
				return nil
			})
			return err
		}
		return nil
	})
	return h, ok && err == nil
}

// DecodeLabels decodes metadata.labels of a JSON object, ignoring its
// other fields: the labels and the error are what json.Unmarshal returns
// for body into a struct of that one field. A valid object costs what it
// costs [DecodeHeader]: one scan of body and a walk of the metadata's
// outline, decoding only the labels.
func DecodeLabels(body []byte) (map[string]string, error) {
	if labels, ok := decodeValidLabels(body); ok {
		return labels, nil
	}
	var m struct {
		Metadata struct {
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
	}
	err := json.Unmarshal(body, &m)
	return m.Metadata.Labels, err
}

// errDecodeWhole makes decodeValidLabels leave a body to json.Unmarshal.
var errDecodeWhole = errors.New("decode the whole body")

// decodeValidLabels decodes the labels of a valid JSON object as
// json.Unmarshal does: each metadata member, repeated or not, decodes
// into the same struct, each labels member into the same map, and null
// sets the map to nil. ok is false, and the labels to be ignored, for any
// other body or when what it holds is not plain: metadata or labels of
// another type than an object or null, a label whose value is not a
// string or null, a key that is not UTF-8.
func decodeValidLabels(body []byte) (labels map[string]string, ok bool) {
	ok, err := validObjectMembers(body, func(key, value []byte) error {
		if !bytes.EqualFold(key, []byte("metadata")) {
			return nil
		}
		if value[0] != '{' {
			return nullOr(value)
		}
		_, err := ObjectMembers(value, func(key, value []byte) error {
			if !bytes.EqualFold(key, []byte("labels")) {
				return nil
			}
			if value[0] != '{' {
				if err := nullOr(value); err != nil {
					return err
				}
				labels = nil
				return nil
			}
			if labels == nil {
				labels = map[string]string{}
			}
			_, err := ObjectMembers(value, func(key, value []byte) error {
				if !utf8.Valid(key) || value[0] != '"' && value[0] != 'n' {
					return errDecodeWhole
				}
				var s string
				if err := decodeString(value, &s); err != nil {
					return err
				}
				labels[string(key)] = s
				return nil
			})
			return err
		})
		return err
	})
	return labels, ok && err == nil
}

// nullOr returns nil for the JSON null and errDecodeWhole for any other value.
func nullOr(value []byte) error {
	if string(value) == "null" {
		return nil
	}
	return errDecodeWhole
}

// decodeString decodes the valid JSON value into s as json.Unmarshal does,
// without its cost for a string that needs no unescaping.
func decodeString(value []byte, s *string) error {
	if len(value) >= 2 && value[0] == '"' && bytes.IndexByte(value, '\\') < 0 && utf8.Valid(value) {
		*s = string(value[1 : len(value)-1])
		return nil
	}
	return json.Unmarshal(value, s)
}

// ID returns the identity the header names, without validating it.
func (h Header) ID() ID {
	group, version, found := strings.Cut(h.APIVersion, "/")
	if !found {
		group, version = "", h.APIVersion
	}
	return ID{Group: group, Version: version, Kind: h.Kind, Namespace: h.Metadata.Namespace, Name: h.Metadata.Name}
}
