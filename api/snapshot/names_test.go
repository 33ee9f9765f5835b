package snapshot

import (
	"strings"
	"testing"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/validation"
)

// checkNames compares each name check with the apimachinery function it
// stands for: the same answer for ASCII, and never valid where
// apimachinery refuses.
func checkNames(t *testing.T, s string) {
	t.Helper()
	ascii := !strings.ContainsFunc(s, func(r rune) bool { return r >= utf8.RuneSelf })
	for _, c := range []struct {
		name string
		fast bool
		want []string
	}{
		{"isDNS1123Subdomain", isDNS1123Subdomain(s), validation.IsDNS1123Subdomain(s)},
		{"isDNS1123Label", isDNS1123Label(s), validation.IsDNS1123Label(s)},
		{"isDNS1035Label", isDNS1035Label(s, false), validation.IsDNS1035Label(s)},
		{"isDNS1035Label folded", isDNS1035Label(s, true), validation.IsDNS1035Label(strings.ToLower(s))},
	} {
		valid := len(c.want) == 0
		if c.fast && !valid || ascii && c.fast != valid {
			t.Errorf("%s(%q) = %v, apimachinery says %q", c.name, s, c.fast, c.want)
		}
	}
}

func TestNameChecksAgreeWithApimachinery(t *testing.T) {
	for _, s := range []string{
		"", "a", "0", "a0", "0a", "-", "a-", "-a", "a-b", "a--b", "A", "aB", "Service",
		"a.b", "a..b", ".a", "a.", "a.-b", "a-.b", "0.0", "a_b", "a b", "a\n", "é",
		"\u212aind", // the Kelvin sign, "kind" once lowercased
		strings.Repeat("a", 63), strings.Repeat("a", 64),
		strings.Repeat("a.", 126) + "a", strings.Repeat("a.", 126) + "ab",
		"networking.istio.io", "reviews-v2", "outbound|9080||reviews.default.svc.cluster.local",
	} {
		checkNames(t, s)
	}
	if !(ID{Group: "networking.istio.io", Version: "v1beta1", Kind: "VirtualService", Namespace: "bookinfo", Name: "reviews"}).objectNamesValid() {
		t.Error("a VirtualService's ID is not valid")
	}
	if (ID{Version: "v1", Kind: "Service", Namespace: "a.b", Name: "reviews"}).objectNamesValid() {
		t.Error("a namespace with a dot is valid")
	}
}

// FuzzNameChecks holds the name checks to apimachinery's answers on
// arbitrary strings.
func FuzzNameChecks(f *testing.F) {
	for _, s := range []string{"", "a-b.c", "Service", "-a", "a.", "\u212aind", strings.Repeat("a", 64)} {
		f.Add(s)
	}
	f.Fuzz(checkNames)
}

// BenchmarkValidateObject checks one agent's full input of 50 services
// (200 objects) as the server does every object an agent sends.
func BenchmarkValidateObject(b *testing.B) {
	rs := agentResources(b, 50)
	b.ReportAllocs()
	for b.Loop() {
		for _, r := range rs {
			if err := r.ValidateObject(); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkInputDelta converts one agent's full input of 50 services (200
// objects), as decoded from the wire, and checks its objects: as the
// relay did (DeltaFromProto, then ValidateObject on each upsert) and as
// it does (InputDeltaFromProto).
func BenchmarkInputDelta(b *testing.B) {
	p := wireDelta(b, 1, agentResources(b, 50))
	b.Run("separately", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			d, err := DeltaFromProto(p)
			if err != nil {
				b.Fatal(err)
			}
			for _, r := range d.Upserts {
				if err := r.ValidateObject(); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("InputDeltaFromProto", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := InputDeltaFromProto(p); err != nil {
				b.Fatal(err)
			}
		}
	})
}
