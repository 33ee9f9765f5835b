package pluginhost

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"go/format"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"text/template"
)

// pluginName is what a plugin name may be: a DNS label.
var pluginName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// Scaffold writes a new translator plugin project into dir, as `meshrelay
// plugin init NAME DIR` does: go.mod, main.go (sdk.Serve), translator.go (a
// translator to edit), translator_test.go (an sdktest test), a fixture in
// testdata/ and a Makefile whose `make release` cross-builds the binaries
// that `meshrelay plugin push dist/ oci://…` publishes, then runs `go mod tidy -e` there, so that the module builds
// and its test passes as generated. modulePath is the new module's path. When
// meshrelayDir is set it is a local meshrelay checkout that go.mod uses
// through a replace directive, and tidying needs no network when the
// module cache holds what the checkout builds with; otherwise tidying
// fetches the latest github.com/meshrelay/meshrelay. Scaffold refuses to
// overwrite existing files.
func Scaffold(ctx context.Context, dir, name, modulePath, meshrelayDir string) error {
	if !pluginName.MatchString(name) {
		return fmt.Errorf("scaffold plugin %q: the name must be a DNS label (lower case letters, digits and '-')", name)
	}
	if modulePath == "" {
		return fmt.Errorf("scaffold plugin %q: no module path", name)
	}
	if meshrelayDir != "" {
		abs, err := filepath.Abs(meshrelayDir)
		if err != nil {
			return fmt.Errorf("scaffold plugin %q: %w", name, err)
		}
		meshrelayDir = abs
	}
	data := map[string]string{
		"Name": name, "Module": modulePath, "Meshrelay": meshrelayDir,
		"Type": "Translator", "Backend": name,
	}
	files := map[string]string{
		"go.mod":              scaffoldGoMod,
		"main.go":             scaffoldMain,
		"translator.go":       scaffoldTranslator,
		"translator_test.go":  scaffoldTest,
		"testdata/basic.yaml": scaffoldFixture,
		"Makefile":            scaffoldMakefile,
		".gitignore":          scaffoldGitignore,
	}
	for path := range files {
		if _, err := os.Stat(filepath.Join(dir, path)); err == nil {
			return fmt.Errorf("scaffold plugin %q: %s already exists", name, filepath.Join(dir, path))
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("scaffold plugin %q: %w", name, err)
		}
	}
	for path, text := range files {
		var buf bytes.Buffer
		if err := template.Must(template.New(path).Parse(text)).Execute(&buf, data); err != nil {
			return fmt.Errorf("scaffold plugin %q: %s: %w", name, path, err)
		}
		out := buf.Bytes()
		if strings.HasSuffix(path, ".go") {
			formatted, err := format.Source(out)
			if err != nil {
				return fmt.Errorf("scaffold plugin %q: %s: %w", name, path, err)
			}
			out = formatted
		}
		full := filepath.Join(dir, path)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return fmt.Errorf("scaffold plugin %q: %w", name, err)
		}
		if err := os.WriteFile(full, out, 0o644); err != nil {
			return fmt.Errorf("scaffold plugin %q: %w", name, err)
		}
	}
	// -e: offline, with only what the meshrelay checkout builds with in
	// the module cache, the tests of dependencies' packages may not
	// resolve; the module still builds and tests.
	if err := goCommand(ctx, dir, "mod", "tidy", "-e"); err != nil {
		return fmt.Errorf("scaffold plugin %q: %w", name, err)
	}
	return nil
}

// goCommand runs the go command in dir, with its error output in the
// error.
func goCommand(ctx context.Context, dir string, args ...string) error {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return nil
}

const scaffoldGoMod = `module {{.Module}}

go 1.26.0
{{if .Meshrelay}}
require github.com/meshrelay/meshrelay v0.0.0

replace github.com/meshrelay/meshrelay => {{.Meshrelay}}
{{end}}`

const scaffoldMain = `// Command meshrelay-plugin-{{.Name}} is a meshrelay translator plugin.
// Build and install it with:
//
//	meshrelay plugin install .
package main

import "github.com/meshrelay/meshrelay/sdk"

func main() { sdk.Serve(&{{.Type}}{}) }
`

const scaffoldTranslator = `package main

import (
	"context"

	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/sdk"
)

// {{.Type}} translates the fleet view for the {{.Backend}} backend, one
// target cluster at a time. Replace what TranslateTarget emits with your
// backend's resources.
type {{.Type}} struct{}

// Describe says what the translator is: every kind it emits, and the
// custom kinds it reads (none here: Services and policies are always
// discovered).
func (t *{{.Type}}) Describe() sdk.Description {
	return sdk.Description{
		Name:        "{{.Name}}",
		Version:     "0.1.0",
		Backends:    []string{"{{.Backend}}"},
		OutputKinds: []string{"/ConfigMap"},
	}
}

// ValidatePolicy refuses policies this translator cannot serve. Policies
// with an error diagnostic never reach TranslateTarget.
func (t *{{.Type}}) ValidatePolicy(p policyv1alpha1.Policy) []sdk.Diagnostic {
	if ap, ok := p.(*policyv1alpha1.AccessPolicy); ok && len(ap.Spec.Paths) > 0 {
		return []sdk.Diagnostic{sdk.Errorf(ap, "spec.paths", "{{.Name}} cannot restrict paths")}
	}
	return nil
}

// TranslateTarget emits, for every Service of the target cluster that an
// AccessPolicy selects, a ConfigMap beside it naming the policy. It must be
// a pure function of what it reads through req: the SDK computes a target
// again only when something it read changes.
func (t *{{.Type}}) TranslateTarget(ctx context.Context, req *sdk.Request, resp *sdk.Response) error {
	for _, ap := range req.Fleet.AccessPolicies() {
		for _, dst := range req.Target.Select(ap.Spec.DestinationSelectors) {
			resp.Emit(map[string]any{
				"apiVersion": "v1",
				"kind":       "ConfigMap",
				"metadata":   map[string]any{"name": "{{.Name}}-" + dst.Service.Name, "namespace": dst.Service.Namespace},
				"data":       map[string]any{"action": string(ap.Spec.Action)},
			}, ap)
		}
	}
	return nil
}
`

const scaffoldTest = `package main

import (
	"testing"

	"github.com/meshrelay/meshrelay/sdk/sdktest"
)

// TestTranslate runs the translator on testdata/basic.yaml. To compare the
// whole answer with a file instead, call sdktest.Golden(t, "basic", got)
// and run ` + "`go test -update`" + ` once to write testdata/basic.golden.yaml.
func TestTranslate(t *testing.T) {
	got := sdktest.Run(t, &{{.Type}}{}, "testdata/basic.yaml")
	if len(got.Outputs) != 1 || got.Outputs[0].Cluster != "east" || got.Outputs[0].Name != "{{.Name}}-api" {
		t.Errorf("outputs = %+v, want one ConfigMap for east's api Service", got.Outputs)
	}
	if len(got.Diagnostics) != 1 || got.Diagnostics[0].Path != "spec.paths" {
		t.Errorf("diagnostics = %+v, want one on spec.paths", got.Diagnostics)
	}
}
`

const scaffoldFixture = `# A fleet for tests: see the sdktest package documentation.
clusters:
- name: east
  meshes: [istio]
  objects:
  - {apiVersion: v1, kind: Service, metadata: {name: api, namespace: shop}, spec: {selector: {app: api}}}
  - {apiVersion: v1, kind: Service, metadata: {name: web, namespace: shop}, spec: {selector: {app: web}}}
- name: west
  objects: []
policies:
- apiVersion: policy.meshrelay.io/v1alpha1
  kind: AccessPolicy
  metadata: {name: api-from-web, namespace: shop}
  spec:
    destinationSelectors: [{clusters: [east], names: [api]}]
    from: [{namespaces: [shop]}]
- apiVersion: policy.meshrelay.io/v1alpha1
  kind: AccessPolicy
  metadata: {name: paths, namespace: shop}
  spec:
    destinationSelectors: [{names: [web]}]
    from: [{namespaces: [shop]}]
    paths: [/admin]
`

// scaffoldMakefile cross-builds the release binaries into dist/, named
// as ReleaseBinaries reads them.
const scaffoldMakefile = `# Build, test and publish meshrelay-plugin-{{.Name}}.
#
#   make test
#   make release                 # dist/meshrelay-plugin-{{.Name}}-OS-ARCH for every PLATFORMS
#   make push REF=oci://ghcr.io/you/meshrelay-plugin-{{.Name}}:0.1.0 SIGN_KEY=you.key

NAME      := {{.Name}}
PLATFORMS ?= linux/amd64 linux/arm64 darwin/arm64
GO        ?= go
MESHRELAY ?= meshrelay
REF       ?=
SIGN_KEY  ?=

.PHONY: build test release push clean

build:
	$(GO) build -trimpath -o meshrelay-plugin-$(NAME) .

test:
	$(GO) test ./...

release:
	@mkdir -p dist
	@set -e; for p in $(PLATFORMS); do \
	  os=$${p%%/*}; arch=$${p#*/}; \
	  echo "build dist/meshrelay-plugin-$(NAME)-$$os-$$arch"; \
	  CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags=-buildid= -o dist/meshrelay-plugin-$(NAME)-$$os-$$arch .; \
	done

push: release
	@test -n "$(REF)" || { echo "push: set REF=oci://REGISTRY/REPO:VERSION"; exit 1; }
	$(MESHRELAY) plugin push dist/ $(REF) $(if $(SIGN_KEY),--sign-key $(SIGN_KEY))

clean:
	rm -rf dist meshrelay-plugin-$(NAME)
`

const scaffoldGitignore = `/dist/
/meshrelay-plugin-{{.Name}}
`
