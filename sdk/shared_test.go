package sdk

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestSharedMisuseDoesNotCompile builds two small programs: one reading
// shared values as their handles type them, which compiles, and one
// reading them as another type or with a key of another type, which the
// compiler refuses at each misuse.
func TestSharedMisuseDoesNotCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the compiler")
	}
	build := func(dir string) (string, error) {
		cmd := exec.Command("go", "build", "-o", os.DevNull, "./"+dir)
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOSUMDB=off")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := build("testdata/shared/use"); err != nil {
		t.Fatalf("building the right use failed: %v\n%s", err, out)
	}
	out, err := build("testdata/shared/misuse")
	if err == nil {
		t.Fatal("the misuse of shared values compiled")
	}
	for _, want := range []string{
		"main.go:13:14: cannot use domains.Get(f) (value of type []string) as int value",
		"main.go:14:17: cannot use perKey.Get(f, sdk.ServiceKey{}) (value of type int) as string value",
		`main.go:15:20: cannot use "east/shop/api" (untyped string constant) as sdk.ServiceKey value`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("compiler output lacks %q:\n%s", want, out)
		}
	}
}
