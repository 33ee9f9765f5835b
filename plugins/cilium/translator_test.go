package cilium

import (
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

func TestPathRegex(t *testing.T) {
	tests := map[string]struct {
		path        string
		want        string
		match, miss []string
	}{
		"exact":          {"/health", "^/health$", []string{"/health"}, []string{"/health/x", "/healthz", "/x/health"}},
		"prefix":         {"/reviews*", "^/reviews.*", []string{"/reviews", "/reviews/1", "/reviewsx"}, []string{"/x/reviews"}},
		"root prefix":    {"/*", "^/.*", []string{"/", "/a/b"}, nil},
		"metacharacters": {"/v1.0/a+b", `^/v1\.0/a\+b$`, []string{"/v1.0/a+b"}, []string{"/v1x0/aab"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := PathRegex(tc.path)
			if got != tc.want {
				t.Fatalf("PathRegex(%q) = %q, want %q", tc.path, got, tc.want)
			}
			re := regexp.MustCompile(got)
			for _, p := range tc.match {
				if !re.MatchString(p) {
					t.Errorf("PathRegex(%q) = %q does not match %q", tc.path, got, p)
				}
			}
			for _, p := range tc.miss {
				if re.MatchString(p) {
					t.Errorf("PathRegex(%q) = %q matches %q", tc.path, got, p)
				}
			}
		})
	}
}

func TestHTTPRules(t *testing.T) {
	got := httpRules([]policyv1alpha1.HTTPMethod{"POST", "GET"}, []string{"/b*", "/a"})
	want := []httpRule{
		{Method: "GET", Path: "^/a$"}, {Method: "GET", Path: "^/b.*"},
		{Method: "POST", Path: "^/a$"}, {Method: "POST", Path: "^/b.*"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("httpRules() mismatch (-want +got):\n%s", diff)
	}
	if got := httpRules(nil, nil); got != nil {
		t.Errorf("httpRules(nil, nil) = %v, want nil", got)
	}
	if diff := cmp.Diff([]httpRule{{Method: "GET"}}, httpRules([]policyv1alpha1.HTTPMethod{"GET"}, nil)); diff != "" {
		t.Errorf("httpRules(GET) mismatch (-want +got):\n%s", diff)
	}
}

func TestObjectName(t *testing.T) {
	ap := func(ns, name, source string) *policyv1alpha1.AccessPolicy {
		p := &policyv1alpha1.AccessPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		if source != "" {
			p.Annotations = map[string]string{"meshrelay.io/source-cluster": source}
		}
		return p
	}
	long := strings.Repeat("a", 200)
	policies := []*policyv1alpha1.AccessPolicy{
		ap("a-b", "c", ""), ap("a", "b-c", ""), ap("a", "b-c", "east"),
		ap("ns", long, ""), ap("ns", long+"b", ""), ap("ns", "x.y", ""),
	}
	seen := map[string]bool{}
	for _, p := range policies {
		name := objectName("access", p)
		if len(name) > maxNameLength {
			t.Errorf("objectName(%s/%s) = %q, longer than %d", p.Namespace, p.Name, name, maxNameLength)
		}
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			t.Errorf("objectName(%s/%s) = %q: %v", p.Namespace, p.Name, name, errs)
		}
		if seen[name] {
			t.Errorf("objectName(%s/%s) = %q, given to another policy too", p.Namespace, p.Name, name)
		}
		seen[name] = true
		if again := objectName("access", p); again != name {
			t.Errorf("objectName(%s/%s) = %q then %q", p.Namespace, p.Name, name, again)
		}
	}
}

func TestAffinity(t *testing.T) {
	clusters := map[string]bool{"east": true, "west": true, "south": true}
	tests := map[string]struct {
		failover *policyv1alpha1.Failover
		cluster  string
		want     string
	}{
		"no failover":              {nil, "east", AffinityNone},
		"locality":                 {&policyv1alpha1.Failover{Mode: policyv1alpha1.FailoverLocality}, "west", AffinityLocal},
		"priority first":           {&policyv1alpha1.Failover{Mode: policyv1alpha1.FailoverPriority, Priority: []string{"east", "west"}}, "east", AffinityLocal},
		"priority second":          {&policyv1alpha1.Failover{Mode: policyv1alpha1.FailoverPriority, Priority: []string{"east", "west"}}, "west", AffinityRemote},
		"priority unlisted":        {&policyv1alpha1.Failover{Mode: policyv1alpha1.FailoverPriority, Priority: []string{"east", "west"}}, "south", AffinityRemote},
		"priority first elsewhere": {&policyv1alpha1.Failover{Mode: policyv1alpha1.FailoverPriority, Priority: []string{"north", "west"}}, "west", AffinityLocal},
		"priority none of them":    {&policyv1alpha1.Failover{Mode: policyv1alpha1.FailoverPriority, Priority: []string{"north"}}, "west", AffinityNone},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := affinity(tc.failover, tc.cluster, clusters); got != tc.want {
				t.Errorf("affinity(%v, %q) = %q, want %q", tc.failover, tc.cluster, got, tc.want)
			}
		})
	}
}

func TestIdentitySelector(t *testing.T) {
	tests := map[string]struct {
		namespace, sa string
		clusters      []string
		want          selector
	}{
		"service account in one cluster": {"bookinfo", "productpage", []string{"east"}, selector{
			MatchLabels: map[string]string{LabelNamespace: "bookinfo", LabelServiceAccount: "productpage", LabelCluster: "east"},
		}},
		"namespace in any cluster": {"bookinfo", "", nil, selector{
			MatchLabels:      map[string]string{LabelNamespace: "bookinfo"},
			MatchExpressions: []requirement{{Key: LabelCluster, Operator: operatorExists}},
		}},
		"clusters, any namespace": {"", "", []string{"west", "east", "west"}, selector{
			MatchExpressions: []requirement{
				{Key: LabelNamespace, Operator: operatorExists},
				{Key: LabelCluster, Operator: operatorIn, Values: []string{"east", "west"}},
			},
		}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := identitySelector(tc.namespace, tc.sa, tc.clusters)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("identitySelector(%q, %q, %v) mismatch (-want +got):\n%s", tc.namespace, tc.sa, tc.clusters, diff)
			}
		})
	}
}
