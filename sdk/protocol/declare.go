package protocol

import (
	"errors"
	"fmt"
	"slices"

	"github.com/meshrelay/meshrelay/api/snapshot"
)

// CheckDeclaration checks what a plugin declares beside its backends, which
// the host and the agents obey: each mesh is one of the backends, and the
// input and output kinds are "group/Kind", at most [snapshot.MaxKinds]
// each. The SDK
// refuses to serve a translator that declares otherwise, and the host
// refuses a plugin that describes itself so.
func CheckDeclaration(backends, meshes, inputKinds, outputKinds []string) error {
	var errs []error
	for _, m := range meshes {
		if !slices.Contains(backends, m) {
			errs = append(errs, fmt.Errorf("mesh %q is not one of the backends %v", m, backends))
		}
	}
	if _, err := snapshot.ParseGroupKinds(inputKinds); err != nil {
		errs = append(errs, fmt.Errorf("input kinds: %w", err))
	}
	if _, err := snapshot.ParseGroupKinds(outputKinds); err != nil {
		errs = append(errs, fmt.Errorf("output kinds: %w", err))
	}
	return errors.Join(errs...)
}
