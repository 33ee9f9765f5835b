package snapshot

import (
	"strings"
	"testing"
)

func TestParseGroupKind(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    GroupKind
		wantErr string
	}{
		"group":           {in: "networking.istio.io/VirtualService", want: GroupKind{"networking.istio.io", "VirtualService"}},
		"core group":      {in: "/Service", want: GroupKind{"", "Service"}},
		"digits in kind":  {in: "cilium.io/CiliumV2Thing", want: GroupKind{"cilium.io", "CiliumV2Thing"}},
		"no slash":        {in: "Service", wantErr: "want group/Kind"},
		"version given":   {in: "networking.istio.io/v1/VirtualService", wantErr: "must start with a letter and hold letters and digits"},
		"no kind":         {in: "apps/", wantErr: "1 to 63 characters"},
		"upper case":      {in: "Apps/Deployment", wantErr: "not a DNS subdomain"},
		"empty label":     {in: "a..b/Kind", wantErr: "not a DNS subdomain"},
		"kind with digit": {in: "/1Kind", wantErr: "must start with a letter"},
		"long kind":       {in: "/" + strings.Repeat("K", 64), wantErr: "1 to 63 characters"},
		"long group":      {in: strings.Repeat("a.", 127) + "a/Kind", wantErr: "longer than 253"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseGroupKind(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), tt.in) {
					t.Fatalf("ParseGroupKind(%q) = %v, %v; want an error naming it with %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want || got.String() != tt.in {
				t.Fatalf("ParseGroupKind(%q) = %v (%q), %v; want %v", tt.in, got, got.String(), err, tt.want)
			}
		})
	}
}

func TestParseGroupKindsSortsAndBounds(t *testing.T) {
	got, err := ParseGroupKinds([]string{"b.io/B", "/Service", "b.io/B", "a.io/A"})
	if err != nil {
		t.Fatal(err)
	}
	want := []GroupKind{{"", "Service"}, {"a.io", "A"}, {"b.io", "B"}}
	if len(got) != len(want) {
		t.Fatalf("ParseGroupKinds = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("ParseGroupKinds = %v, want %v", got, want)
		}
	}
	many := make([]string, MaxKinds+1)
	for i := range many {
		many[i] = "/Service"
	}
	if _, err := ParseGroupKinds(many); err == nil {
		t.Errorf("ParseGroupKinds(%d kinds) = nil error, want more than %d refused", len(many), MaxKinds)
	}
	if _, err := ParseGroupKinds([]string{"/Service", "bad"}); err == nil || !strings.Contains(err.Error(), `"bad"`) {
		t.Errorf("ParseGroupKinds with a bad kind = %v, want an error naming it", err)
	}
}
