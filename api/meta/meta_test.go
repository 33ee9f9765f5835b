package meta

import (
	"slices"
	"testing"

	translatorv1 "github.com/meshrelay/meshrelay/proto/translator/v1"
	"google.golang.org/protobuf/proto"
)

func TestSeverity(t *testing.T) {
	for sev, want := range map[Severity]struct {
		text    string
		isError bool
	}{
		SeverityError:   {"error", true},
		SeverityWarning: {"warning", false},
		SeverityInfo:    {"info", false},
		"":              {"error", true},
	} {
		if got := sev.String(); got != want.text {
			t.Errorf("Severity(%q).String() = %q, want %q", string(sev), got, want.text)
		}
		if got := sev.IsError(); got != want.isError {
			t.Errorf("Severity(%q).IsError() = %v, want %v", string(sev), got, want.isError)
		}
	}
}

func TestPolicyRef(t *testing.T) {
	mgmt := PolicyRef{Kind: "TrafficPolicy", Namespace: "bookinfo", Name: "reviews"}
	local := PolicyRef{Kind: "TrafficPolicy", Namespace: "bookinfo", Name: "reviews", Cluster: "east"}
	if got, want := mgmt.String(), "TrafficPolicy/bookinfo/reviews"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if got, want := local.String(), "TrafficPolicy/bookinfo/reviews@east"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if local.Key() != mgmt.Key() {
		t.Errorf("Key() = %q and %q, want the same key without the cluster", local.Key(), mgmt.Key())
	}
	refs := []PolicyRef{
		local,
		{Kind: "AccessPolicy", Namespace: "z", Name: "a"},
		mgmt,
		{Kind: "TrafficPolicy", Namespace: "bookinfo", Name: "reviews-v2"},
		{Kind: "TrafficPolicy", Namespace: "a", Name: "z"},
	}
	slices.SortFunc(refs, PolicyRef.Compare)
	want := []string{"AccessPolicy/z/a", "TrafficPolicy/a/z", "TrafficPolicy/bookinfo/reviews", "TrafficPolicy/bookinfo/reviews@east", "TrafficPolicy/bookinfo/reviews-v2"}
	var got []string
	for _, r := range refs {
		got = append(got, r.String())
	}
	if !slices.Equal(got, want) {
		t.Errorf("sorted = %q, want %q", got, want)
	}
}

func TestDiagnosticProto(t *testing.T) {
	ref := PolicyRef{Kind: "AccessPolicy", Namespace: "ns", Name: "allow", Cluster: "west"}
	for name, tc := range map[string]struct {
		in     Diagnostic
		wire   translatorv1.Diagnostic_Severity
		backTo Severity
	}{
		"error":                     {Diagnostic{Severity: SeverityError, Summary: "s", Detail: "d", Path: "spec.x", Policy: ref, Cluster: "c"}, translatorv1.Diagnostic_SEVERITY_ERROR, SeverityError},
		"warning":                   {Diagnostic{Severity: SeverityWarning, Summary: "s", Policy: ref}, translatorv1.Diagnostic_SEVERITY_WARNING, SeverityWarning},
		"info travels as a warning": {Diagnostic{Severity: SeverityInfo, Summary: "s", Policy: ref}, translatorv1.Diagnostic_SEVERITY_WARNING, SeverityWarning},
		"zero is an error":          {Diagnostic{Summary: "s", Policy: ref}, translatorv1.Diagnostic_SEVERITY_ERROR, SeverityError},
	} {
		t.Run(name, func(t *testing.T) {
			in := tc.in
			in.Plugin = "not sent"
			wire := DiagnosticToProto(in)
			if wire.GetSeverity() != tc.wire {
				t.Errorf("DiagnosticToProto(%+v).Severity = %v, want %v", in, wire.GetSeverity(), tc.wire)
			}
			raw, err := proto.Marshal(wire)
			if err != nil {
				t.Fatal(err)
			}
			var decoded translatorv1.Diagnostic
			if err := proto.Unmarshal(raw, &decoded); err != nil {
				t.Fatal(err)
			}
			got := DiagnosticFromProto(&decoded, "istio")
			want := tc.in
			want.Severity, want.Plugin = tc.backTo, "istio"
			if got != want {
				t.Errorf("round trip = %+v, want %+v", got, want)
			}
		})
	}
}

func TestPolicies(t *testing.T) {
	keys := []string{"AccessPolicy/ns/a", "TrafficPolicy/ns/b"}
	v := JoinPolicies(keys)
	if v != "AccessPolicy/ns/a,TrafficPolicy/ns/b" {
		t.Errorf("JoinPolicies(%q) = %q", keys, v)
	}
	if got := SplitPolicies(v); !slices.Equal(got, keys) {
		t.Errorf("SplitPolicies(%q) = %q, want %q", v, got, keys)
	}
	if got := SplitPolicies(""); got != nil {
		t.Errorf("SplitPolicies(\"\") = %q, want none", got)
	}
}
