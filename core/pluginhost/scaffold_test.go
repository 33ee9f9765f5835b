package pluginhost

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestScaffoldBuildsAndTests(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "hello")
	if err := Scaffold(dir, "hello", "example.com/meshrelay-plugin-hello", root); err != nil {
		t.Fatalf("Scaffold = %v", err)
	}
	if err := Scaffold(dir, "hello", "example.com/x", root); err == nil {
		t.Error("Scaffold overwrote an existing project")
	}
	if err := Scaffold(t.TempDir(), "Bad_Name", "example.com/x", ""); err == nil {
		t.Error("Scaffold accepted an invalid name")
	}
	env := append(os.Environ(), "GOFLAGS=-mod=mod", "GOSUMDB=off", "GOWORK=off")
	for _, args := range [][]string{{"build", "-o", "meshrelay-plugin-hello", "."}, {"vet", "./..."}, {"test", "./..."}} {
		cmd := exec.Command("go", args...)
		cmd.Dir, cmd.Env = dir, env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	// The built plugin installs: it speaks the protocol.
	e, err := Install(t.TempDir(), filepath.Join(dir, "meshrelay-plugin-hello"), "")
	if err != nil || e.Name != "hello" {
		t.Fatalf("Install(scaffolded plugin) = %+v, %v", e, err)
	}
}
