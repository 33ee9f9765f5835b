package server

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/meshrelay/meshrelay/api/meta"
	"github.com/meshrelay/meshrelay/api/snapshot"
)

// referenceDecodeOutputMeta is decodeOutputMeta as json.Unmarshal of the
// whole body: what decodeOutputMeta must return for every valid body.
func referenceDecodeOutputMeta(body []byte) (policies string, labels map[string]string) {
	var m objectMeta
	if json.Unmarshal(body, &m) != nil {
		return "", nil
	}
	return m.Metadata.Annotations[meta.PoliciesAnnotation], m.Metadata.Labels
}

// craftedOutputBodies are bodies that tell a decoder reading only part of
// an object from json.Unmarshal.
var craftedOutputBodies = []string{
	``, ` `, `null`, `1`, `"s"`, `[]`, `[{"metadata":{"labels":{"a":"b"}}}]`,
	`{}`, `{`, `}`, `{}{}`, `{"metadata"}`, `{"metadata":}`, `{"metadata":{},}`,
	`{"metadata":{"labels":{"a":"b"}}`, `{"metadata":{"labels":{"a":"b"}}}x`,
	`{"metadata":{"labels":{}}}`,
	`{"metadata":{"labels":null,"annotations":{}}}`,
	`{"spec":{"metadata":{"labels":{"inner":"x"}}}}`,
	`{"spec":{"template":{"metadata":{"labels":{"inner":"x"}}}},"metadata":{"labels":{"outer":"y"}}}`,
	`{"spec":{"s":"}]\"{"},"metadata":{"labels":{"a":"b"},"annotations":{"meshrelay.io/policies":"P/ns/a,P/ns/b"}}}`,
	`{"metadata":{"labels":{"a":"1"}},"spec":{},"metadata":{"labels":{"b":"2"}}}`,
	`{"metadata":{"labels":{"a":"1"},"annotations":{"meshrelay.io/policies":"P/ns/a"}},"metadata":{"labels":null}}`,
	`{"metadata":{"labels":{"a":"1"}},"metadata":null}`,
	`{"metadata":{"labels":{"a":"1"}},"metadata":{"labels":{"a":2}}}`,
	`{"metadata":{"labels":{"a":"1"}},"METADATA":{"labels":{"b":"2"}},"Metadata":{"annotations":{"meshrelay.io/policies":"P/ns/c"}}}`,
	`{"m\u0065tadata":{"l\u0061bels":{"\u0061":"\"\\"}}}`,
	`{"metadata":"x"}`, `{"metadata":[]}`, `{"metadata":{"labels":{"a":1}}}`,
	`{"metadata":{"labels":{"a":"b"}},"spec":{"a":1,}}`,
	`{"metadata":{"labels":{"a":"b"}},"spec":tru}`,
	`{"metadata":{"labels":{"a":"b",}}}`,
	"{\"metadata\":{\"labels\":{\"a\":\"\xff\"}}}",
	"\t{\n\"metadata\" : { \"labels\" : { \"a\" : \"b\" } } }\n",
	// Repeated labels and annotations members, within one metadata and
	// across two: a map member adds to the map, null makes it nil, the
	// last value of a key wins.
	`{"metadata":{"labels":{"a":"1"},"labels":{"b":"2"}}}`,
	`{"metadata":{"labels":{"a":"1"},"labels":null,"labels":{"b":"2"}}}`,
	`{"metadata":{"labels":{"a":"1"},"labels":null}}`,
	`{"metadata":{"labels":{"a":"1","a":"2","a":null}}}`,
	`{"metadata":{"labels":{"a":"1"}},"metadata":{"labels":{"a":"2","b":"3"}}}`,
	`{"metadata":{"annotations":{"meshrelay.io/policies":"P/ns/a"},"annotations":{"x":"y"}}}`,
	`{"metadata":{"annotations":{"meshrelay.io/policies":"P/ns/a"},"annotations":null,"annotations":{"x":"y"}}}`,
	`{"metadata":{"annotations":{"meshrelay.io/policies":"P/ns/a"}},"metadata":{"annotations":null}}`,
	`{"metadata":{"annotations":{"meshrelay.io/policies":"P/ns/a","meshrelay.io/policies":"P/ns/b"}}}`,
	`{"metadata":{"annotations":{"meshrelay.io/policies":"P/ns/a","meshrelay.io/policies":null}}}`,
	`{"metadata":{"annotations":{"meshrelay.io/policies":"P/ns/a"}},"metadata":{"annotations":{"meshrelay.io/policies":"P/ns/b"}}}`,
	// Keys: escaped map keys are the same key, field names match in any
	// case (by bytes.EqualFold, where the Kelvin sign is a k), map keys
	// exactly.
	`{"metadata":{"annotations":{"meshrelay.io\/policies":"P/ns/a"}}}`,
	`{"metadata":{"annotations":{"meshrelay.io\u002fpolicies":"P/ns/a","\u006deshrelay.io/policies":"P/ns/b"}}}`,
	`{"metadata":{"annotations":{"Meshrelay.io/policies":"P/ns/a","meshrelay.io/policies ":"P/ns/b"}}}`,
	`{"metadata":{"Annotations":{"meshrelay.io/policies":"P/ns/a"},"LABELS":{"a":"b"}}}`,
	`{"metadata":{"annotations":{"meshrelay.io/policies":"P/ns/a"},"ANNOTATIONS":{"meshrelay.io/policies":"P/ns/b"}}}`,
	`{"metadata":{"annotation\u017f":{"meshrelay.io/policies":"P/ns/a"},"label\u017f":{"a":"b"}}}`,
	`{"metadata":{"labels":{"a":"b"},"annotations":{"meshrelay.io/policies":"P/ns/\u00e9\ud83d\ude00\ud800"}}}`,
	"{\"metadata\":{\"annotations\":{\"meshrelay.io/policies\":\"P/ns/\xffa\xc3\"}}}",
	"{\"metadata\":{\"labels\":{\"\xfd\":\"\",\"a\xc3\xff\\u00e9\":\"\"}}}",
	// Values that are not strings, or maps that are not objects.
	`{"metadata":{"labels":{"a":"b"},"annotations":{"x":1,"meshrelay.io/policies":"P/ns/a"}}}`,
	`{"metadata":{"labels":{"a":"b"},"annotations":{"meshrelay.io/policies":"P/ns/a","x":{}}}}`,
	`{"metadata":{"labels":{"a":"b"},"annotations":{"x":[],"meshrelay.io/policies":"P/ns/a"}}}`,
	`{"metadata":{"labels":{"a":"b"},"annotations":{"x":true}}}`,
	`{"metadata":{"labels":{"a":"b"},"annotations":{"x":null,"meshrelay.io/policies":"P/ns/a"}}}`,
	`{"metadata":{"labels":{"a":"b"},"annotations":{"meshrelay.io/policies":1}}}`,
	`{"metadata":{"labels":{"a":"b"},"annotations":"meshrelay.io/policies"}}`,
	`{"metadata":{"labels":{"a":"b"},"annotations":[]}}`,
	`{"metadata":{"labels":{"a":"b"},"annotations":0}}`,
	`{"metadata":{"labels":{"a":"b"},"annotations":false}}`,
	`{"metadata":{"labels":"a","annotations":{"meshrelay.io/policies":"P/ns/a"}}}`,
	`{"metadata":{"labels":{"a":{"b":"c"}},"annotations":{"meshrelay.io/policies":"P/ns/a"}}}`,
	`{"metadata":{"labels":{"a":"b"},"name":1,"ownerReferences":[{"x":null}],"annotations":{"meshrelay.io/policies":"P/ns/a"}}}`,
	// Invalid JSON inside metadata, where the outline holds.
	`{"metadata":{"labels":{"a":"b"},"name":tru,"annotations":{"meshrelay.io/policies":"P/ns/a"}}}`,
	`{"metadata":{"labels":{"a":"b"},"x":{"y":1,},"annotations":{"meshrelay.io/policies":"P/ns/a"}}}`,
	`{"metadata":{"labels":{"a":"b"},"annotations":{"x":"a\qb","meshrelay.io/policies":"P/ns/a"}}}`,
	`{"metadata":{"labels":{"a":"b"},"annotations":{"x":"a\u00zz","meshrelay.io/policies":"P/ns/a"}}}`,
	"{\"metadata\":{\"labels\":{\"a\":\"b\"},\"annotations\":{\"x\":\"a\x01b\",\"meshrelay.io/policies\":\"P/ns/a\"}}}",
	`{"metadata":{"labels":{"a":"b"},"generation":01,"annotations":{"meshrelay.io/policies":"P/ns/a"}}}`,
	`{"metadata":{"labels":{"a":"b"},"annotations":{"meshrelay.io/policies":"P/ns/a"}},"metadata":{"labels":{"a":"c"},"x":[1 2]}}`,
	`{"spec":{"a":1,},"metadata":{"labels":{"a":"b"},"annotations":{"meshrelay.io/policies":"P/ns/a"}}}`,
}

// outputCorpus returns the Kubernetes objects of the repository's test
// data (the plugins' inputs and golden outputs, the corpora under
// testdata/) as JSON, each also with its members in reverse order (so that
// metadata comes after spec).
func outputCorpus(t testing.TB) [][]byte {
	t.Helper()
	var bodies [][]byte
	var collect func(v any)
	collect = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if _, ok := v["kind"]; ok {
				b, err := json.Marshal(v)
				if err != nil {
					t.Fatal(err)
				}
				bodies = append(bodies, b, reversedObject(t, v))
			}
			for _, e := range v {
				collect(e)
			}
		case []any:
			for _, e := range v {
				collect(e)
			}
		}
	}
	for _, root := range []string{"../../plugins", "../../testdata"} {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.Contains(path, "testdata") || filepath.Ext(path) != ".yaml" && filepath.Ext(path) != ".json" {
				return err
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for doc := range strings.SplitSeq(string(data), "\n---") {
				var v any
				if j, err := yaml.YAMLToJSON([]byte(doc)); err == nil && json.Unmarshal(j, &v) == nil {
					collect(v)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(bodies) < 100 {
		t.Fatalf("found %d objects in the test data, want more", len(bodies))
	}
	return bodies
}

// reversedObject encodes the object v with its members in reverse key
// order.
func reversedObject(t testing.TB, v map[string]any) []byte {
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range v {
			if !yield(k) {
				return
			}
		}
	})
	slices.Reverse(keys)
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		vb, err := json.Marshal(v[k])
		if err != nil {
			t.Fatal(err)
		}
		b.Write(kb)
		b.WriteByte(':')
		b.Write(vb)
	}
	b.WriteByte('}')
	return b.Bytes()
}

// checkDecodeOutputMeta fails t when decodeOutputMeta and json.Unmarshal
// disagree on a valid body or on one that is not an object's outline. Of
// a body with invalid JSON inside it but an object's outline (which the
// plugin host refuses), decodeOutputMeta must return what json.Unmarshal
// does of its "metadata" members alone: nothing when one of them is not
// valid JSON.
func checkDecodeOutputMeta(t *testing.T, body []byte) {
	t.Helper()
	policies, labels := decodeOutputMeta(body)
	var metadata bytes.Buffer
	metadata.WriteByte('{')
	var members int
	var last []byte
	outline, _ := snapshot.ObjectMembers(body, func(key, value []byte) error {
		if bytes.EqualFold(key, []byte("metadata")) {
			members++
			last = value
			if metadata.Len() > 1 {
				metadata.WriteByte(',')
			}
			metadata.WriteString(`"metadata":`)
			metadata.Write(value)
		}
		return nil
	})
	metadata.WriteByte('}')
	want := body
	if !json.Valid(body) && outline {
		want = metadata.Bytes()
	}
	wantPolicies, wantLabels := referenceDecodeOutputMeta(want)
	if policies != wantPolicies || !reflect.DeepEqual(labels, wantLabels) || (labels == nil) != (wantLabels == nil) {
		t.Errorf("decodeOutputMeta(%q) = %q, %#v; json.Unmarshal decodes %q, %#v", body, policies, labels, wantPolicies, wantLabels)
	}
	// The located member alone decodes to the same as the walk of the
	// whole body, and is the one "metadata" member the outline has.
	span := locateMetadata(body)
	walkPolicies, walkLabels := decodeMetadataAt(body, metaSpan{})
	if walkPolicies != wantPolicies || !reflect.DeepEqual(walkLabels, wantLabels) || (walkLabels == nil) != (wantLabels == nil) {
		t.Errorf("decodeMetadataAt(%q) walking the body = %q, %#v; json.Unmarshal decodes %q, %#v", body, walkPolicies, walkLabels, wantPolicies, wantLabels)
	}
	if single := outline && members == 1; span.none() == single || single && !bytes.Equal(span.of(body), last) {
		t.Errorf("locateMetadata(%q) = %+v, but the outline (well formed: %v) has %d metadata members, the last %q", body, span, outline, members, last)
	}
}

func TestDecodeOutputMetaIsUnmarshal(t *testing.T) {
	for _, b := range craftedOutputBodies {
		checkDecodeOutputMeta(t, []byte(b))
	}
	for _, b := range outputCorpus(t) {
		checkDecodeOutputMeta(t, b)
	}
}

func FuzzDecodeOutputMeta(f *testing.F) {
	for _, b := range craftedOutputBodies {
		f.Add([]byte(b))
	}
	for _, b := range outputCorpus(f) {
		f.Add(b)
	}
	f.Fuzz(checkDecodeOutputMeta)
}

func BenchmarkDecodeOutputMeta(b *testing.B) {
	// The largest AuthorizationPolicy of the istio plugin's golden
	// outputs, encoded as the SDK does: metadata before spec.
	var body []byte
	for _, o := range outputCorpus(b) {
		if bytes.HasPrefix(o, []byte(`{"apiVersion":"security.istio.io/`)) && bytes.Contains(o, []byte(`"kind":"AuthorizationPolicy"`)) && len(o) > len(body) {
			body = o
		}
	}
	if body == nil {
		b.Fatal("no AuthorizationPolicy in the test data")
	}
	for _, body := range []struct {
		name string
		body []byte
	}{{"AuthorizationPolicy", body}, {"Annotated", annotatedOutput(b, body)}} {
		for _, bc := range []struct {
			name   string
			decode func([]byte) (string, map[string]string)
		}{{"Unmarshal", referenceDecodeOutputMeta}, {"decodeOutputMeta", decodeOutputMeta}} {
			b.Run(body.name+"/"+bc.name, func(b *testing.B) {
				b.SetBytes(int64(len(body.body)))
				b.ReportAllocs()
				for b.Loop() {
					if _, labels := bc.decode(body.body); labels == nil {
						b.Fatal("no labels")
					}
				}
			})
		}
	}
}

// annotatedOutput returns body (an object with labels) with the
// annotations an applied object commonly carries besides its parent
// policies: kubectl's last-applied-configuration (the whole object again,
// as a string) and a few short ones.
func annotatedOutput(b *testing.B, body []byte) []byte {
	var v map[string]any
	if err := json.Unmarshal(body, &v); err != nil {
		b.Fatal(err)
	}
	md := v["metadata"].(map[string]any)
	md["annotations"] = map[string]any{
		meta.PoliciesAnnotation:                            "AuthorizationPolicy/prod/allow-frontend,AuthorizationPolicy/prod/deny-all",
		"kubectl.kubernetes.io/last-applied-configuration": string(body) + "\n",
		"deployment.kubernetes.io/revision":                "7",
		"argocd.argoproj.io/tracking-id":                   "mesh:security.istio.io/AuthorizationPolicy:prod/allow-frontend",
		"meta.helm.sh/release-name":                        "mesh",
		"meta.helm.sh/release-namespace":                   "prod",
	}
	out, err := json.Marshal(v)
	if err != nil {
		b.Fatal(err)
	}
	return out
}
