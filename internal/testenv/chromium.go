package testenv

import (
	"os/exec"
	"testing"
)

// Chromium returns the path of a Chromium browser for browser tests:
// MESHRELAY_CHROMIUM if set, else chromium (Debian's package) or
// chromium-browser in PATH. A missing browser skips the test, or fails it
// when Required.
func Chromium(t testing.TB) string {
	t.Helper()
	const hint = installHint + " (Debian's chromium package)"
	p, err := lookPath("MESHRELAY_CHROMIUM", "chromium", hint)
	if err != nil {
		if alt, lerr := exec.LookPath("chromium-browser"); lerr == nil {
			return alt
		}
		skipOrFatal(t, err)
	}
	return p
}
