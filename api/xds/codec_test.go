package xds_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/meshrelay/meshrelay/api/xds"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func TestEncodeDecode(t *testing.T) {
	cla := &endpointv3.ClusterLoadAssignment{
		ClusterName: "vd|reviews.global|9080",
		Endpoints:   []*endpointv3.LocalityLbEndpoints{{LoadBalancingWeight: wrapperspb.UInt32(2)}},
	}
	obj, err := xds.Encode("frontend", cla)
	if err != nil {
		t.Fatal(err)
	}
	if obj.APIVersion != xds.APIVersion || obj.Kind != xds.KindClusterLoadAssignment ||
		obj.Metadata.Name != cla.ClusterName || obj.Metadata.Namespace != "frontend" {
		t.Errorf("Encode() = %+v, want a ClusterLoadAssignment wrapper named %q in frontend", obj, cla.ClusterName)
	}
	if !strings.Contains(string(obj.Spec.Resource), `"@type":"`+xds.EndpointType+`"`) {
		t.Errorf("spec.resource = %s, want its @type", obj.Spec.Resource)
	}
	body, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	got, err := xds.Decode(body)
	if err != nil {
		t.Fatalf("Decode() = %v", err)
	}
	if got.NodeID != "frontend" || got.Name != cla.ClusterName || got.TypeURL != xds.EndpointType {
		t.Errorf("Decode() = %+v", got)
	}
	if diff := cmp.Diff(cla, got.Message, protocmp.Transform()); diff != "" {
		t.Errorf("Decode(Encode()) differs (-want +got):\n%s", diff)
	}
}

func TestDecodeErrors(t *testing.T) {
	good := func() map[string]any {
		obj, err := xds.Encode("n", &clusterv3.Cluster{Name: "c", ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC}})
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := json.Marshal(obj)
		var m map[string]any
		_ = json.Unmarshal(raw, &m)
		return m
	}
	tests := map[string]struct {
		edit   func(m map[string]any)
		want   string
		notXDS bool
	}{
		"other group":      {edit: func(m map[string]any) { m["apiVersion"] = "v1" }, notXDS: true},
		"unknown kind":     {edit: func(m map[string]any) { m["kind"] = "Secret" }, notXDS: true},
		"no node":          {edit: func(m map[string]any) { m["metadata"].(map[string]any)["namespace"] = "" }, want: "node id"},
		"kind mismatch":    {edit: func(m map[string]any) { m["kind"] = xds.KindListener }, want: "@type"},
		"name mismatch":    {edit: func(m map[string]any) { m["metadata"].(map[string]any)["name"] = "d" }, want: "named"},
		"no resource":      {edit: func(m map[string]any) { delete(m, "spec") }, want: "empty"},
		"unknown field":    {edit: func(m map[string]any) { spec(m)["bogus"] = 1 }, want: "bogus"},
		"fails validation": {edit: func(m map[string]any) { spec(m)["connect_timeout"] = "-1s" }, want: "validate"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			m := good()
			tc.edit(m)
			body, _ := json.Marshal(m)
			_, err := xds.Decode(body)
			switch {
			case err == nil:
				t.Fatalf("Decode() = nil error, want one")
			case tc.notXDS != errors.Is(err, xds.ErrNotXDS):
				t.Errorf("Decode() = %v, ErrNotXDS %v", err, tc.notXDS)
			case !strings.Contains(err.Error(), tc.want):
				t.Errorf("Decode() = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

func spec(m map[string]any) map[string]any {
	return m["spec"].(map[string]any)["resource"].(map[string]any)
}

func FuzzDecode(f *testing.F) {
	obj, _ := xds.Encode("n", &clusterv3.Cluster{Name: "c"})
	seed, _ := json.Marshal(obj)
	f.Add(seed)
	f.Add([]byte(`{"apiVersion":"xds.meshrelay.io/v1alpha1","kind":"Listener","metadata":{"name":"a","namespace":"b"},"spec":{"resource":{}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := xds.Decode(data)
		if err != nil {
			return
		}
		if r.NodeID == "" || r.Name == "" || xds.ResourceName(r.Message) != r.Name {
			t.Errorf("Decode(%q) = %+v without an error", data, r)
		}
	})
}
