package snapshot

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
)

// validCases are bodies on every edge of the JSON grammar, valid or not.
var validCases = []string{
	``, ` `, `{}`, `[]`, ` { } `, `{"a":1}`, `{"a":1,}`, `{,}`, `[1,]`, `[,1]`, `[1 2]`, `{"a" 1}`, `{"a":}`,
	`{1:2}`, `{"a":1 "b":2}`, `"x"`, `"`, `"\"`, `"\\"`, `"\/\b\f\n\r\t"`, `"\u00e9"`, `"\u00E9"`, `"\u00g9"`,
	`"\u00"`, `"\x"`, "\"a\x01b\"", "\"a\x7fb\"", "\"\xff\xfe\"", "\"tab\there\"", `0`, `-0`, `01`, `-`, `1.`,
	`1.5`, `.5`, `1e`, `1e+`, `1e+5`, `1E-5`, `-1.5e10`, `1.5.5`, `+1`, `true`, `tru`, `truex`, `false`, `null`,
	`nul`, `NULL`, `[true,false,null]`, `{"a":[{"b":[]}],"c":{}}`, `{"a":1}}`, `[[]`, `[]]`, `{"a":1} x`,
	"\t\n\r {\"a\" :\n1 } \r\n", `[1,2,3]` + "\x00", `{"a":"b"`, `[`, `{`, `{"a"`, `{"a":`, `{"a":1,`,
	strings.Repeat("[", 10000) + strings.Repeat("]", 10000),
	strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
	strings.Repeat(`{"a":`, 10000) + "1" + strings.Repeat("}", 10000),
	strings.Repeat(`{"a":`, 10001) + "1" + strings.Repeat("}", 10001),
}

// TestValidJSONAgreesWithEncodingJSON checks ValidJSON against json.Valid
// on the edges of the grammar and on every object of the repository's
// corpora, whole and cut short at every length up to 300 bytes.
func TestValidJSONAgreesWithEncodingJSON(t *testing.T) {
	check := func(b []byte) {
		t.Helper()
		if got, want := ValidJSON(b), json.Valid(b); got != want {
			t.Fatalf("ValidJSON(%.200q) = %v, json.Valid says %v", b, got, want)
		}
		checkValidMembers(t, b)
	}
	for _, c := range validCases {
		check([]byte(c))
	}
	bodies := corpusBodies(t)
	if len(bodies) < 100 {
		t.Fatalf("found %d corpus objects, want the repository's corpora", len(bodies))
	}
	valid := 0
	for _, b := range bodies {
		check(b)
		for n := range min(len(b), 300) {
			check(b[:n])
		}
		if ValidJSON(b) {
			valid++
		}
	}
	if valid != len(bodies) {
		t.Errorf("%d of %d corpus objects valid, want all", valid, len(bodies))
	}
}

// FuzzValidJSON checks ValidJSON against json.Valid on arbitrary bytes.
func FuzzValidJSON(f *testing.F) {
	for _, c := range validCases {
		if len(c) < 1000 {
			f.Add([]byte(c))
		}
	}
	f.Add([]byte(`{"metadata":{"name":"a","labels":{"x":"y"}},"spec":{"n":[1,-2.5e3,true,null]}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := ValidJSON(b), json.Valid(b); got != want {
			t.Fatalf("ValidJSON(%q) = %v, json.Valid says %v", b, got, want)
		}
		checkValidMembers(t, b)
	})
}

// checkValidMembers checks that validObjectMembers takes what json.Valid
// says is a valid object, and yields its members as ObjectMembers does.
func checkValidMembers(t *testing.T, b []byte) {
	t.Helper()
	collect := func(into *[]string) func(key, value []byte) error {
		return func(key, value []byte) error {
			*into = append(*into, string(key)+"="+string(value))
			return nil
		}
	}
	var got, want []string
	ok, err := validObjectMembers(b, collect(&got))
	i := skipSpace(b, 0)
	object := json.Valid(b) && i < len(b) && b[i] == '{'
	if err != nil || ok != object {
		t.Fatalf("validObjectMembers(%.200q) = %v, %v; want %v (a valid object)", b, ok, err, object)
	}
	if !ok {
		return
	}
	if _, err := ObjectMembers(b, collect(&want)); err != nil || !slices.Equal(got, want) {
		t.Fatalf("validObjectMembers(%.200q) yields %q, ObjectMembers %q, %v", b, got, want, err)
	}
}

func TestValidObjectMembersStopsAtAFailingMember(t *testing.T) {
	stop := errors.New("stop")
	calls := 0
	ok, err := validObjectMembers([]byte(`{"a":{"x":[1]},"b":2}`), func(key, value []byte) error {
		calls++
		if string(key) != "a" || string(value) != `{"x":[1]}` {
			t.Errorf("first member %s=%s, want a={\"x\":[1]}", key, value)
		}
		return stop
	})
	if ok || err != stop || calls != 1 {
		t.Errorf("validObjectMembers with a failing member = %v, %v after %d calls, want false, stop after 1", ok, err, calls)
	}
}

// BenchmarkValidJSON compares ValidJSON with json.Valid on the
// repository's corpus objects.
//
//	go test -run '^$' -bench ValidJSON ./api/snapshot/
func BenchmarkValidJSON(b *testing.B) {
	all := bytes.Join(corpusBodies(b), []byte(","))
	body := append(append([]byte("["), all...), ']')
	for name, valid := range map[string]func([]byte) bool{"ValidJSON": ValidJSON, "json.Valid": json.Valid} {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if !valid(body) {
					b.Fatal("the corpus is not valid")
				}
			}
		})
	}
}
