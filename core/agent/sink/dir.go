package sink

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/meshrelay/meshrelay/api/snapshot"
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

// maxFileName is the longest file name FileName returns, in bytes: under
// the 255 that common file systems allow in one path component.
const maxFileName = 240

// FileName returns the name of the file holding id:
// "<kind>.<group>_<namespace>_<name>.yaml", with the kind and group in lower
// case, "core" for the core group and "_" for no namespace, such as
// "virtualservice.networking.istio.io_bookinfo_reviews.yaml".
//
// Every byte of the three fields other than a-z, 0-9, "." and "-" is written
// as "%" and two upper-case hex digits: "/" as "%2F", "_" as "%5F", "%" as
// "%25", an upper-case "A" as "%41", and each byte of a non-ASCII letter.
// So a name cannot leave the directory, different names never share a file,
// even on a case-insensitive file system, and names of lower-case letters,
// digits, "." and "-" (most Kubernetes names) are written as they are. A
// file name longer than 240 bytes is cut and ends in "~" and 32 hex digits
// of the SHA-256 of the whole name instead; the file's object still holds
// the resource's identity.
func FileName(id snapshot.ID) string {
	group := id.Group
	if group == "" {
		group = "core"
	}
	ns := "_"
	if id.Namespace != "" {
		ns = escapeName(id.Namespace)
	}
	stem := escapeName(strings.ToLower(id.Kind+"."+group)) + "_" + ns + "_" + escapeName(id.Name)
	if len(stem)+len(".yaml") <= maxFileName {
		return stem + ".yaml"
	}
	sum := sha256.Sum256([]byte(stem))
	suffix := "~" + hex.EncodeToString(sum[:16]) + ".yaml"
	cut := maxFileName - len(suffix)
	// Do not split an escape.
	if i := strings.LastIndexByte(stem[cut-2:cut], '%'); i >= 0 {
		cut -= 2 - i
	}
	return stem[:cut] + suffix
}

// escapeName escapes s for FileName.
func escapeName(s string) string {
	const hexDigits = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(s))
	for i := range len(s) {
		c := s[i]
		if 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '.' || c == '-' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&15])
	}
	return b.String()
}

// parseFileName returns the kind (in lower case), group, namespace and name
// of a file named by FileName; ok is false when the name is not one
// FileName returns or was cut.
func parseFileName(file string) (id snapshot.ID, ok bool) {
	stem, ok := strings.CutSuffix(file, ".yaml")
	if !ok || strings.Contains(stem, "~") {
		return snapshot.ID{}, false
	}
	f := strings.Split(stem, "_")
	if len(f) == 4 && f[1] == "" && f[2] == "" {
		f = []string{f[0], "", f[3]}
	} else if len(f) != 3 || f[1] == "" {
		return snapshot.ID{}, false
	}
	for i, s := range f {
		if f[i], ok = unescapeName(s); !ok {
			return snapshot.ID{}, false
		}
	}
	kind, group, _ := strings.Cut(f[0], ".")
	if group == "core" {
		group = ""
	}
	return snapshot.ID{Kind: kind, Group: group, Namespace: f[1], Name: f[2]}, f[2] != ""
}

// unescapeName reverses escapeName; ok is false when s is not one it
// returns.
func unescapeName(s string) (string, bool) {
	out, err := url.PathUnescape(s)
	return out, err == nil && escapeName(out) == s
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
	want := map[string]snapshot.ID{}
	for r := range desired.All() {
		if err := ctx.Err(); err != nil {
			errs[r.ID] = fmt.Errorf("write %s: %w", r.ID, err)
			continue
		}
		name := FileName(r.ID)
		if other, ok := want[name]; ok {
			// IDs differing only in the kind's case or in the version.
			errs[r.ID] = fmt.Errorf("write %s: its file %s holds %s", r.ID, name, other)
			continue
		}
		want[name] = r.ID
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
		if _, ok := want[e.Name()]; ok || e.IsDir() || !strings.HasSuffix(e.Name(), ".yaml") {
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
// prune. When the file cannot be read the ID comes from its name, without
// the version and with the kind in lower case, or holds only the file name.
func idFromFile(path string) snapshot.ID {
	if data, err := os.ReadFile(path); err == nil {
		if r, err := snapshot.FromYAML(data); err == nil {
			return r.ID
		}
	}
	if id, ok := parseFileName(filepath.Base(path)); ok {
		return id
	}
	return snapshot.ID{Name: filepath.Base(path)}
}
