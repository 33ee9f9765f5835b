package istio

import (
	"bytes"
	"errors"
	"path/filepath"
	"reflect"
	"testing"

	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/sdk"
	"github.com/meshrelay/meshrelay/sdk/sdktest"
	security "istio.io/api/security/v1beta1"
	clientsecurity "istio.io/client-go/pkg/apis/security/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Objects emitted through the cache are the bytes of the typed objects,
// whether the cache misses (the first run) or hits (the second, and
// objects the same in several clusters), for every kind the fixtures
// emit. The second run finds every object in the cache.
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
			var held int
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
				if run == 1 && cached.specs.objects.len() != held {
					t.Errorf("the second run added %d objects to the cache, want none", cached.specs.objects.len()-held)
				}
				held = cached.specs.objects.len()
			}
			if cached.specs.specs.len() == 0 && len(want) > 0 {
				t.Errorf("the cache holds no spec after emitting %d objects", len(want))
			}
			if held == 0 && len(want) > 0 {
				t.Errorf("the cache holds no object after emitting %d objects", len(want))
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
func TestGenerationsBounded(t *testing.T) {
	g := newGenerations[string](2)
	g.add("a", "a")
	g.add("b", "b")
	g.add("c", "c") // a and b are the old generation now
	if _, ok := g.get([]byte("a")); !ok {
		t.Fatal("a, in the old generation, was dropped")
	}
	// a moved into the current generation, which is full now: b goes.
	g.add("d", "d")
	if _, ok := g.get([]byte("b")); ok {
		t.Error("b was kept beyond two generations")
	}
	for _, k := range []string{"a", "c", "d"} {
		if v, ok := g.get([]byte(k)); !ok || v != k {
			t.Errorf("%s was dropped or changed: %q", k, v)
		}
	}
	if n := g.len(); n > 2*2 {
		t.Errorf("the generations hold %d entries, want at most 4", n)
	}
}

// Objects with the same spec but another name, namespace or parents, or
// the same parents in another order, each get their own encoding from the
// cache: what Emit makes of each, whatever was emitted before it.
func TestCachedObjectsKeyedByAllTheyEncode(t *testing.T) {
	policy := func(name string) *policyv1alpha1.AccessPolicy {
		return &policyv1alpha1.AccessPolicy{TypeMeta: metav1.TypeMeta{Kind: "AccessPolicy"}, ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
	}
	a, b := policy("a"), policy("b")
	strict := func(namespace, name string) *clientsecurity.PeerAuthentication {
		pa := &clientsecurity.PeerAuthentication{TypeMeta: peerAuthnType, ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}
		pa.Spec.Mtls = &security.PeerAuthentication_MutualTLS{Mode: security.PeerAuthentication_MutualTLS_STRICT}
		return pa
	}
	variants := []struct {
		obj     object
		parents []policyv1alpha1.Policy
	}{
		{strict("ns", "x"), []policyv1alpha1.Policy{a}},
		{strict("ns", "y"), []policyv1alpha1.Policy{a}},
		{strict("other", "x"), []policyv1alpha1.Policy{a}},
		{strict("ns", "x"), []policyv1alpha1.Policy{b}},
		{strict("ns", "x"), []policyv1alpha1.Policy{a, b}},
		{strict("ns", "x"), []policyv1alpha1.Policy{b, a}},
		{strict("ns", "x"), nil},
	}
	d := New().Describe()
	c := newSpecCache(specCacheLimit)
	for run := range 2 {
		for i, v := range variants {
			want, got := sdk.NewResponse(d, "east"), sdk.NewResponse(d, "east")
			want.Emit(v.obj, v.parents...)
			c.emit(got, v.obj, v.parents)
			if err := errors.Join(want.Err(), got.Err()); err != nil {
				t.Fatal(err)
			}
			w, g := want.Outputs()[0], got.Outputs()[0]
			if g.ID != w.ID || !bytes.Equal(g.Body, w.Body) {
				t.Errorf("run %d, variant %d: emitted\n%s\nwant\n%s", run, i, g.Body, w.Body)
			}
		}
	}
	if n := c.objects.len(); n != len(variants) {
		t.Errorf("the cache holds %d objects, want one per variant (%d)", n, len(variants))
	}
}

// namedOnly refuses metadata with any field set beside the name and the
// namespace, including any field a later ObjectMeta adds.
func TestNamedOnlyChecksEveryField(t *testing.T) {
	typ := reflect.TypeFor[metav1.ObjectMeta]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		var m metav1.ObjectMeta
		v := reflect.ValueOf(&m).Elem().Field(i)
		switch v.Kind() {
		case reflect.String:
			v.SetString("x")
		case reflect.Int64:
			v.SetInt(1)
		case reflect.Pointer:
			v.Set(reflect.New(f.Type.Elem()))
		case reflect.Map:
			v.Set(reflect.MakeMap(f.Type))
			v.SetMapIndex(reflect.ValueOf("k"), reflect.ValueOf("v"))
		case reflect.Slice:
			v.Set(reflect.MakeSlice(f.Type, 1, 1))
		case reflect.Struct:
			m.CreationTimestamp = metav1.Unix(1, 0)
			if f.Name != "CreationTimestamp" {
				t.Fatalf("no way to set ObjectMeta.%s in this test", f.Name)
			}
		default:
			t.Fatalf("no way to set ObjectMeta.%s (%s) in this test", f.Name, v.Kind())
		}
		want := f.Name == "Name" || f.Name == "Namespace"
		if got := namedOnly(&m); got != want {
			t.Errorf("namedOnly with ObjectMeta.%s set: %v, want %v", f.Name, got, want)
		}
	}
}
