package snapshot

import (
	"encoding/json"
	"strings"
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
// fields; the whole body must be valid JSON. The error is encoding/json's.
func DecodeHeader(body []byte) (Header, error) {
	var h Header
	err := json.Unmarshal(body, &h)
	return h, err
}

// ID returns the identity the header names, without validating it.
func (h Header) ID() ID {
	group, version, found := strings.Cut(h.APIVersion, "/")
	if !found {
		group, version = "", h.APIVersion
	}
	return ID{Group: group, Version: version, Kind: h.Kind, Namespace: h.Metadata.Namespace, Name: h.Metadata.Name}
}
