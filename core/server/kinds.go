package server

import (
	"slices"

	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/api/snapshot"
)

// outputKinds returns the kinds the translators of backend declare they
// emit, sorted, without duplicates: the agents prune by them.
func (s *Server) outputKinds(backend string) []string {
	var kinds []string
	for _, t := range s.deps.Translators {
		if slices.Contains(t.Backends(), backend) {
			kinds = append(kinds, t.OutputKinds()...)
		}
	}
	slices.Sort(kinds)
	return slices.Compact(kinds)
}

// inputKinds returns the kinds every translator declares it reads and the
// policy kinds, which the server reads itself from the workload clusters'
// inputs, sorted, without duplicates: the agents discover them. A union of
// more than snapshot.MaxKinds is logged; the agents refuse it and keep the
// kinds they had.
func (s *Server) inputKinds() []string {
	var kinds []string
	for kind := range policyKinds {
		kinds = append(kinds, policyv1alpha1.GroupName+"/"+kind)
	}
	for _, t := range s.deps.Translators {
		kinds = append(kinds, t.InputKinds()...)
	}
	slices.Sort(kinds)
	kinds = slices.Compact(kinds)
	if len(kinds) > snapshot.MaxKinds {
		s.log.Error("the plugins declare more input kinds together than an agent takes; agents keep the kinds they had",
			"kinds", len(kinds), "max", snapshot.MaxKinds)
	}
	return kinds
}

// serves reports whether a translator of this server serves backend.
func (s *Server) serves(backend string) bool {
	for _, t := range s.deps.Translators {
		if slices.Contains(t.Backends(), backend) {
			return true
		}
	}
	return false
}
