package pki

import (
	"crypto/x509"
	"errors"
	"math/big"
	"net/url"
	"strings"
	"testing"
)

func TestValidateClusterName(t *testing.T) {
	for name, tc := range map[string]struct {
		in string
		ok bool
	}{
		"simple":          {in: "alpha", ok: true},
		"digits":          {in: "0", ok: true},
		"hyphen inside":   {in: "us-east-1", ok: true},
		"63 chars":        {in: strings.Repeat("a", 63), ok: true},
		"64 chars":        {in: strings.Repeat("a", 64)},
		"empty":           {in: ""},
		"upper":           {in: "Alpha"},
		"leading hyphen":  {in: "-a"},
		"trailing hyphen": {in: "a-"},
		"dot":             {in: "a.b"},
		"slash":           {in: "a/b"},
		"underscore":      {in: "a_b"},
		"space":           {in: "a b"},
		"percent":         {in: "a%2Fb"},
		"unicode":         {in: "ålpha"},
		"nul":             {in: "a\x00"},
	} {
		t.Run(name, func(t *testing.T) {
			err := ValidateClusterName(tc.in)
			if (err == nil) != tc.ok {
				t.Errorf("ValidateClusterName(%q) = %v, want ok=%v", tc.in, err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalidClusterName) {
				t.Errorf("ValidateClusterName(%q) = %v, want it to wrap ErrInvalidClusterName", tc.in, err)
			}
		})
	}
}

func TestClusterFromCert(t *testing.T) {
	uri := func(s string) *url.URL {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatalf("url.Parse(%q) = %v", s, err)
		}
		return u
	}
	for name, tc := range map[string]struct {
		uris []*url.URL
		want string
	}{
		"valid":            {uris: []*url.URL{uri("spiffe://meshrelay/cluster/alpha")}, want: "alpha"},
		"none":             {},
		"two":              {uris: []*url.URL{uri("spiffe://meshrelay/cluster/alpha"), uri("spiffe://meshrelay/cluster/beta")}},
		"valid and other":  {uris: []*url.URL{uri("spiffe://meshrelay/cluster/alpha"), uri("https://example.com")}},
		"other domain":     {uris: []*url.URL{uri("spiffe://cluster.local/cluster/alpha")}},
		"other scheme":     {uris: []*url.URL{uri("https://meshrelay/cluster/alpha")}},
		"upper scheme":     {uris: []*url.URL{uri("SPIFFE://meshrelay/cluster/alpha")}, want: "alpha"}, // schemes are case-insensitive; url.Parse lowers them
		"other path":       {uris: []*url.URL{uri("spiffe://meshrelay/ns/alpha")}},
		"sub path":         {uris: []*url.URL{uri("spiffe://meshrelay/cluster/alpha/x")}},
		"dot segment":      {uris: []*url.URL{uri("spiffe://meshrelay/cluster/../cluster/alpha")}},
		"escaped slash":    {uris: []*url.URL{uri("spiffe://meshrelay/cluster/al%2Fpha")}},
		"escaped letter":   {uris: []*url.URL{uri("spiffe://meshrelay/cluster/%61lpha")}},
		"query":            {uris: []*url.URL{uri("spiffe://meshrelay/cluster/alpha?x=1")}},
		"empty query":      {uris: []*url.URL{uri("spiffe://meshrelay/cluster/alpha?")}},
		"fragment":         {uris: []*url.URL{uri("spiffe://meshrelay/cluster/alpha#b")}},
		"user":             {uris: []*url.URL{uri("spiffe://u@meshrelay/cluster/alpha")}},
		"port":             {uris: []*url.URL{uri("spiffe://meshrelay:1/cluster/alpha")}},
		"empty name":       {uris: []*url.URL{uri("spiffe://meshrelay/cluster/")}},
		"invalid name":     {uris: []*url.URL{uri("spiffe://meshrelay/cluster/Alpha")}},
		"opaque":           {uris: []*url.URL{uri("spiffe:meshrelay/cluster/alpha")}},
		"nil URI":          {uris: []*url.URL{nil}},
		"trailing slash":   {uris: []*url.URL{uri("spiffe://meshrelay/cluster/alpha/")}},
		"double slash":     {uris: []*url.URL{uri("spiffe://meshrelay//cluster/alpha")}},
		"upper host":       {uris: []*url.URL{uri("spiffe://MESHRELAY/cluster/alpha")}},
		"name too long":    {uris: []*url.URL{uri("spiffe://meshrelay/cluster/" + strings.Repeat("a", 64))}},
		"63 char name":     {uris: []*url.URL{uri("spiffe://meshrelay/cluster/" + strings.Repeat("a", 63))}, want: strings.Repeat("a", 63)},
		"hyphenated valid": {uris: []*url.URL{uri("spiffe://meshrelay/cluster/eu-west-2")}, want: "eu-west-2"},
	} {
		t.Run(name, func(t *testing.T) {
			c := &x509.Certificate{SerialNumber: big.NewInt(7), URIs: tc.uris}
			got, err := ClusterFromCert(c)
			if tc.want == "" {
				if err == nil || !errors.Is(err, ErrInvalidIdentity) {
					t.Errorf("ClusterFromCert(%v) = %q, %v; want ErrInvalidIdentity", tc.uris, got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("ClusterFromCert(%v) = %q, %v; want %q", tc.uris, got, err, tc.want)
			}
		})
	}
	if _, err := ClusterFromCert(nil); !errors.Is(err, ErrInvalidIdentity) {
		t.Errorf("ClusterFromCert(nil) = %v, want ErrInvalidIdentity", err)
	}
}

// FuzzClusterFromURI checks that any URI accepted as an identity is exactly
// the canonical URI of a valid cluster name.
func FuzzClusterFromURI(f *testing.F) {
	for _, s := range []string{
		"spiffe://meshrelay/cluster/alpha",
		"spiffe://meshrelay/cluster/al%2Fpha",
		"spiffe://meshrelay/cluster/../x",
		"spiffe://meshrelay:1/cluster/a?b#c",
		"spiffe:meshrelay/cluster/a",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := url.Parse(s)
		if err != nil {
			return
		}
		name, err := ClusterFromCert(&x509.Certificate{URIs: []*url.URL{u}})
		if err != nil {
			return
		}
		if err := ValidateClusterName(name); err != nil {
			t.Fatalf("ClusterFromCert(%q) accepted invalid name %q: %v", s, name, err)
		}
		if u.String() != ClusterURI(name) {
			t.Fatalf("ClusterFromCert(%q) = %q, but the URI is not %q", s, name, ClusterURI(name))
		}
	})
}
