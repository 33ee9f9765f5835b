package agent

import (
	"slices"

	"github.com/meshrelay/meshrelay/api/snapshot"
)

// KindSource is a Source that discovers custom resources by kind, such as
// the kube source: the agent tells it the kinds the server's plugins read
// (from the server's Welcome, or kept in the state directory from the last
// one), and it publishes nothing until it knows them, so that the fleet
// never translates from a view without them.
type KindSource interface {
	Source
	// DeclareInputKinds replaces the kinds to discover. It may be called
	// before Run and while Run runs.
	DeclareInputKinds(kinds []snapshot.GroupKind) error
}

// inputKindsFile keeps, in the state directory, the input kinds of the
// last Welcome, so that a restarted agent discovers them before the
// server answers.
const inputKindsFile = "input-kinds.json"

// loadInputKinds reads the input kinds kept in the state directory and
// tells the source. A file that cannot be read is logged and left: the
// server's Welcome brings the kinds.
func (a *Agent) loadInputKinds() {
	var kept []string
	if ok, err := a.readState(inputKindsFile, &kept); err != nil {
		a.log.Warn("cannot read the input kinds kept for discovery; waiting for the server's", "error", err)
	} else if ok {
		a.declareInputKinds(kept, false)
	}
}

// declareInputKinds takes the input kinds of a Welcome (keep: saved in
// the state directory) or those read from there, and tells the source.
// No kinds means no change (a server that does not send them); kinds that
// are not "group/Kind", or more than snapshot.MaxKinds, are refused with
// a warning and the previous ones stay.
func (a *Agent) declareInputKinds(raw []string, keep bool) {
	if len(raw) == 0 {
		return
	}
	kinds, err := snapshot.ParseGroupKinds(raw)
	if err != nil {
		a.log.Warn("refused the input kinds the server declared; keeping the previous ones", "error", err)
		return
	}
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = k.String()
	}
	a.mu.Lock()
	same := a.inputKinds != nil && slices.Equal(a.inputKinds, names)
	a.inputKinds = names
	a.mu.Unlock()
	if same {
		return
	}
	if ks, ok := a.source.(KindSource); ok {
		if err := ks.DeclareInputKinds(kinds); err != nil {
			a.log.Warn("declare input kinds to the source", "error", err)
		}
	}
	if keep {
		if err := a.writeState(inputKindsFile, names); err != nil {
			a.log.Warn("keep the input kinds for after a restart", "error", err)
		}
	}
}

// InputKinds returns the kinds the agent's source discovers as the server
// declared them, as "group/Kind", sorted; nil until it knows them.
func (a *Agent) InputKinds() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.inputKinds)
}
