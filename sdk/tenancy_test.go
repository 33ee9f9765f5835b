package sdk

import (
	"context"
	"fmt"
	"strings"
	"testing"

	snapshotv1 "github.com/meshrelay/meshrelay/proto/snapshot/v1"
	translatorv1 "github.com/meshrelay/meshrelay/proto/translator/v1"
)

// guard emits, per AccessPolicy and per destination it selects fleet-wide,
// a ConfigMap in the destination's cluster: what an authorization backend
// does.
type guard struct{}

func (guard) Describe() Description {
	return Description{Name: "guard", Version: "1", Backends: []string{"b"}, OutputKinds: []string{"/ConfigMap"}}
}

func (guard) Translate(_ context.Context, req *FleetRequest, resp *FleetResponse) error {
	for _, ap := range req.Fleet.AccessPolicies() {
		for _, d := range req.Fleet.Select(ap.Spec.DestinationSelectors) {
			resp.Emit(d.Cluster.Name, map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
				"metadata": map[string]any{"name": ap.Name + "-" + d.Service.Name, "namespace": d.Service.Namespace}}, ap)
		}
	}
	return nil
}

func clusterPolicy(kind, name, spec string) *snapshotv1.Resource {
	body := fmt.Sprintf(`{"apiVersion":"policy.meshrelay.io/v1alpha1","kind":%q,"metadata":{"name":%q,"namespace":"ns"},"spec":%s}`, kind, name, spec)
	return &snapshotv1.Resource{Id: &snapshotv1.ResourceID{Group: policyGroup, Version: "v1alpha1", Kind: kind, Namespace: "ns", Name: name}, Body: []byte(body)}
}

func TestWorkloadClusterPoliciesStayInTheirCluster(t *testing.T) {
	const from = `"from":[{"namespaces":["ns"]}]`
	tests := map[string]struct {
		policy    *snapshotv1.Resource
		wantEast  int
		wantWest  int
		wantDiags []string // substrings, each in some diagnostic
	}{
		"a selector without clusters selects in its own cluster only": {
			policy:   clusterPolicy("AccessPolicy", "all", `{"destinationSelectors":[{"namespaces":["ns"]}],`+from+`}`),
			wantWest: 1,
		},
		"another cluster's destination is not selected": {
			policy:    clusterPolicy("AccessPolicy", "steal", `{"destinationSelectors":[{"clusters":["east"],"names":["productpage"]}],`+from+`}`),
			wantDiags: []string{`outside the tenancy of cluster "west"`, `selects no destination in cluster "west"`},
		},
		"a mixed selector keeps only the own cluster": {
			policy:    clusterPolicy("AccessPolicy", "mixed", `{"destinationSelectors":[{"clusters":["east","west"]}],`+from+`}`),
			wantWest:  1,
			wantDiags: []string{`clusters [east] are outside the tenancy`},
		},
		"a VirtualDestination must come from the management source": {
			policy:    clusterPolicy("VirtualDestination", "global", `{"hostname":"pp.global","ports":[{"number":80,"protocol":"HTTP"}],"destinationSelectors":[{"names":["productpage"]}]}`),
			wantDiags: []string{"must be defined in the management source"},
		},
		"a MeshTrust must come from the management source": {
			policy:    clusterPolicy("MeshTrust", "fleet", `{"clusters":["east","west"]}`),
			wantDiags: []string{"a MeshTrust sets the root of trust of every cluster it selects, so it must be defined in the management source"},
		},
		"a TrafficPolicy may not route to another cluster": {
			policy: clusterPolicy("TrafficPolicy", "shift", `{"destinationSelectors":[{"names":["productpage"]}],"http":[{"name":"r","route":[
				{"service":{"cluster":"east","namespace":"ns","name":"productpage"},"weight":100}]}]}`),
			wantDiags: []string{`routes to cluster "east", outside the tenancy of cluster "west"`},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := newSession(guard{}, guard{}.Describe())
			a := run(t, s, update{full: true, clusters: []*translatorv1.ClusterInput{
				{Cluster: "east", Upserts: []*snapshotv1.Resource{svcRes("ns", "productpage", 0)}},
				{Cluster: "west", Upserts: []*snapshotv1.Resource{svcRes("ns", "productpage", 0), tc.policy}},
			}})
			if a.done.GetError() != "" {
				t.Fatalf("translation failed: %s", a.done.GetError())
			}
			if got := len(a.outputs["east"]); got != tc.wantEast {
				t.Errorf("east got %d objects from west's policy, want %d", got, tc.wantEast)
			}
			if got := len(a.outputs["west"]); got != tc.wantWest {
				t.Errorf("west got %d objects, want %d", got, tc.wantWest)
			}
			for _, want := range tc.wantDiags {
				found := false
				for _, d := range a.diags {
					if strings.Contains(d.GetSummary(), want) && d.GetPolicy().GetCluster() == "west" {
						found = true
					}
				}
				if !found {
					t.Errorf("no diagnostic on the policy containing %q; got %v", want, a.diags)
				}
			}
		})
	}
}

func TestManagementPoliciesSpanClusters(t *testing.T) {
	s := newSession(guard{}, guard{}.Describe())
	a := run(t, s, update{full: true, clusters: []*translatorv1.ClusterInput{
		{Cluster: "east", Upserts: []*snapshotv1.Resource{svcRes("ns", "productpage", 0)}},
		{Cluster: "west", Upserts: []*snapshotv1.Resource{svcRes("ns", "productpage", 0)}},
	}, policies: &translatorv1.PolicyChange{Upserts: []*snapshotv1.Resource{
		clusterPolicy("AccessPolicy", "fleet", `{"destinationSelectors":[{"names":["productpage"]}],"from":[{"namespaces":["ns"]}]}`),
	}}})
	if len(a.outputs["east"]) != 1 || len(a.outputs["west"]) != 1 {
		t.Errorf("a management policy applied to east %d and west %d times, want once each", len(a.outputs["east"]), len(a.outputs["west"]))
	}
}
