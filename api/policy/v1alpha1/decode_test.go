package v1alpha1

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const vdDoc = `apiVersion: policy.meshrelay.io/v1alpha1
kind: VirtualDestination
metadata:
  name: reviews-global
  namespace: bookinfo
spec:
  hostname: reviews.global
  ports:
  - {number: 9080, protocol: HTTP}
  services:
  - {cluster: east, namespace: bookinfo, name: reviews}
`

const apDoc = `apiVersion: policy.meshrelay.io/v1alpha1
kind: AccessPolicy
metadata:
  name: default-deny
spec:
  destinationSelectors: [{namespaces: [bookinfo]}]
  action: DenyAll
`

const tpDoc = `{"apiVersion": "policy.meshrelay.io/v1alpha1", "kind": "TrafficPolicy",
 "metadata": {"name": "t"},
 "spec": {"destinationSelectors": [{}], "http": [{"timeout": "1.5s"}]}}
`

func TestDecode(t *testing.T) {
	data := "# leading comment\n---\n" + vdDoc + "---\n# only a comment\n---\n" + apDoc + "---\n---\n" + tpDoc
	policies, err := Decode([]byte(data))
	if err != nil {
		t.Fatalf("Decode() error: %v", err)
	}
	var got []string
	for _, p := range policies {
		got = append(got, p.GetObjectKind().GroupVersionKind().Kind+"/"+p.GetName())
	}
	want := []string{"VirtualDestination/reviews-global", "AccessPolicy/default-deny", "TrafficPolicy/t"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("Decode() kinds (-want +got):\n%s", diff)
	}
	vd := policies[0].(*VirtualDestination)
	wantSpec := VirtualDestinationSpec{
		Hostname: "reviews.global",
		Ports:    []VirtualPort{{Number: 9080, Protocol: ProtocolHTTP}},
		Services: []BackingService{{Cluster: "east", Namespace: "bookinfo", Name: "reviews"}},
	}
	if diff := cmp.Diff(wantSpec, vd.Spec); diff != "" {
		t.Errorf("VirtualDestination spec (-want +got):\n%s", diff)
	}
	if vd.Namespace != "bookinfo" {
		t.Errorf("namespace = %q, want bookinfo", vd.Namespace)
	}
	tp := policies[2].(*TrafficPolicy)
	if got, want := tp.Spec.HTTP[0].Timeout, (&metav1.Duration{Duration: 1500 * time.Millisecond}); *got != *want {
		t.Errorf("timeout = %v, want %v", got, want)
	}
	for _, p := range policies {
		if errs := p.Validate(); len(errs) != 0 {
			t.Errorf("%s: Validate() = %v", p.GetName(), errs)
		}
	}
}

func TestDecodeEmpty(t *testing.T) {
	for name, data := range map[string]string{
		"nothing":  "",
		"comments": "# a\n---\n# b\n",
		"seps":     "---\n---\n",
	} {
		t.Run(name, func(t *testing.T) {
			policies, err := Decode([]byte(data))
			if err != nil || len(policies) != 0 {
				t.Errorf("Decode(%q) = %v, %v; want nothing", data, policies, err)
			}
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	tests := map[string]struct {
		doc         string
		wantKind    string
		wantUnknown bool
		wantIn      string
	}{
		"unknown kind": {
			doc:      "apiVersion: policy.meshrelay.io/v1alpha1\nkind: Gateway\nmetadata: {name: gw}\n",
			wantKind: "Gateway", wantUnknown: true,
			wantIn: `document 1 (Gateway "gw"): unknown kind, want one of AccessPolicy, MeshTrust, RolloutStrategy, TrafficPolicy, VirtualDestination`,
		},
		"other group": {
			doc:      "apiVersion: networking.istio.io/v1\nkind: VirtualService\n",
			wantKind: "VirtualService", wantUnknown: true,
			wantIn: `document 1 (kind "VirtualService"): unknown kind: apiVersion "networking.istio.io/v1"`,
		},
		"missing kind": {
			doc:    "apiVersion: policy.meshrelay.io/v1alpha1\nmetadata: {name: x}\n",
			wantIn: "document 1: missing kind",
		},
		"missing apiVersion": {
			doc:      "kind: TrafficPolicy\n",
			wantKind: "TrafficPolicy",
			wantIn:   `document 1 (kind "TrafficPolicy"): missing apiVersion`,
		},
		"unknown field": {
			doc:      "apiVersion: policy.meshrelay.io/v1alpha1\nkind: VirtualDestination\nmetadata: {name: vd}\nspec: {hostname: a.b, bogus: 1}\n",
			wantKind: "VirtualDestination",
			wantIn:   `document 1 (VirtualDestination "vd"): decode: unknown field "spec.bogus"`,
		},
		"wrong case field": {
			doc:      "apiVersion: policy.meshrelay.io/v1alpha1\nkind: VirtualDestination\nmetadata: {name: vd}\nspec: {Hostname: a.b}\n",
			wantKind: "VirtualDestination",
			wantIn:   `unknown field "spec.Hostname"`,
		},
		"bad duration": {
			doc:      "apiVersion: policy.meshrelay.io/v1alpha1\nkind: TrafficPolicy\nmetadata: {name: tp}\nspec: {http: [{timeout: soon}]}\n",
			wantKind: "TrafficPolicy",
			wantIn:   `document 1 (TrafficPolicy "tp"): decode:`,
		},
		"wrong type": {
			doc:      "apiVersion: policy.meshrelay.io/v1alpha1\nkind: AccessPolicy\nmetadata: {name: ap}\nspec: {ports: [http]}\n",
			wantKind: "AccessPolicy",
			wantIn:   `document 1 (AccessPolicy "ap"): decode:`,
		},
		"duplicate key": {
			doc:    "apiVersion: policy.meshrelay.io/v1alpha1\nkind: AccessPolicy\nkind: AccessPolicy\n",
			wantIn: "document 1: parse yaml:",
		},
		"not an object": {
			doc:    "- a\n- b\n",
			wantIn: "document 1: not an object",
		},
		"bad yaml": {
			doc:    "kind: [\n",
			wantIn: "document 1: parse yaml:",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			// The bad document sits between two good ones, which still decode.
			data := vdDoc + "---\n" + tc.doc + "---\n" + apDoc
			policies, err := Decode([]byte(data))
			if err == nil {
				t.Fatalf("Decode() error = nil, want one")
			}
			if !strings.Contains(err.Error(), tc.wantIn) {
				t.Errorf("Decode() error = %q, want it to contain %q", err, tc.wantIn)
			}
			var de *DocumentError
			if !errors.As(err, &de) {
				t.Fatalf("Decode() error %v is not a *DocumentError", err)
			}
			if de.Index != 1 || de.Kind != tc.wantKind {
				t.Errorf("DocumentError index, kind = %d, %q; want 1, %q", de.Index, de.Kind, tc.wantKind)
			}
			if got := errors.Is(err, ErrUnknownKind); got != tc.wantUnknown {
				t.Errorf("errors.Is(err, ErrUnknownKind) = %v, want %v", got, tc.wantUnknown)
			}
			if len(policies) != 2 {
				t.Errorf("Decode() returned %d policies, want the 2 good ones", len(policies))
			}
		})
	}
}

func TestDecodeReportsEveryBadDocument(t *testing.T) {
	data := "kind: A\n---\n" + vdDoc + "---\nkind: B\n"
	_, err := Decode([]byte(data))
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		t.Fatalf("Decode() error %v does not join errors", err)
	}
	var indexes []int
	for _, e := range joined.Unwrap() {
		var de *DocumentError
		if errors.As(e, &de) {
			indexes = append(indexes, de.Index)
		}
	}
	if diff := cmp.Diff([]int{0, 2}, indexes); diff != "" {
		t.Errorf("DocumentError indexes (-want +got):\n%s", diff)
	}
}

func TestPolicyStatus(t *testing.T) {
	policies, err := Decode([]byte(vdDoc + "---\n" + apDoc + "---\n" + tpDoc))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range policies {
		p.SetStatus(PolicyStatus{ObservedGeneration: 3, State: StateAccepted})
		p.GetStatus().Clusters = append(p.GetStatus().Clusters, ClusterResult{Cluster: "east", Backend: "istio", Applied: 2})
		copied := p.DeepCopyObject().(Policy)
		p.GetStatus().Clusters[0].Applied = 9
		got := copied.GetStatus()
		if got.State != StateAccepted || got.ObservedGeneration != 3 || got.Clusters[0].Applied != 2 {
			t.Errorf("%s: copied status = %+v, want Accepted, generation 3, applied 2", p.GetName(), got)
		}
	}
}
