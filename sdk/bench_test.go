package sdk

import (
	"context"
	"fmt"
	"testing"

	snapshotv1 "github.com/meshrelay/meshrelay/proto/snapshot/v1"
	translatorv1 "github.com/meshrelay/meshrelay/proto/translator/v1"
)

// perTarget emits, into each target, a ConfigMap per Service of the target
// that an AccessPolicy selects.
type perTarget struct{}

func (perTarget) Describe() Description {
	return Description{Name: "per-target", Version: "1", Backends: []string{"b"}, OutputKinds: []string{"/ConfigMap"}}
}

func (perTarget) TranslateTarget(_ context.Context, req *Request, resp *Response) error {
	for _, ap := range req.Fleet.AccessPolicies() {
		for _, d := range req.Target.Select(ap.Spec.DestinationSelectors) {
			resp.Emit(map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
				"metadata": map[string]any{"name": ap.Name + "-" + d.Service.Name, "namespace": d.Service.Namespace}}, ap)
		}
	}
	return nil
}

// BenchmarkOneClusterChange measures the session's work for an update that
// changes one Service of one cluster in a fleet of N clusters of 50
// Services: what the SDK adds per change, which should not grow with N.
func BenchmarkOneClusterChange(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("clusters=%d", n), func(b *testing.B) {
			s := newSession(perTarget{}, perTarget{}.Describe())
			var clusters []*translatorv1.ClusterInput
			for i := range n {
				in := &translatorv1.ClusterInput{Cluster: fmt.Sprintf("c%05d", i)}
				for j := range 50 {
					in.Upserts = append(in.Upserts, svcRes("ns", fmt.Sprintf("s%02d", j), 0))
				}
				clusters = append(clusters, in)
			}
			a := runB(b, s, update{full: true, clusters: clusters, policies: &translatorv1.PolicyChange{
				Upserts: []*snapshotv1.Resource{policyRes("p", fmt.Sprintf(validPolicy, "p"))}}})
			if len(a.outputs) != n {
				b.Fatalf("full update sent %d clusters, want %d", len(a.outputs), n)
			}
			b.ResetTimer()
			for i := range b.N {
				change := &translatorv1.ClusterInput{Cluster: "c00042", Upserts: []*snapshotv1.Resource{svcRes("ns", "s01", i%2+1)}}
				runB(b, s, update{clusters: []*translatorv1.ClusterInput{change}})
			}
			b.StopTimer()
			if s.targets.computed != n+b.N {
				b.Fatalf("computed %d targets, want %d", s.targets.computed, n+b.N)
			}
		})
	}
}
