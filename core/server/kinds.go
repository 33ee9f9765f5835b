package server

import (
	"slices"
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
