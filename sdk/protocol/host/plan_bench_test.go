package host

import (
	"fmt"
	"testing"

	"github.com/meshrelay/meshrelay/api/snapshot"
)

// BenchmarkPlanOneChanged measures working out the update after one
// cluster's input changed in a fleet of 10,000 the plugin holds: what
// every cycle after a one-cluster change costs the host before it sends,
// comparing every cluster (compared) or those the view names (named).
func BenchmarkPlanOneChanged(b *testing.B) {
	const clusters = 10000
	body := func(name string) []byte {
		return fmt.Appendf(nil, `{"apiVersion":"v1","kind":"Service","metadata":{"name":%q,"namespace":"app"}}`, name)
	}
	input := func(i, version int) *snapshot.Snapshot {
		id := snapshot.ID{Version: "v1", Kind: "Service", Namespace: "app", Name: fmt.Sprintf("svc-%d", version)}
		r, err := snapshot.NewResource(id, body(id.Name))
		if err != nil {
			b.Fatal(err)
		}
		s, err := snapshot.New(1, []snapshot.Resource{r})
		if err != nil {
			b.Fatal(err)
		}
		return s
	}
	held := View{Clusters: make(map[string]Cluster, clusters), Seq: 1}
	for i := range clusters {
		held.Clusters[fmt.Sprintf("cluster-%05d", i)] = Cluster{Input: input(i, 0), Meshes: []string{"istio"}}
	}
	s := &Session{held: held, holds: true}
	next := View{Clusters: make(map[string]Cluster, clusters)}
	for name, c := range held.Clusters {
		next.Clusters[name] = c
	}
	next.Clusters["cluster-00042"] = Cluster{Input: input(42, 1), Meshes: []string{"istio"}}
	for _, bc := range []struct {
		name string
		base uint64
	}{{"compared", 0}, {"named", 1}} {
		b.Run(bc.name, func(b *testing.B) {
			v := next
			v.Seq, v.Base, v.Changed = 2, bc.base, []string{"cluster-00042"}
			b.ReportAllocs()
			for b.Loop() {
				if u := s.plan(v); len(u.clusters) != 1 {
					b.Fatalf("plan has %d clusters, want 1", len(u.clusters))
				}
			}
		})
	}
}
