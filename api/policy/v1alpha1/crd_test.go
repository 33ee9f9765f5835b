package v1alpha1

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"sigs.k8s.io/yaml"
)

// crd is the part of a CustomResourceDefinition the tests look at.
type crd struct {
	Kind string `json:"kind"`
	Spec struct {
		Group string `json:"group"`
		Names struct {
			Kind   string `json:"kind"`
			Plural string `json:"plural"`
		} `json:"names"`
		Scope    string `json:"scope"`
		Versions []struct {
			Name         string         `json:"name"`
			Served       bool           `json:"served"`
			Storage      bool           `json:"storage"`
			Subresources map[string]any `json:"subresources"`
			Schema       struct {
				OpenAPIV3Schema jsonSchema `json:"openAPIV3Schema"`
			} `json:"schema"`
		} `json:"versions"`
	} `json:"spec"`
}

type jsonSchema struct {
	Type       string                `json:"type"`
	Required   []string              `json:"required"`
	Properties map[string]jsonSchema `json:"properties"`
	Items      *jsonSchema           `json:"items"`
	Enum       []any                 `json:"enum"`
	Minimum    *float64              `json:"minimum"`
	Maximum    *float64              `json:"maximum"`
}

// at follows a path of property names, "[]" stepping into array items.
func (s jsonSchema) at(t *testing.T, path ...string) jsonSchema {
	t.Helper()
	for _, p := range path {
		if p == "[]" {
			if s.Items == nil {
				t.Fatalf("jsonSchema at %v: no items", path)
			}
			s = *s.Items
			continue
		}
		next, ok := s.Properties[p]
		if !ok {
			t.Fatalf("jsonSchema at %v: no property %q", path, p)
		}
		s = next
	}
	return s
}

func TestCRDs(t *testing.T) {
	tests := map[string]struct {
		file     string
		kind     string
		required map[string][]string // dotted path ("" is the object) -> required fields
		check    func(*testing.T, jsonSchema)
	}{
		"TrafficPolicy": {
			file: "policy.meshrelay.io_trafficpolicies.yaml", kind: KindTrafficPolicy,
			required: map[string][]string{"": {"spec"}, "spec": {"destinationSelectors", "http"}},
			check: func(t *testing.T, s jsonSchema) {
				w := s.at(t, "spec", "http", "[]", "route", "[]", "weight")
				if w.Minimum == nil || *w.Minimum != 0 || w.Maximum == nil || *w.Maximum != 100 {
					t.Errorf("weight bounds = %v..%v, want 0..100", w.Minimum, w.Maximum)
				}
				abort := s.at(t, "spec", "http", "[]", "fault", "abort")
				if !slices.Equal(abort.Required, []string{"httpStatus", "percent"}) {
					t.Errorf("abort required = %v", abort.Required)
				}
				pathType := s.at(t, "spec", "http", "[]", "matches", "[]", "path", "type")
				if !slices.Equal(pathType.Enum, []any{"Exact", "Prefix", "RegularExpression"}) {
					t.Errorf("path type enum = %v, want Exact, Prefix, RegularExpression", pathType.Enum)
				}
				if m := s.at(t, "spec", "http", "[]", "matches", "[]", "method"); len(m.Enum) != 9 {
					t.Errorf("method enum = %v, want 9 methods", m.Enum)
				}
			},
		},
		"AccessPolicy": {
			file: "policy.meshrelay.io_accesspolicies.yaml", kind: KindAccessPolicy,
			required: map[string][]string{"": {"spec"}, "spec": {"destinationSelectors"}},
			check: func(t *testing.T, s jsonSchema) {
				sa := s.at(t, "spec", "from", "[]", "serviceAccounts", "[]")
				if !slices.Equal(sa.Required, []string{"name", "namespace"}) {
					t.Errorf("serviceAccounts required = %v", sa.Required)
				}
				if m := s.at(t, "spec", "methods", "[]"); len(m.Enum) != 9 {
					t.Errorf("methods item enum = %v, want 9 methods", m.Enum)
				}
				if a := s.at(t, "spec", "action"); len(a.Enum) != 2 {
					t.Errorf("action enum = %v, want Allow, DenyAll", a.Enum)
				}
			},
		},
		"VirtualDestination": {
			file: "policy.meshrelay.io_virtualdestinations.yaml", kind: KindVirtualDestination,
			required: map[string][]string{"": {"spec"}, "spec": {"hostname", "ports"}},
			check: func(t *testing.T, s jsonSchema) {
				port := s.at(t, "spec", "ports", "[]")
				if !slices.Equal(port.Required, []string{"number", "protocol"}) {
					t.Errorf("ports required = %v", port.Required)
				}
				od := s.at(t, "spec", "outlierDetection")
				if !slices.Equal(od.Required, []string{"baseEjectionTime", "consecutiveErrors", "interval", "maxEjectionPercent"}) {
					t.Errorf("outlierDetection required = %v", od.Required)
				}
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("../../../deploy/crds", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			var c crd
			if err := yaml.Unmarshal(data, &c); err != nil {
				t.Fatalf("parse %s: %v", tc.file, err)
			}
			if c.Kind != "CustomResourceDefinition" || c.Spec.Group != GroupName || c.Spec.Names.Kind != tc.kind || c.Spec.Scope != "Namespaced" {
				t.Errorf("%s: kind %q group %q names.kind %q scope %q", tc.file, c.Kind, c.Spec.Group, c.Spec.Names.Kind, c.Spec.Scope)
			}
			if len(c.Spec.Versions) != 1 {
				t.Fatalf("%s: %d versions, want 1", tc.file, len(c.Spec.Versions))
			}
			v := c.Spec.Versions[0]
			if v.Name != SchemeGroupVersion.Version || !v.Served || !v.Storage {
				t.Errorf("version %q served %v storage %v, want v1alpha1 served and stored", v.Name, v.Served, v.Storage)
			}
			if _, ok := v.Subresources["status"]; !ok {
				t.Error("no status subresource")
			}
			root := v.Schema.OpenAPIV3Schema
			for path, want := range tc.required {
				s := root
				if path != "" {
					s = root.at(t, path)
				}
				if !slices.Equal(s.Required, want) {
					t.Errorf("required at %q = %v, want %v", path, s.Required, want)
				}
			}
			state := root.at(t, "status", "state")
			if !slices.Equal(state.Enum, []any{"Pending", "Accepted", "Invalid", "Failed"}) {
				t.Errorf("status.state enum = %v", state.Enum)
			}
			tc.check(t, root)
		})
	}
}
