package sink

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/meshrelay/meshrelay/core/snapshot"
)

// Dir writes each backend's desired resources as YAML files, one per
// resource, under PATH/<backend>/. Make one with NewDir. Apply may be called
// from several goroutines for different backends.
type Dir struct {
	path string
}

var _ interface {
	Apply(context.Context, string, *snapshot.Snapshot, bool) (map[snapshot.ID]error, error)
} = (*Dir)(nil)

// NewDir returns a sink writing under path, which is created when needed.
func NewDir(path string) *Dir { return &Dir{path: path} }

// FileName returns the name of the file holding id:
// "<kind>.<group>_<namespace>_<name>.yaml" in lower case, with "core" for
// the core group and "_" for no namespace, such as
// "virtualservice.networking.istio.io_bookinfo_reviews.yaml".
func FileName(id snapshot.ID) string {
	group := id.Group
	if group == "" {
		group = "core"
	}
	ns := id.Namespace
	if ns == "" {
		ns = "_"
	}
	return strings.ToLower(id.Kind+"."+group) + "_" + ns + "_" + id.Name + ".yaml"
}

// Apply writes every desired resource of backend to its file, atomically
// (a temporary file renamed over it), leaving files whose content is already
// right untouched. When prune is true, other .yaml files in the backend's
// directory are removed; when false nothing is removed. The error is set only
// when the backend's directory cannot be made.
func (d *Dir) Apply(ctx context.Context, backend string, desired *snapshot.Snapshot, prune bool) (map[snapshot.ID]error, error) {
	if backend == "" || strings.ContainsAny(backend, `/\`) || backend == "." || backend == ".." {
		return nil, fmt.Errorf("apply: invalid backend %q", backend)
	}
	if desired == nil {
		return nil, fmt.Errorf("apply %s: no desired snapshot", backend)
	}
	dir := filepath.Join(d.path, backend)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("apply %s: %w", backend, err)
	}
	errs := map[snapshot.ID]error{}
	want := map[string]bool{}
	for r := range desired.All() {
		if err := ctx.Err(); err != nil {
			errs[r.ID] = err
			continue
		}
		name := FileName(r.ID)
		want[name] = true
		if err := writeResource(filepath.Join(dir, name), r); err != nil {
			errs[r.ID] = err
		}
	}
	if !prune {
		return errs, nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return errs, nil
	}
	for _, e := range entries {
		if e.IsDir() || want[e.Name()] || !strings.HasSuffix(e.Name(), ".yaml") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			id := idFromFile(path)
			errs[id] = fmt.Errorf("prune %s: %w", path, err)
		}
	}
	return errs, nil
}

// writeResource writes r as YAML to path unless path already holds it.
func writeResource(path string, r snapshot.Resource) error {
	obj, err := r.Object()
	if err != nil {
		return err
	}
	data, err := yaml.Marshal(obj)
	if err != nil {
		return fmt.Errorf("encode %s: %w", r.ID, err)
	}
	if cur, err := os.ReadFile(path); err == nil && bytes.Equal(cur, data) {
		return nil
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", r.ID, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", r.ID, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", r.ID, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", r.ID, err)
	}
	return nil
}

// idFromFile reads the ID of the object in a file, for reporting a failed
// prune; the ID holds only the file name when the file cannot be read.
func idFromFile(path string) snapshot.ID {
	if data, err := os.ReadFile(path); err == nil {
		if r, err := snapshot.FromYAML(data); err == nil {
			return r.ID
		}
	}
	return snapshot.ID{Name: filepath.Base(path)}
}
