//go:build unix

package manifest

import (
	"path/filepath"
	"syscall"
	"testing"

	"github.com/meshrelay/meshrelay/internal/testutil"
)

// A named pipe with a manifest's name is skipped, not opened: opening it
// would block until something wrote to it.
func TestDirSkipsNamedPipe(t *testing.T) {
	dir := t.TempDir()
	testutil.WriteFile(t, filepath.Join(dir, "a.yaml"), account("a"))
	if err := syscall.Mkfifo(filepath.Join(dir, "pipe.yaml"), 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	s, err := NewDir(dir, Options{Logger: quietLogger()}).Snapshot()
	if err != nil {
		t.Fatalf("Snapshot() error = %v", err)
	}
	if got := accounts(s); got != "a" {
		t.Errorf("accounts = %q, want a", got)
	}
}
