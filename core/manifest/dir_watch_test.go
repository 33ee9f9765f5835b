package manifest

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/internal/testutil"
)

// account is a manifest of one ServiceAccount in namespace default.
func account(name string) string {
	return fmt.Sprintf(`{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":%q,"namespace":"default"}}`, name)
}

func accountID(name string) snapshot.ID {
	return snapshot.ID{Version: "v1", Kind: "ServiceAccount", Namespace: "default", Name: name}
}

// accounts returns the names of the ServiceAccounts in s, sorted.
func accounts(s *snapshot.Snapshot) string {
	var names []string
	for r := range s.All() {
		if r.ID.Kind == "ServiceAccount" {
			names = append(names, r.ID.Name)
		}
	}
	return strings.Join(names, ",")
}

// waitAccounts waits for a snapshot whose ServiceAccounts are exactly want
// (comma-separated, sorted).
func waitAccounts(t *testing.T, c *testutil.Collector, what, want string) {
	t.Helper()
	c.WaitFor(t, what+": accounts "+want, func(s *snapshot.Snapshot) bool { return accounts(s) == want })
}

// writeInPlace rewrites a file through the same inode, as `echo >` does.
func writeInPlace(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// The poll interval and resync are an hour in these tests: only change
// notifications can make them pass.

func TestDirWatchSeesChanges(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")
	testutil.WriteFile(t, a, account("a"))
	c := testutil.RunSource(t, NewDir(dir, Options{Interval: time.Hour, Logger: quietLogger()}))
	waitAccounts(t, c, "first read", "a")

	writeInPlace(t, a, account("a2"))
	waitAccounts(t, c, "edit in place", "a2")

	writeInPlace(t, b, account("b"))
	waitAccounts(t, c, "new file", "a2,b")

	testutil.WriteFile(t, b, account("b2")) // a temporary file renamed into place
	waitAccounts(t, c, "atomic rename", "a2,b2")

	// vim without backupcopy: move the old file aside, write, delete.
	if err := os.Rename(a, a+"~"); err != nil {
		t.Fatal(err)
	}
	writeInPlace(t, a, account("a3"))
	if err := os.Remove(a + "~"); err != nil {
		t.Fatal(err)
	}
	waitAccounts(t, c, "vim-style write", "a3,b2")

	if err := os.Remove(b); err != nil {
		t.Fatal(err)
	}
	waitAccounts(t, c, "removal", "a3")

	// A new directory tree is watched as it is read.
	deep := filepath.Join(dir, "sub", "deeper", "d.yaml")
	testutil.WriteFile(t, deep, account("d"))
	waitAccounts(t, c, "file in a new directory", "a3,d")
	writeInPlace(t, deep, account("d2"))
	waitAccounts(t, c, "edit in the new directory", "a3,d2")

	// A directory moved in from elsewhere, then away.
	other := t.TempDir()
	testutil.WriteFile(t, filepath.Join(other, "moved", "e.yaml"), account("e"))
	if err := os.Rename(filepath.Join(other, "moved"), filepath.Join(dir, "moved")); err != nil {
		t.Fatal(err)
	}
	waitAccounts(t, c, "directory moved in", "a3,d2,e")
	writeInPlace(t, filepath.Join(dir, "moved", "e.yaml"), account("e2"))
	waitAccounts(t, c, "edit in the moved directory", "a3,d2,e2")
	if err := os.Rename(filepath.Join(dir, "moved"), filepath.Join(other, "gone")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "sub")); err != nil {
		t.Fatal(err)
	}
	waitAccounts(t, c, "directories gone", "a3")

	// Files that are not manifests do not make snapshots.
	n := c.Count()
	writeInPlace(t, filepath.Join(dir, "notes.txt"), "x")
	writeInPlace(t, filepath.Join(dir, "z.yaml"), account("z"))
	waitAccounts(t, c, "marker", "a3,z")
	if got := c.Count(); got != n+1 {
		t.Errorf("snapshots after notes.txt and marker = %d, want %d", got, n+1)
	}
}

// A Kubernetes ConfigMap volume: files are symbolic links through "..data",
// itself a link to a hidden timestamped directory that an update replaces by
// renaming a new link over "..data".
func TestDirWatchConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	testutil.WriteFile(t, filepath.Join(dir, "..2026_01_01", "policy.yaml"), account("v1"))
	for _, l := range []struct{ target, name string }{
		{"..2026_01_01", "..data"},
		{filepath.Join("..data", "policy.yaml"), "policy.yaml"},
	} {
		if err := os.Symlink(l.target, filepath.Join(dir, l.name)); err != nil {
			t.Fatal(err)
		}
	}
	c := testutil.RunSource(t, NewDir(dir, Options{Interval: time.Hour, Logger: quietLogger()}))
	waitAccounts(t, c, "first read", "v1")

	testutil.WriteFile(t, filepath.Join(dir, "..2026_01_02", "policy.yaml"), account("v2"))
	if err := os.Symlink("..2026_01_02", filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "..2026_01_01")); err != nil {
		t.Fatal(err)
	}
	waitAccounts(t, c, "swapped ..data", "v2")
}

func TestDirWatchMissingDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "later")
	src := NewDir(dir, Options{Interval: 20 * time.Millisecond, Logger: quietLogger()})
	src.resync = time.Hour // a missing directory is polled; one that exists is only watched
	c := testutil.RunSource(t, src)
	c.WaitFor(t, "an empty cluster", func(s *snapshot.Snapshot) bool { return s.Len() == 0 })

	testutil.WriteFile(t, filepath.Join(dir, "a.yaml"), account("a"))
	waitAccounts(t, c, "directory created", "a")
	writeInPlace(t, filepath.Join(dir, "a.yaml"), account("a2"))
	waitAccounts(t, c, "edit once watched", "a2")

	// Removed and made again: polled while missing, then watched again.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	waitAccounts(t, c, "directory removed", "")
	testutil.WriteFile(t, filepath.Join(dir, "b.yaml"), account("b"))
	waitAccounts(t, c, "directory made again", "b")
	writeInPlace(t, filepath.Join(dir, "b.yaml"), account("b2"))
	waitAccounts(t, c, "edit in the new directory", "b2")
}

func TestDirWatchFallsBackToPolling(t *testing.T) {
	for name, newWatcher := range map[string]func() (*fsnotify.Watcher, error){
		"watcher fails": func() (*fsnotify.Watcher, error) {
			return nil, errors.New("too many open files")
		},
		"watches fail": func() (*fsnotify.Watcher, error) {
			w, err := fsnotify.NewWatcher()
			if err == nil {
				w.Close() // Add fails and the event channel is closed
			}
			return w, err
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			testutil.WriteFile(t, filepath.Join(dir, "a.yaml"), account("a"))
			var logs testutil.Buffer
			src := NewDir(dir, Options{Interval: 20 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			src.newWatcher = newWatcher
			src.resync = time.Hour
			c := testutil.RunSource(t, src)
			waitAccounts(t, c, "first read", "a")
			writeInPlace(t, filepath.Join(dir, "a.yaml"), account("a2"))
			waitAccounts(t, c, "edit", "a2")
			if !strings.Contains(logs.String(), "polling it") {
				t.Errorf("logs do not say the directory is polled:\n%s", logs.String())
			}
		})
	}
}

func TestDirLimits(t *testing.T) {
	dir := t.TempDir()
	testutil.WriteFile(t, filepath.Join(dir, "a.yaml"), account("a"))
	testutil.WriteFile(t, filepath.Join(dir, "big.yaml"), account("big")+"\n# "+strings.Repeat("x", 200))
	testutil.WriteFile(t, filepath.Join(dir, "sub", "c.yaml"), account("c"))

	src := NewDir(dir, Options{Logger: quietLogger()})
	src.maxFileSize = 100
	s, err := src.Snapshot()
	if err != nil {
		t.Fatalf("Snapshot() error = %v", err)
	}
	if got := accounts(s); got != "a,c" {
		t.Errorf("accounts with a 100-byte limit = %q, want a,c (big.yaml skipped)", got)
	}

	src = NewDir(dir, Options{Logger: quietLogger()})
	src.maxFiles = 2
	_, err = src.Snapshot()
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "sub", "c.yaml")) {
		t.Errorf("Snapshot() of 3 files with a limit of 2: error = %v, want one naming sub/c.yaml", err)
	}
	src.maxFiles = 3
	if s, err := src.Snapshot(); err != nil || accounts(s) != "a,big,c" {
		t.Errorf("Snapshot() of 3 files with a limit of 3 = %v, %v; want a,big,c", s, err)
	}

	// Over the limit, Run keeps its last snapshot until the tree shrinks.
	src = NewDir(dir, Options{Interval: time.Hour, Logger: quietLogger()})
	src.maxFiles = 3
	c := testutil.RunSource(t, src)
	waitAccounts(t, c, "first read", "a,big,c")
	n := c.Count()
	testutil.WriteFile(t, filepath.Join(dir, "d.yaml"), account("d"))
	testutil.WriteFile(t, filepath.Join(dir, "a.yaml"), account("a2"))
	if err := os.Remove(filepath.Join(dir, "big.yaml")); err != nil {
		t.Fatal(err)
	}
	waitAccounts(t, c, "back under the limit", "a2,c,d")
	if got := c.Count(); got != n+1 {
		t.Errorf("snapshots = %d, want %d: none while over the limit", got, n+1)
	}
}
