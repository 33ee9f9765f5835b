package istio

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/meshrelay/meshrelay/sdk/sdktest"
)

// Objects emitted with their specs' JSON from the cache are the bytes of
// the typed objects, whether the cache misses (the first run) or hits
// (the second, and objects the same in several clusters), for every kind
// the fixtures emit.
func TestCachedSpecsEncodeAsTyped(t *testing.T) {
	fixtures, err := filepath.Glob(filepath.Join("testdata", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]bool{}
	for _, path := range fixtures {
		if filepath.Ext(filepath.Base(path[:len(path)-len(".yaml")])) == ".golden" {
			continue
		}
		t.Run(filepath.Base(path), func(t *testing.T) {
			want := sdktest.Run(t, &Translator{}, path).Outputs
			cached := New()
			for run := range 2 {
				got := sdktest.Run(t, cached, path).Outputs
				if len(got) != len(want) {
					t.Fatalf("run %d: %d outputs, want %d", run, len(got), len(want))
				}
				for i := range want {
					if got[i].ID != want[i].ID || !bytes.Equal(got[i].Body, want[i].Body) {
						t.Errorf("run %d: %s %s/%s is\n%s\nwant\n%s", run, got[i].Kind, got[i].Namespace, got[i].Name, got[i].Body, want[i].Body)
					}
					kinds[want[i].Kind] = true
				}
			}
			if len(cached.specs.cur)+len(cached.specs.old) == 0 && len(want) > 0 {
				t.Errorf("the cache holds no spec after emitting %d objects", len(want))
			}
		})
	}
	for _, kind := range []string{"AuthorizationPolicy", "DestinationRule", "Gateway", "PeerAuthentication", "ServiceEntry", "VirtualService"} {
		if !kinds[kind] {
			t.Errorf("no fixture emits a %s", kind)
		}
	}
}

// The cache holds at most two generations: a lookup moves what it finds
// into the current one, and a full current generation drops the old.
func TestSpecCacheBounded(t *testing.T) {
	c := newSpecCache(2)
	c.put("a", []byte(`"a"`))
	c.put("b", []byte(`"b"`))
	c.put("c", []byte(`"c"`)) // a and b are the old generation now
	if _, ok := c.get([]byte("a")); !ok {
		t.Fatal("a, in the old generation, was dropped")
	}
	// a moved into the current generation, which is full now: b goes.
	c.put("d", []byte(`"d"`))
	if _, ok := c.get([]byte("b")); ok {
		t.Error("b was kept beyond two generations")
	}
	for _, k := range []string{"a", "c", "d"} {
		if _, ok := c.get([]byte(k)); !ok {
			t.Errorf("%s was dropped", k)
		}
	}
	if n := len(c.cur) + len(c.old); n > 2*2 {
		t.Errorf("the cache holds %d specs, want at most 4", n)
	}
}
