package sdktest

import (
	"encoding/json"
	"slices"
	"testing"
)

// Object is a fixture object or policy, decoded: a test edits it in place.
type Object = map[string]any

// Model is a fixture decoded for editing: an incremental test loads one,
// changes one thing at a time and hands [CheckIncremental] the fixture of
// each step ([Model.Fixture]).
//
//	m := sdktest.ModelOf(t, base)
//	next := m.Clone(t)
//	sdktest.Get(next.Cluster("east").Object("Service", "reviews"), "metadata", "labels")["tier"] = "gold"
//	sdktest.CheckIncremental(t, translator, m.Fixture(t), next.Fixture(t))
type Model struct {
	Clusters []*ModelCluster
	Policies []Object
	// next numbers what Serial returns.
	next int
}

// ModelCluster is one cluster of a Model.
type ModelCluster struct {
	Name    string
	Meshes  []string
	Stale   bool
	Objects []Object
}

// ModelOf decodes a fixture.
func ModelOf(tb testing.TB, f *Fixture) *Model {
	tb.Helper()
	m := &Model{}
	for _, c := range f.Clusters {
		mc := &ModelCluster{Name: c.Name, Meshes: slices.Clone(c.Meshes), Stale: c.Stale}
		for _, raw := range c.Objects {
			mc.Objects = append(mc.Objects, Decode(tb, raw))
		}
		m.Clusters = append(m.Clusters, mc)
	}
	for _, raw := range f.Policies {
		m.Policies = append(m.Policies, Decode(tb, raw))
	}
	return m
}

// Fixture encodes the model.
func (m *Model) Fixture(tb testing.TB) *Fixture {
	tb.Helper()
	f := &Fixture{}
	for _, c := range m.Clusters {
		fc := Cluster{Name: c.Name, Meshes: slices.Clone(c.Meshes), Stale: c.Stale}
		for _, o := range c.Objects {
			fc.Objects = append(fc.Objects, Encode(tb, o))
		}
		f.Clusters = append(f.Clusters, fc)
	}
	for _, p := range m.Policies {
		f.Policies = append(f.Policies, Encode(tb, p))
	}
	return f
}

// Clone returns a deep copy.
func (m *Model) Clone(tb testing.TB) *Model {
	tb.Helper()
	c := ModelOf(tb, m.Fixture(tb))
	c.next = m.next
	return c
}

// Cluster returns the named cluster, or nil.
func (m *Model) Cluster(name string) *ModelCluster {
	for _, c := range m.Clusters {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// Serial returns a number no earlier call on the model (or the model it
// was cloned from) returned: for names and addresses that never repeat.
func (m *Model) Serial() int {
	m.next++
	return m.next
}

// OfKind returns the cluster's objects of kind.
func (c *ModelCluster) OfKind(kind string) []Object {
	var out []Object
	for _, o := range c.Objects {
		if KindOf(o) == kind {
			out = append(out, o)
		}
	}
	return out
}

// Object returns the object of kind and name, or nil.
func (c *ModelCluster) Object(kind, name string) Object {
	for _, o := range c.OfKind(kind) {
		if NameOf(o) == name {
			return o
		}
	}
	return nil
}

// Remove drops the object of o's kind, namespace and name.
func (c *ModelCluster) Remove(o Object) {
	c.Objects = slices.DeleteFunc(c.Objects, func(x Object) bool {
		return KindOf(x) == KindOf(o) && NamespaceOf(x) == NamespaceOf(o) && NameOf(x) == NameOf(o)
	})
}

// Get returns the map at path under o, creating the maps that are missing.
func Get(o Object, path ...string) Object {
	for _, k := range path {
		next, ok := o[k].(Object)
		if !ok {
			next = Object{}
			o[k] = next
		}
		o = next
	}
	return o
}

// KindOf returns an object's kind.
func KindOf(o Object) string { s, _ := o["kind"].(string); return s }

// NameOf returns an object's metadata.name.
func NameOf(o Object) string { s, _ := Get(o, "metadata")["name"].(string); return s }

// NamespaceOf returns an object's metadata.namespace.
func NamespaceOf(o Object) string { s, _ := Get(o, "metadata")["namespace"].(string); return s }

// DeepCopy returns a copy of a decoded object.
func DeepCopy(o Object) Object {
	var dup Object
	raw, _ := json.Marshal(o)
	_ = json.Unmarshal(raw, &dup) // a copy of decoded JSON cannot fail
	return dup
}

// Decode decodes one fixture object.
func Decode(tb testing.TB, raw json.RawMessage) Object {
	tb.Helper()
	var o Object
	if err := json.Unmarshal(raw, &o); err != nil {
		tb.Fatal(err)
	}
	return o
}

// Encode encodes one fixture object.
func Encode(tb testing.TB, o Object) json.RawMessage {
	tb.Helper()
	raw, err := json.Marshal(o)
	if err != nil {
		tb.Fatal(err)
	}
	return raw
}
