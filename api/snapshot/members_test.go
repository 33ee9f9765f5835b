package snapshot

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// referenceDecodeHeader is DecodeHeader as json.Unmarshal alone: what
// DecodeHeader must return for every body.
func referenceDecodeHeader(body []byte) (Header, error) {
	var h Header
	err := json.Unmarshal(body, &h)
	return h, err
}

// craftedBodies are bodies that tell a decoder reading only part of an
// object from json.Unmarshal.
var craftedBodies = []string{
	``,
	` `,
	`null`,
	`true`,
	`1`,
	`"s"`,
	`[]`,
	`[{"kind":"A"}]`,
	`{}`,
	` { } `,
	`{}{}`,
	`{} x`,
	`{`,
	`}`,
	`{"kind"}`,
	`{"kind":}`,
	`{"kind":"A",}`,
	`{"kind":"A" "x":1}`,
	`{"kind":"A"`,
	`{"kind":"A"}x`,
	`{kind:"A"}`,
	`{"spec":{"metadata":{"name":"inner","labels":{"a":"b"}}},"kind":"A"}`,
	`{"spec":{"x":"}"},"metadata":{"name":"after","labels":{"a":"b"},"annotations":{"meshrelay.io/policies":"P/ns/a"}}}`,
	`{"metadata":{"name":"first","labels":{"a":"1"}},"metadata":{"namespace":"ns","labels":{"b":"2"}}}`,
	`{"metadata":{"name":"first","labels":{"a":"1"}},"spec":{},"metadata":null}`,
	`{"metadata":{"labels":{"a":"1"}},"metadata":{"labels":null}}`,
	`{"kind":"A","kind":"B","apiVersion":"v1","apiVersion":"v2"}`,
	`{"Kind":"A","KIND":"B","ApiVersion":"v1"}`,
	`{"\u212aind":"Kelvin","metadata":{"name\u0073pace":"ns","namespace":"x","name\u017fpace":"long-s"}}`,
	`{"k\u0069nd":"escaped","m\u0065tadata":{"labels":{"a":"b"}}}`,
	`{"kind":"A\"B\\","metadata":{"name":"\\\"","labels":{"\\":"\""}}}`,
	`{"kind":1}`,
	`{"kind":null,"metadata":null}`,
	`{"kind":"A","metadata":"x"}`,
	`{"metadata":{"name":1}}`,
	`{"metadata":{"labels":{"a":1}},"kind":"A"}`,
	`{"metadata":{"labels":[]}}`,
	`{"kind":"A","spec":[1,2,{"a":[]}],"n":-1.5e3,"t":true,"f":false,"z":null}`,
	`{"kind":"A","spec":{"a":"\u0000"}}`,
	"{\"kind\":\"A\",\"spec\":\"\x01\"}",
	"{\"kind\":\"\xff\"}",
	`{"kind":"A","spec":{"a":1,}}`,
	`{"kind":"A","spec":[1,,2]}`,
	`{"kind":"A","spec":{]}`,
	`{"kind":"A","spec":tru}`,
	`{"metadata":{"labels":{"a":"b"}},"spec":{"bad":01}}`,
	"\t{\n\"kind\" : \"A\" ,\r\n\"metadata\" :{ \"name\" : \"n\" } }\n",
	`{"metadata":{"labels":{}}}`,
	`{"metadata":{"labels":{"a":null,"b":"2"}}}`,
	`{"metadata":{"labels":{"a":"1","a":"2"}}}`,
	`{"metadata":{"Labels":{"a":"1"},"LABELS":{"b":"2"}}}`,
	`{"metadata":{"labels":{"a":"1"}},"Metadata":{"labels":{"b":"2"}}}`,
	`{"metadata":{"labels":null,"labels":{"b":"2"}}}`,
	`{"metadata":{"labels":{"b\u0041":"\u00e9\n"}}}`,
	`{"metadata":{"labels":{"a":true}}}`,
	`{"metadata":{"labels":"a"}}`,
	`{"metadata":[]}`,
	"{\"metadata\":{\"labels\":{\"a\":\"\xff\"}}}",
	"{\"metadata\":{\"labels\":{\"\xff\":\"a\"}}}",
}

// corpusBodies returns the Kubernetes objects of the repository's test
// data (the plugins' inputs and golden outputs, the corpora under
// testdata/) as JSON, each also with its members in reverse order (so that
// metadata comes after spec), and every file's whole document.
func corpusBodies(t testing.TB) [][]byte {
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
				bodies = append(bodies, b, reversed(t, v))
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
			if err != nil || d.IsDir() || !strings.Contains(path, "testdata") {
				return err
			}
			if ext := filepath.Ext(path); ext != ".yaml" && ext != ".json" {
				return nil
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for doc := range strings.SplitSeq(string(data), "\n---") {
				j, err := yaml.YAMLToJSON([]byte(doc))
				if err != nil {
					continue
				}
				bodies = append(bodies, j)
				var v any
				if json.Unmarshal(j, &v) == nil {
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
		t.Fatalf("found %d bodies in the test data, want more", len(bodies))
	}
	return bodies
}

// reversed encodes the object v with its members in reverse key order.
func reversed(t testing.TB, v map[string]any) []byte {
	keys := make([]string, 0, len(v))
	for k := range v {
		keys = append(keys, k)
	}
	slices.Sort(keys)
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

// checkDecodeHeader fails t when DecodeHeader and json.Unmarshal disagree
// on body.
func checkDecodeHeader(t *testing.T, body []byte) {
	t.Helper()
	got, gotErr := DecodeHeader(body)
	want, wantErr := referenceDecodeHeader(body)
	if got != want {
		t.Errorf("DecodeHeader(%q) = %+v, json.Unmarshal decodes %+v", body, got, want)
	}
	if !sameError(gotErr, wantErr) {
		t.Errorf("DecodeHeader(%q) error = %v, json.Unmarshal's %v", body, gotErr, wantErr)
	}
}

// sameError reports whether got is want's error: both nil, or of one type
// with one message.
func sameError(got, want error) bool {
	if got == nil || want == nil {
		return got == want
	}
	return got.Error() == want.Error() && reflect.TypeOf(got) == reflect.TypeOf(want)
}

// seedBodies are the crafted bodies and the corpus's, which the decoders'
// tests check and their fuzz targets start from.
func seedBodies(tb testing.TB) [][]byte {
	var bodies [][]byte
	for _, b := range craftedBodies {
		bodies = append(bodies, []byte(b))
	}
	return append(bodies, corpusBodies(tb)...)
}

func TestDecodeHeaderIsUnmarshal(t *testing.T) {
	for _, b := range seedBodies(t) {
		checkDecodeHeader(t, b)
	}
}

// checkDecodeLabels fails t when DecodeLabels and json.Unmarshal disagree
// on body.
func checkDecodeLabels(t *testing.T, body []byte) {
	t.Helper()
	got, gotErr := DecodeLabels(body)
	var m struct {
		Metadata struct {
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
	}
	wantErr := json.Unmarshal(body, &m)
	if want := m.Metadata.Labels; !reflect.DeepEqual(got, want) {
		t.Errorf("DecodeLabels(%q) = %#v, json.Unmarshal decodes %#v", body, got, want)
	}
	if !sameError(gotErr, wantErr) {
		t.Errorf("DecodeLabels(%q) error = %v, json.Unmarshal's %v", body, gotErr, wantErr)
	}
}

func TestDecodeLabelsIsUnmarshal(t *testing.T) {
	for _, b := range seedBodies(t) {
		checkDecodeLabels(t, b)
	}
}

func FuzzDecodeLabels(f *testing.F) {
	for _, b := range seedBodies(f) {
		f.Add(b)
	}
	f.Fuzz(checkDecodeLabels)
}

func FuzzDecodeHeader(f *testing.F) {
	for _, b := range seedBodies(f) {
		f.Add(b)
	}
	f.Fuzz(checkDecodeHeader)
}

// TestObjectMembersOutline checks that ObjectMembers yields the members
// json.Decoder reads for valid JSON, refusing what is not an object; of
// invalid JSON it reads only the outline, so there it need only not fail.
func TestObjectMembersOutline(t *testing.T) {
	bodies := corpusBodies(t)
	for _, b := range craftedBodies {
		bodies = append(bodies, []byte(b))
	}
	for _, body := range bodies {
		var got []string
		ok, err := ObjectMembers(body, func(key, value []byte) error {
			got = append(got, string(key)+"="+string(value))
			return nil
		})
		if err != nil {
			t.Fatalf("ObjectMembers(%q) = %v with no error from member", body, err)
		}
		if !json.Valid(body) {
			continue
		}
		want, object := decoderMembers(body)
		if ok != object || ok && !slices.Equal(got, want) {
			t.Errorf("ObjectMembers(%q) = %v, %q; json.Decoder reads %v, %q", body, ok, got, object, want)
		}
	}
	stop := errors.New("stop")
	calls := 0
	ok, err := ObjectMembers([]byte(`{"a":1,"b":2}`), func(key, value []byte) error {
		calls++
		return stop
	})
	if !ok || err != stop || calls != 1 {
		t.Errorf("ObjectMembers with a failing member = %v, %v after %d calls, want true, stop after 1", ok, err, calls)
	}
}

// decoderMembers returns the members of the valid JSON body as
// json.Decoder reads them, and false when it is not an object.
func decoderMembers(body []byte) ([]string, bool) {
	d := json.NewDecoder(bytes.NewReader(body))
	if tok, err := d.Token(); err != nil || tok != json.Delim('{') {
		return nil, false
	}
	var members []string
	for d.More() {
		key, _ := d.Token()
		var v json.RawMessage
		if err := d.Decode(&v); err != nil {
			return nil, false
		}
		members = append(members, key.(string)+"="+string(v))
	}
	return members, true
}

func BenchmarkDecodeHeader(b *testing.B) {
	body := benchmarkBody(b)
	for _, bc := range []struct {
		name   string
		decode func([]byte) (Header, error)
	}{{"Unmarshal", referenceDecodeHeader}, {"DecodeHeader", DecodeHeader}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bc.decode(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// benchmarkBody is the largest AuthorizationPolicy of the istio plugin's
// golden outputs.
func benchmarkBody(tb testing.TB) []byte {
	var best []byte
	for _, body := range corpusBodies(tb) {
		h, err := referenceDecodeHeader(body)
		if err == nil && h.Kind == "AuthorizationPolicy" && bytes.HasPrefix(body, []byte(`{"apiVersion"`)) && len(body) > len(best) {
			best = body
		}
	}
	if best == nil {
		tb.Fatal("no AuthorizationPolicy in the test data")
	}
	return best
}

// BenchmarkDecodeLabels compares DecodeLabels with json.Unmarshal on a
// Service and an EndpointSlice as discovery reports them: the SDK reads
// the labels of each changed Service and EndpointSlice of every cluster.
//
//	go test -run '^$' -bench DecodeLabels ./api/snapshot/
func BenchmarkDecodeLabels(b *testing.B) {
	bodies := map[string]string{
		"Service": `{"apiVersion":"v1","kind":"Service","metadata":{"name":"svc-7","namespace":"shop","labels":{"app":"svc-7","tier":"backend"},` +
			`"annotations":{"meshrelay.io/export":"true"}},"spec":{"selector":{"app":"svc-7"},"ports":[{"name":"http","port":80,"protocol":"TCP","targetPort":8080},` +
			`{"name":"grpc","port":9090,"protocol":"TCP","targetPort":"grpc"}],"type":"ClusterIP","clusterIP":"10.96.12.7"}}`,
		"EndpointSlice": `{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice","metadata":{"name":"svc-7-x2k4","namespace":"shop",` +
			`"labels":{"kubernetes.io/service-name":"svc-7","endpointslice.kubernetes.io/managed-by":"endpointslice-controller.k8s.io"}},` +
			`"addressType":"IPv4","ports":[{"name":"http","port":8080,"protocol":"TCP"}],"endpoints":[` +
			`{"addresses":["10.1.0.17"],"conditions":{"ready":true,"serving":true,"terminating":false},"nodeName":"node-1","zone":"zone-a","targetRef":{"kind":"Pod","name":"svc-7-6d9f-abcde","namespace":"shop"}},` +
			`{"addresses":["10.1.1.23"],"conditions":{"ready":true,"serving":true,"terminating":false},"nodeName":"node-2","zone":"zone-b","targetRef":{"kind":"Pod","name":"svc-7-6d9f-fghij","namespace":"shop"}}]}`,
	}
	for kind, body := range bodies {
		raw := []byte(body)
		b.Run(kind+"/DecodeLabels", func(b *testing.B) {
			for range b.N {
				if labels, err := DecodeLabels(raw); err != nil || len(labels) != 2 {
					b.Fatal(labels, err)
				}
			}
		})
		b.Run(kind+"/json.Unmarshal", func(b *testing.B) {
			for range b.N {
				var m struct {
					Metadata struct {
						Labels map[string]string `json:"labels"`
					} `json:"metadata"`
				}
				if err := json.Unmarshal(raw, &m); err != nil || len(m.Metadata.Labels) != 2 {
					b.Fatal(m, err)
				}
			}
		})
	}
}
