package pluginhost

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/meshrelay/meshrelay/sdk"
	"github.com/meshrelay/meshrelay/sdk/protocol/host"
)

// A plugin's meshes, input and output kinds are recorded in the lock file at
// install and read from there until the plugin starts; a lock file entry
// without them (written before plugins declared) is completed by the
// plugin's Describe answer when it starts.
func TestDeclarationFromLockFileThenDescribe(t *testing.T) {
	bin := pluginBinary(t, "raw", "meshy")
	dir := t.TempDir()
	e, err := Install(dir, bin, "")
	if err != nil {
		t.Fatal(err)
	}
	wantMeshes, wantKinds := []string{"test"}, []string{"/ConfigMap"}
	if !slices.Equal(e.Meshes, wantMeshes) || !slices.Equal(e.OutputKinds, wantKinds) {
		t.Fatalf("Install = meshes %v, output kinds %v; want %v, %v", e.Meshes, e.OutputKinds, wantMeshes, wantKinds)
	}
	wantInputs := []string{"/Service", "example.io/Widget"}
	if !slices.Equal(e.InputKinds, wantInputs) {
		t.Fatalf("Install = input kinds %v, want %v", e.InputKinds, wantInputs)
	}
	p := mustPlugin(t, newHost(t, dir, testOptions(), nil), "meshy")
	if p.Pid() != 0 || !slices.Equal(p.Meshes(), wantMeshes) || !slices.Equal(p.OutputKinds(), wantKinds) {
		t.Fatalf("before start: pid %d, Meshes() = %v, OutputKinds() = %v; want not running, %v, %v", p.Pid(), p.Meshes(), p.OutputKinds(), wantMeshes, wantKinds)
	}
	if !slices.Equal(p.InputKinds(), wantInputs) {
		t.Fatalf("before start: InputKinds() = %v, want %v from the lock file", p.InputKinds(), wantInputs)
	}

	old := t.TempDir()
	installRaw(t, old, bin, "meshy")
	p = mustPlugin(t, newHost(t, old, testOptions(), nil), "meshy")
	if len(p.Meshes())+len(p.OutputKinds()) != 0 {
		t.Fatalf("an entry without a declaration: Meshes() = %v, OutputKinds() = %v before start, want none", p.Meshes(), p.OutputKinds())
	}
	works(t, p)
	if !slices.Equal(p.Meshes(), wantMeshes) || !slices.Equal(p.OutputKinds(), wantKinds) {
		t.Errorf("after start: Meshes() = %v, OutputKinds() = %v; want the Describe answer %v, %v", p.Meshes(), p.OutputKinds(), wantMeshes, wantKinds)
	}
	if !slices.Equal(p.InputKinds(), wantInputs) {
		t.Errorf("after start: InputKinds() = %v, want the Describe answer %v", p.InputKinds(), wantInputs)
	}
}

// A plugin declaring an output kind that is not "group/Kind" is refused,
// with an error naming the plugin and the kind.
func TestBadDeclarationRefused(t *testing.T) {
	_, err := Install(t.TempDir(), pluginBinary(t, "raw", "baddecl"), "")
	if !errors.Is(err, host.ErrProtocol) || !strings.Contains(err.Error(), `"baddecl"`) || !strings.Contains(err.Error(), "apps/v1/Deployment") {
		t.Fatalf("Install(bad declaration) = %v, want a protocol error naming the plugin and the kind", err)
	}
}

// A translator linked in process reports what it declares; one declaring a
// mesh that is not one of its backends is refused.
func TestInProcessDeclaration(t *testing.T) {
	l, err := InProcess(declaring{sdk.Description{Name: "d", Version: "1", Backends: []string{"b", "a"}, Meshes: []string{"a"}, OutputKinds: []string{"x.io/Y", "/ConfigMap"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if !slices.Equal(l.Meshes(), []string{"a"}) || !slices.Equal(l.OutputKinds(), []string{"/ConfigMap", "x.io/Y"}) {
		t.Errorf("Meshes() = %v, OutputKinds() = %v; want [a], [/ConfigMap x.io/Y]", l.Meshes(), l.OutputKinds())
	}
	_, err = InProcess(declaring{sdk.Description{Name: "d", Version: "1", Backends: []string{"b"}, Meshes: []string{"istio"}}}, nil)
	if err == nil || !strings.Contains(err.Error(), `mesh "istio" is not one of the backends`) {
		t.Errorf("InProcess(mesh not a backend) = %v, want it refused", err)
	}
}

type declaring struct{ d sdk.Description }

func (t declaring) Describe() sdk.Description { return t.d }

func (declaring) TranslateTarget(context.Context, *sdk.Request, *sdk.Response) error { return nil }

// A translator linked in process reports the kinds it declares it reads,
// sorted and without duplicates; one declaring an input kind that is not
// "group/Kind" is refused.
func TestInProcessInputKinds(t *testing.T) {
	l, err := InProcess(declaring{sdk.Description{Name: "d", Version: "1", Backends: []string{"b"}, InputKinds: []string{"x.io/Y", "/Service", "x.io/Y"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if got := l.InputKinds(); !slices.Equal(got, []string{"/Service", "x.io/Y"}) {
		t.Errorf("InputKinds() = %v, want [/Service x.io/Y]", got)
	}
	_, err = InProcess(declaring{sdk.Description{Name: "d", Version: "1", Backends: []string{"b"}, InputKinds: []string{"networking.istio.io/v1/VirtualService"}}}, nil)
	if err == nil || !strings.Contains(err.Error(), "input kinds") || !strings.Contains(err.Error(), "networking.istio.io/v1/VirtualService") {
		t.Errorf("InProcess(bad input kind) = %v, want it refused naming the kind", err)
	}
}
