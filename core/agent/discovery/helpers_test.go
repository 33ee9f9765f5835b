package discovery

import (
	"io"
	"log/slog"

	"github.com/meshrelay/meshrelay/api/snapshot"
)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// noCustomKinds declares no custom resources' kinds: a Kube source given
// it publishes the built-in resources.
var noCustomKinds = []string{}

// policyKinds are the kinds every server declares: its agents discover
// the policies of their clusters.
var policyKinds = []string{
	"policy.meshrelay.io/AccessPolicy", "policy.meshrelay.io/MeshTrust",
	"policy.meshrelay.io/TrafficPolicy", "policy.meshrelay.io/VirtualDestination",
}

// count returns the resources of s with group and kind in namespace ns
// (any namespace when ns is "*").
func countKind(s *snapshot.Snapshot, group, kind, ns string) int {
	n := 0
	for r := range s.All() {
		if r.ID.Group == group && r.ID.Kind == kind && (ns == "*" || r.ID.Namespace == ns) {
			n++
		}
	}
	return n
}

func has(s *snapshot.Snapshot, id snapshot.ID) bool {
	_, ok := s.Get(id)
	return ok
}
