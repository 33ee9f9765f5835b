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
