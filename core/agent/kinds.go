package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/meshrelay/meshrelay/api/snapshot"
)

// KindSink is a Sink that prunes by kind, such as the kube sink: the agent
// tells it the kinds each backend's plugins declare they emit, so that it
// finds the objects it owns of those kinds, also the ones left before the
// agent restarted.
type KindSink interface {
	Sink
	// DeclareKinds replaces the kinds declared for backend.
	DeclareKinds(backend string, kinds []snapshot.GroupKind) error
}

// kindsFile keeps, in the state directory, the output kinds the server
// declared for each backend, so that a restarted agent knows them before
// the server answers.
const kindsFile = "output-kinds.json"

// maxKindBackends bounds how many backends' kinds the agent keeps.
const maxKindBackends = 64

// loadKinds reads the kinds kept in the state directory and tells the
// sinks. A file that cannot be read is logged and left: the server sends
// the kinds again with its outputs.
func (a *Agent) loadKinds() {
	var kept map[string][]string
	if ok, err := a.readState(kindsFile, &kept); err != nil {
		a.log.Warn("cannot read the output kinds kept for pruning; waiting for the server's", "error", err)
		return
	} else if !ok {
		return
	}
	for _, backend := range slices.Sorted(maps.Keys(kept)) {
		a.declareKinds(backend, kept[backend], false)
	}
}

// writeState keeps v as the JSON file name of the state directory, when
// there is one.
func (a *Agent) writeState(name string, v any) error {
	if a.opts.StateDir == "" {
		return nil
	}
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return a.keepState(name, data)
}

// readState decodes the JSON file name of the state directory into v. It
// returns false, and no error, when there is no state directory or no
// such file.
func (a *Agent) readState(name string, v any) (bool, error) {
	if a.opts.StateDir == "" {
		return false, nil
	}
	path := filepath.Join(a.opts.StateDir, name)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err == nil {
		err = json.Unmarshal(data, v)
	}
	if err != nil {
		return false, fmt.Errorf("read %s: %w", path, err)
	}
	return true, nil
}

// declareKinds takes the output kinds declared for backend: those the
// server sent with an output (keep: saved in the state directory), or
// those read from there. No kinds means no change; kinds that are not
// "group/Kind", or more than snapshot.MaxKinds, are refused with a
// warning and the previous ones stay.
func (a *Agent) declareKinds(backend string, raw []string, keep bool) {
	if len(raw) == 0 {
		return
	}
	kinds, err := snapshot.ParseGroupKinds(raw)
	if err != nil {
		a.log.Warn("refused the output kinds declared for a backend; keeping the previous ones", "backend", backend, "error", err)
		return
	}
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = k.String()
	}
	a.mu.Lock()
	prev, known := a.kinds[backend]
	if slices.Equal(prev, names) || !known && len(a.kinds) >= maxKindBackends {
		a.mu.Unlock()
		if !known {
			a.log.Warn("refused the output kinds of one backend too many", "backend", backend, "max", maxKindBackends)
		}
		return
	}
	a.kinds[backend] = names
	all := maps.Clone(a.kinds)
	a.mu.Unlock()

	if err := a.sinks.DeclareKinds(backend, kinds); err != nil {
		a.log.Warn("declare output kinds to the sinks", "backend", backend, "error", err)
	}
	if keep {
		if err := a.writeState(kindsFile, all); err != nil {
			a.log.Warn("keep the output kinds for after a restart", "error", err)
		}
	}
}

// OutputKinds returns the output kinds declared for backend, as
// "group/Kind", sorted.
func (a *Agent) OutputKinds(backend string) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.kinds[backend])
}
