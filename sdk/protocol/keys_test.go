package protocol

import (
	"crypto/sha256"
	"maps"
	"slices"
	"testing"

	"github.com/meshrelay/meshrelay/api/snapshot"
)

// KeyOf tells resources apart by every field of their identity and by
// their body: resources that differ in any one, or only in where one field
// ends and the next begins, have different keys.
func TestKeyOfTellsResourcesApart(t *testing.T) {
	type resource struct {
		id   snapshot.ID
		body string
	}
	base := resource{snapshot.ID{Group: "networking.istio.io", Version: "v1", Kind: "VirtualService", Namespace: "ns", Name: "a"}, `{"a":1}`}
	variants := []func(r *resource){
		func(r *resource) { r.id.Group = "security.istio.io" },
		func(r *resource) { r.id.Version = "v1beta1" },
		func(r *resource) { r.id.Kind = "DestinationRule" },
		func(r *resource) { r.id.Namespace = "other" },
		func(r *resource) { r.id.Name = "b" },
		func(r *resource) { r.body = `{"a":2}` },
		func(r *resource) { r.id.Namespace, r.id.Name = "n", "sa" }, // the same characters, split elsewhere
	}
	key := func(r resource) ResourceKey { return KeyOf(r.id, sha256.Sum256([]byte(r.body))) }
	seen := map[ResourceKey]int{key(base): -1}
	for i, change := range variants {
		r := base
		change(&r)
		k := key(r)
		if j, dup := seen[k]; dup {
			t.Errorf("variant %d has the key of variant %d", i, j)
		}
		seen[k] = i
	}
	if key(base) != key(resource{base.id, base.body}) {
		t.Error("the same resource has two keys")
	}
	keys := slices.Collect(maps.Keys(seen))
	set := NewKeySet(slices.Clone(keys))
	for _, k := range keys {
		if !set.Has(k) {
			t.Errorf("the set lost %x", k)
		}
	}
	if set.Has(key(resource{base.id, `{}`})) {
		t.Error("the set holds a key it was not given")
	}
}
