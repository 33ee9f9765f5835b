package snapshot

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestIDValidate(t *testing.T) {
	svc := ID{Version: "v1", Kind: "Service", Namespace: "default", Name: "reviews"}
	with := func(f func(*ID)) ID { id := svc; f(&id); return id }
	tests := map[string]struct {
		id   ID
		want string // a substring of the error, "" for none
	}{
		"a Kubernetes object": {id: svc},
		"an xDS cluster name": {id: ID{Group: "xds.meshrelay.io", Version: "v1", Kind: "Cluster", Name: "outbound|9080||reviews.default.svc.cluster.local"}},
		"an xDS listener":     {id: ID{Group: "xds.meshrelay.io", Version: "v1", Kind: "Listener", Name: "0.0.0.0_9080"}},
		"a name of 4 KiB":     {id: with(func(id *ID) { id.Name = strings.Repeat("n", MaxNameBytes) })},
		"no kind":             {id: with(func(id *ID) { id.Kind = "" }), want: "no kind"},
		"no version":          {id: with(func(id *ID) { id.Version = "" }), want: "no version"},
		"no name":             {id: with(func(id *ID) { id.Name = "" }), want: "no name"},
		"a name over 4 KiB":   {id: with(func(id *ID) { id.Name = strings.Repeat("n", MaxNameBytes+1) }), want: "name has 4097 bytes"},
		"a 15 MiB name":       {id: with(func(id *ID) { id.Name = strings.Repeat("n", 15<<20) }), want: "over the limit of 4096"},
		"a long group":        {id: with(func(id *ID) { id.Group = strings.Repeat("g", 254) }), want: "group has 254 bytes"},
		"a long version":      {id: with(func(id *ID) { id.Version = strings.Repeat("v", 254) }), want: "version has 254 bytes"},
		"a long kind":         {id: with(func(id *ID) { id.Kind = strings.Repeat("K", 254) }), want: "kind has 254 bytes"},
		"a long namespace":    {id: with(func(id *ID) { id.Namespace = strings.Repeat("n", 254) }), want: "namespace has 254 bytes"},
		"a newline":           {id: with(func(id *ID) { id.Name = "a\nb" }), want: "control character"},
		"an escape":           {id: with(func(id *ID) { id.Namespace = "\x1b]0;title\a" }), want: "control character"},
		"invalid UTF-8":       {id: with(func(id *ID) { id.Kind = "K\xff" }), want: "not valid UTF-8"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := tc.id.Validate()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("Validate() = %v, want an error containing %q", err, tc.want)
			}
			if err != nil && len(err.Error()) > 2*MaxNameBytes {
				t.Errorf("Validate() error has %d bytes: it should not repeat a long field", len(err.Error()))
			}
		})
	}
}

func TestIDValidateObject(t *testing.T) {
	svc := ID{Version: "v1", Kind: "Service", Namespace: "default", Name: "reviews"}
	with := func(f func(*ID)) ID { id := svc; f(&id); return id }
	tests := map[string]struct {
		id   ID
		want string // the field named in the error, "" for none
	}{
		"a Service":             {id: svc},
		"a cluster-scoped Node": {id: ID{Version: "v1", Kind: "Node", Name: "kind-worker.example"}},
		"a custom resource":     {id: ID{Group: "networking.istio.io", Version: "v1beta1", Kind: "VirtualService", Namespace: "bookinfo", Name: "reviews-v2"}},
		"a discovery Gateway":   {id: ID{Group: "discovery.meshrelay.io", Version: "v1alpha1", Kind: "Gateway", Namespace: "istio-system", Name: "istio-eastwestgateway"}},
		"a name of 253 bytes":   {id: with(func(id *ID) { id.Name = strings.Repeat("a", 253) })},
		"a name of 254 bytes":   {id: with(func(id *ID) { id.Name = strings.Repeat("a", 254) }), want: "name"},
		"a 15 MiB name":         {id: with(func(id *ID) { id.Name = strings.Repeat("a", 15<<20) }), want: "name has"},
		"an xDS name":           {id: with(func(id *ID) { id.Name = "outbound|9080||reviews" }), want: "name"},
		"an upper-case name":    {id: with(func(id *ID) { id.Name = "Reviews" }), want: "name"},
		"a slash in the name":   {id: with(func(id *ID) { id.Name = "a/b" }), want: "name"},
		"a dotted namespace":    {id: with(func(id *ID) { id.Namespace = "a.b" }), want: "namespace"},
		"a long namespace":      {id: with(func(id *ID) { id.Namespace = strings.Repeat("n", 64) }), want: "namespace"},
		"an upper-case group":   {id: with(func(id *ID) { id.Group = "Example.com" }), want: "group"},
		"a version of digits":   {id: with(func(id *ID) { id.Version = "1" }), want: "version"},
		"a kind with a dot":     {id: with(func(id *ID) { id.Kind = "Service.v1" }), want: "kind"},
		"a kind of 64 bytes":    {id: with(func(id *ID) { id.Kind = "K" + strings.Repeat("k", 63) }), want: "kind"},
		"a control character":   {id: with(func(id *ID) { id.Name = "a\x00" }), want: "control character"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := tc.id.ValidateObject()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("ValidateObject() = %v, want an error naming %q", err, tc.want)
			}
		})
	}
}

func TestResourceValidateObject(t *testing.T) {
	id := ID{Group: "apps", Version: "v1", Kind: "Deployment", Namespace: "bookinfo", Name: "reviews"}
	tests := map[string]struct {
		body string
		want string // a substring of the error, "" for none
	}{
		"the object":          {body: `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"reviews","namespace":"bookinfo"},"spec":{}}`},
		"no header":           {body: `{}`, want: "apiVersion"},
		"not an object":       {body: `[1]`, want: "not a Kubernetes object"},
		"another name":        {body: `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"evil.example","namespace":"bookinfo"}}`, want: "metadata.name"},
		"another namespace":   {body: `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"reviews","namespace":"other"}}`, want: "metadata.namespace"},
		"another kind":        {body: `{"apiVersion":"apps/v1","kind":"StatefulSet","metadata":{"name":"reviews","namespace":"bookinfo"}}`, want: "kind"},
		"another api version": {body: `{"apiVersion":"v1","kind":"Deployment","metadata":{"name":"reviews","namespace":"bookinfo"}}`, want: "apiVersion"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := Resource{ID: id, Body: []byte(tc.body)}.ValidateObject()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("ValidateObject() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestSizesCountIDsAndDeletes(t *testing.T) {
	id := ID{Version: "v1", Kind: "Service", Namespace: "ns", Name: strings.Repeat("a", 1000)}
	r := Resource{ID: id, Body: []byte(`{}`)}
	if got, want := r.Size(), 2+len("v1Servicens")+1000; got != want {
		t.Errorf("Resource.Size() = %d, want %d (ID and body)", got, want)
	}
	s := mustNew(t, 1, r)
	if got, want := s.Size(), r.Size(); got != want {
		t.Errorf("Snapshot.Size() = %d, want %d", got, want)
	}
	d := Delta{Version: 2, Upserts: []Resource{r}, Deletes: []ID{{Version: "v1", Kind: "Service", Name: strings.Repeat("b", 500)}}}
	if got, want := d.Size(), r.Size()+len("v1Service")+500; got != want {
		t.Errorf("Delta.Size() = %d, want %d (upserts and deletes)", got, want)
	}
}

func TestSplitBoundsDeletes(t *testing.T) {
	var rs []Resource
	for i := range 300 {
		rs = append(rs, res(t, "ConfigMap", "ns", fmt.Sprintf("configmap-with-a-longer-name-%04d", i), `{}`))
	}
	base := mustNew(t, 1, rs...)
	d := Diff(base, mustNew(t, 2, rs[0]))
	if len(d.Deletes) != 299 {
		t.Fatalf("Diff deletes %d, want 299", len(d.Deletes))
	}
	const max = 2000
	parts := Split(d, max)
	if len(parts) < d.Size()/max {
		t.Fatalf("Split into %d parts, want at least %d", len(parts), d.Size()/max)
	}
	var asm Assembler
	var whole Delta
	for i, p := range parts {
		if p.Size() > max {
			t.Errorf("part %d has %d bytes, over %d", i, p.Size(), max)
		}
		got, done, err := asm.Add(p, i == len(parts)-1)
		if err != nil {
			t.Fatal(err)
		}
		whole = got
		if i < len(parts)-1 && done {
			t.Fatalf("part %d completed the delta", i)
		}
	}
	out, err := Apply(base, whole)
	if err != nil {
		t.Fatal(err)
	}
	if out.Len() != 1 {
		t.Errorf("assembled delta leaves %d resources, want 1", out.Len())
	}
}

func TestAssemblerCountsIDsAndDeletes(t *testing.T) {
	long := func(i int) ID {
		return ID{Version: "v1", Kind: "ConfigMap", Namespace: "ns", Name: fmt.Sprintf("%04d", i) + strings.Repeat("n", MaxNameBytes-4)}
	}
	tests := map[string]struct {
		limits Limits
		part   func(i int) Delta
		want   string
	}{
		"names count in bytes": {
			limits: Limits{Bytes: 10 * MaxNameBytes},
			part: func(i int) Delta {
				return Delta{Version: 1, Full: true, Upserts: []Resource{{ID: long(i), Body: []byte(`{}`)}}}
			},
			want: "bytes",
		},
		"deletes count in bytes": {
			limits: Limits{Bytes: 10 * MaxNameBytes},
			part:   func(i int) Delta { return Delta{BaseVersion: 1, Version: 2, Deletes: []ID{long(i)}} },
			want:   "bytes",
		},
		"deletes count in resources": {
			limits: Limits{Resources: 10},
			part: func(i int) Delta {
				return Delta{BaseVersion: 1, Version: 2, Deletes: []ID{{Version: "v1", Kind: "ConfigMap", Name: fmt.Sprint("d", i)}}}
			},
			want: "resources",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			a := Assembler{Limits: tc.limits}
			var err error
			for i := range 100 {
				if _, _, err = a.Add(tc.part(i), false); err != nil {
					break
				}
			}
			var le *LimitError
			if !errors.As(err, &le) || le.Limit != tc.want {
				t.Fatalf("after 100 unfinished parts err = %v, want a LimitError naming %q", err, tc.want)
			}
			if p, b, r := a.Held(); p != 0 || b != 0 || r != 0 {
				t.Errorf("Held() = %d, %d, %d after the refusal, want nothing", p, b, r)
			}
		})
	}
}

func TestAssemblerHeld(t *testing.T) {
	var a Assembler
	r := res(t, "ConfigMap", "ns", "a", `{"x":1}`)
	d := Delta{BaseVersion: 1, Version: 2, Upserts: []Resource{r}, Deletes: []ID{{Version: "v1", Kind: "ConfigMap", Name: "b"}}}
	if _, _, err := a.Add(d, false); err != nil {
		t.Fatal(err)
	}
	if p, b, n := a.Held(); p != 1 || b != d.Size() || n != 2 {
		t.Errorf("Held() = %d, %d, %d, want 1, %d, 2", p, b, n, d.Size())
	}
	if _, done, err := a.Add(Delta{BaseVersion: 1, Version: 2}, true); err != nil || !done {
		t.Fatalf("last part: done=%v err=%v", done, err)
	}
	if p, b, n := a.Held(); p != 0 || b != 0 || n != 0 {
		t.Errorf("Held() = %d, %d, %d after completion, want nothing", p, b, n)
	}
}
