package sdk

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	jsonv1 "github.com/go-json-experiment/json/v1"
	discoveryapi "github.com/meshrelay/meshrelay/api/discovery/v1alpha1"
	clientnetworking "istio.io/client-go/pkg/apis/networking/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// The SDK decodes inputs (decodeKind) and encodes outputs (encodeTyped)
// with jsonv1, encoding/json's rules on the v2 engine. An output's bytes
// are its hash: an encoder that wrote them differently would make every
// agent apply its whole set again after an upgrade. These tests hold the
// two packages to the same results.

// engineKinds are the types the SDK decodes inputs into, and one it
// encodes outputs from.
var engineKinds = []func() any{
	func() any { return new(corev1.Service) },
	func() any { return new(appsv1.Deployment) },
	func() any { return new(discoveryv1.EndpointSlice) },
	func() any { return new(corev1.Namespace) },
	func() any { return new(corev1.Node) },
	func() any { return new(discoveryapi.Mesh) },
	func() any { return new(clientnetworking.VirtualService) },
}

// checkEngineAgrees decodes body into each kind with both packages and
// encodes what they decoded with both: each must give the same value, the
// same success or failure, and the same bytes.
func checkEngineAgrees(t *testing.T, body []byte) {
	t.Helper()
	for _, kind := range engineKinds {
		std, eng := kind(), kind()
		stdErr, engErr := json.Unmarshal(body, std), jsonv1.Unmarshal(body, eng)
		if (stdErr == nil) != (engErr == nil) {
			t.Fatalf("%T from %q: encoding/json says %v, jsonv1 says %v", std, body, stdErr, engErr)
		}
		if stdErr != nil {
			continue
		}
		if !reflect.DeepEqual(std, eng) {
			t.Fatalf("%T from %q decodes differently:\nencoding/json: %+v\njsonv1:        %+v", std, body, std, eng)
		}
		stdOut, stdErr := json.Marshal(std)
		engOut, engErr := jsonv1.Marshal(std)
		if (stdErr == nil) != (engErr == nil) || !bytes.Equal(stdOut, engOut) {
			t.Fatalf("%T from %q encodes differently:\nencoding/json: %s (%v)\njsonv1:        %s (%v)", std, body, stdOut, stdErr, engOut, engErr)
		}
	}
}

// engineSeeds are bodies where the two packages could part: repeated and
// differently cased names, invalid UTF-8, characters HTML escapes, nulls,
// numbers that do not fit, and values of the wrong type.
var engineSeeds = []string{
	`{"metadata":{"name":"a","namespace":"b","labels":{"app":"<x&y>"}},"spec":{"selector":{"app":"a"},"ports":[{"port":80,"targetPort":"http"}]}}`,
	`{"metadata":{"name":"a","name":"b"},"Metadata":{"Name":"c"},"spec":{"PORTS":[{"Port":8080,"targetPort":9090}]}}`,
	"{\"metadata\":{\"name\":\"\xff\xfe\",\"annotations\":{\"k\":\"\\u00e9\\ud800\"}}}",
	`{"metadata":null,"spec":{"replicas":null,"template":{"metadata":{"labels":null}}}}`,
	`{"spec":{"replicas":2147483648}}`,
	`{"spec":{"replicas":1.5}}`,
	`{"spec":{"replicas":"3"}}`,
	`{"metadata":{"creationTimestamp":"2024-01-02T03:04:05Z","labels":{"a":1}}}`,
	`{"metadata":{"creationTimestamp":"not a time"}}`,
	`{"endpoints":[{"addresses":["10.0.0.1"],"conditions":{"ready":false},"targetRef":{"kind":"Pod","name":"p-1"}}]}`,
	`{"spec":{"hosts":["a"],"http":[{"route":[{"destination":{"host":"a","port":{"number":80}},"weight":100}]}]}}`,
	`{"spec":{"template":{"spec":{"containers":[{"name":"c","resources":{"limits":{"cpu":"100m","memory":"1Gi"}}}]}}}}`,
	`[]`, `null`, `"x"`, `{"spec":[]}`,
}

func TestEngineAgreesWithEncodingJSON(t *testing.T) {
	for _, s := range engineSeeds {
		checkEngineAgrees(t, []byte(s))
	}
	// Real inputs and outputs: the demo fleet's clusters and the Istio
	// plugin's goldens.
	files, err := filepath.Glob("../testdata/demo/clusters/*/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	goldens, _ := filepath.Glob("../plugins/istio/testdata/*.golden.yaml")
	files = append(files, goldens...)
	if len(files) < 5 {
		t.Fatalf("found %d test files; the demo fleet or the goldens moved", len(files))
	}
	objects := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range bytes.Split(data, []byte("\n---")) {
			body, err := yaml.YAMLToJSON(doc)
			if err != nil || bytes.Equal(body, []byte("null")) {
				continue
			}
			checkEngineAgrees(t, body)
			objects++
		}
	}
	if objects < 50 {
		t.Fatalf("checked %d objects, want the demo fleet's and the goldens'", objects)
	}
}

func FuzzEngineAgreesWithEncodingJSON(f *testing.F) {
	for _, s := range engineSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkEngineAgrees(t, body) })
}

// stampedKinds are the typed objects marshalStamped is checked on: a
// Deployment's pod template holds an ObjectMeta of its own, which must
// not be stamped; the last two do not encode their metadata through the
// engine's ObjectMeta member.
var stampedKinds = []func() typedObject{
	func() typedObject { return new(clientnetworking.VirtualService) },
	func() typedObject { return new(appsv1.Deployment) },
	func() typedObject { return new(corev1.Service) },
	func() typedObject { return new(inlineMeta) },
	func() typedObject { return new(selfEncoding) },
}

// inlineMeta has the members of its metadata at its top level.
type inlineMeta struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:",inline"`
	Spec              map[string]any `json:"spec,omitempty"`
}

// selfEncoding writes its own JSON, from its metadata's labels and
// annotations, as the Envoy plugin's objects do.
type selfEncoding struct {
	metav1.TypeMeta   `json:"-"`
	metav1.ObjectMeta `json:"-"`
}

func (o *selfEncoding) MarshalJSON() ([]byte, error) {
	return json.Marshal(map[string]any{"kind": o.Kind, "metadata": map[string]any{"name": o.Name, "labels": o.Labels, "annotations": o.Annotations}})
}

// testStamps are stamps as makeStamp builds them, and ones whose keys
// and values collide with an object's or need escaping.
var testStamps = []stamp{
	{labels: map[string]string{ManagedByLabel: ManagedByValue, PluginLabel: "istio"}},
	{
		labels:      map[string]string{ManagedByLabel: ManagedByValue, PluginLabel: "istio", PolicyLabel: "accesspolicy.a"},
		annotations: map[string]string{PoliciesAnnotation: "AccessPolicy/ns/a,TrafficPolicy/ns/b"},
	},
	{labels: map[string]string{"app": "<stamped&>", "\xffé": "\u2028", "": "empty"}, annotations: map[string]string{PoliciesAnnotation: "x", "": ""}},
}

// checkStampedAgrees decodes body into each of stampedKinds and encodes
// it with each stamp both ways: written by metaWriter and set on the
// object. It returns how many encodings took metaWriter's path.
func checkStampedAgrees(t *testing.T, body []byte) (written int) {
	t.Helper()
	for _, kind := range stampedKinds {
		obj := kind()
		if jsonv1.Unmarshal(body, obj) != nil {
			continue
		}
		before, _ := jsonv1.Marshal(obj)
		for _, s := range testStamps {
			want, wantErr := marshalSetting(obj, s)
			got, gotErr := marshalStamped(obj, s)
			if (wantErr == nil) != (gotErr == nil) || !bytes.Equal(got, want) {
				t.Fatalf("%T from %q, stamp %v: written\n  %s (%v)\nset on the object\n  %s (%v)", obj, body, s, got, gotErr, want, wantErr)
			}
			if _, ok, _ := writeStamped(obj, s); ok {
				written++
			}
		}
		if after, _ := jsonv1.Marshal(obj); !bytes.Equal(before, after) {
			t.Fatalf("%T from %q changed by its encodings:\n  %s\n  %s", obj, body, before, after)
		}
	}
	return written
}

// stampedSeeds add metadata metaWriter leaves to the engine, and labels
// and annotations the stamp replaces, to engineSeeds.
var stampedSeeds = append([]string{
	`{"apiVersion":"networking.istio.io/v1","kind":"VirtualService","metadata":{"name":"a","namespace":"b","labels":{"app.kubernetes.io/managed-by":"someone","z":"<>"},"annotations":{"meshrelay.io/policies":"old","a":""}},"spec":{"hosts":["a"]}}`,
	`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d","generateName":"d-"},"spec":{"template":{"metadata":{"name":"t","labels":{"app":"t"}}}}}`,
	`{"metadata":{"name":"a","uid":"u-1","resourceVersion":"7","generation":2,"finalizers":["f"]}}`,
	`{"metadata":{"name":"a","ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"c","uid":"u"}]}}`,
	`{"metadata":{"name":"a","deletionTimestamp":"2024-01-02T03:04:05Z","deletionGracePeriodSeconds":30}}`,
	`{"metadata":{"name":"a","labels":{},"annotations":{}}}`,
	`{"metadata":{}}`,
	`{"kind":"K","name":"top","labels":{"a":"b"},"metadata":{"name":"m"}}`,
}, engineSeeds...)

func TestStampedAgreesWithSetting(t *testing.T) {
	written := 0
	for _, s := range stampedSeeds {
		written += checkStampedAgrees(t, []byte(s))
	}
	objects := istioGoldenObjects(t)
	for _, body := range objects {
		written += checkStampedAgrees(t, body)
	}
	// Each object decodes as at least one kind, whose metadata is plain.
	if written < len(objects)*len(testStamps) {
		t.Fatalf("metaWriter wrote %d encodings, want at least %d: one per golden object and stamp", written, len(objects)*len(testStamps))
	}
}

// istioGoldenObjects returns the objects of the Istio plugin's goldens,
// each as JSON.
func istioGoldenObjects(tb testing.TB) [][]byte {
	tb.Helper()
	goldens, _ := filepath.Glob("../plugins/istio/testdata/*.golden.yaml")
	var objects [][]byte
	for _, f := range goldens {
		data, err := os.ReadFile(f)
		if err != nil {
			tb.Fatal(err)
		}
		var golden struct {
			Outputs []struct {
				Objects []json.RawMessage `json:"objects"`
			} `json:"outputs"`
		}
		if err := yaml.Unmarshal(data, &golden); err != nil {
			tb.Fatalf("%s: %v", f, err)
		}
		for _, out := range golden.Outputs {
			for _, obj := range out.Objects {
				objects = append(objects, obj)
			}
		}
	}
	if len(objects) < 50 {
		tb.Fatalf("found %d objects in the Istio goldens, want their outputs: they moved", len(objects))
	}
	return objects
}

func FuzzStampedAgreesWithSetting(f *testing.F) {
	for _, s := range stampedSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkStampedAgrees(t, body) })
}

// BenchmarkEmitTyped encodes the VirtualServices of the Istio goldens,
// stamped as objects of two parents are, both ways: written by
// metaWriter and set on the object. "spec-encoded" is the shape the Istio
// plugin emits, its spec's JSON from its cache.
func BenchmarkEmitTyped(b *testing.B) {
	var typed, specEncoded []typedObject
	for _, body := range istioGoldenObjects(b) {
		obj := new(clientnetworking.VirtualService)
		if jsonv1.Unmarshal(body, obj) != nil || obj.Kind != "VirtualService" {
			continue
		}
		spec, err := jsonv1.Marshal(&obj.Spec)
		if err != nil {
			b.Fatal(err)
		}
		typed = append(typed, obj)
		specEncoded = append(specEncoded, &encodedSpec{TypeMeta: obj.TypeMeta, ObjectMeta: obj.ObjectMeta, Spec: spec})
	}
	if len(typed) == 0 {
		b.Fatal("no VirtualService in the Istio goldens")
	}
	for _, objs := range []struct {
		name string
		objs []typedObject
	}{{"typed", typed}, {"spec-encoded", specEncoded}} {
		for _, how := range []struct {
			name    string
			marshal func(typedObject, stamp) ([]byte, error)
		}{{"written", marshalStamped}, {"set", marshalSetting}} {
			b.Run(objs.name+"/"+how.name, func(b *testing.B) {
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					if _, err := how.marshal(objs.objs[i%len(objs.objs)], testStamps[1]); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// encodedSpec is an object whose spec is already JSON, as the Istio
// plugin emits them (plugins/istio/encode.go).
type encodedSpec struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              json.RawMessage `json:"spec"`
}
