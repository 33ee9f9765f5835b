package pluginhost

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// LockFile is the name of the lock file in a plugin directory.
const LockFile = "plugins.lock.json"

// BinaryPrefix starts the file name of every plugin binary.
const BinaryPrefix = "meshrelay-plugin-"

// Entry is one installed plugin in the lock file.
type Entry struct {
	Name     string   `json:"name"`
	Version  string   `json:"version"`
	Protocol int      `json:"protocol"`
	Backends []string `json:"backends"`
	// Meshes, InputKinds and OutputKinds are what the plugin declared when
	// it was installed (see [Translator]); each start's Describe answer
	// replaces them in the running host.
	Meshes      []string `json:"meshes,omitempty"`
	InputKinds  []string `json:"inputKinds,omitempty"`
	OutputKinds []string `json:"outputKinds,omitempty"`
	// SHA256 is the hex SHA-256 of the binary, checked before every start.
	SHA256 string `json:"sha256"`
	// Path is the binary, relative to the plugin directory.
	Path      string    `json:"path"`
	Installed time.Time `json:"installed"`
	// Source, Digest and Platforms are set for a plugin installed from an
	// OCI registry or layout ([InstallOCI]): the reference it was installed
	// from, the digest of its image index, and the hex SHA-256 of the
	// binary of every platform the index holds ("linux/amd64"), so that
	// [InstallFromLock] installs the same bits on any of them.
	Source    string            `json:"source,omitempty"`
	Digest    string            `json:"digest,omitempty"`
	Platforms map[string]string `json:"platforms,omitempty"`
}

type lockFile struct {
	Plugins []Entry `json:"plugins"`
}

// List returns the plugins in dir's lock file, sorted by name. A directory
// without a lock file has no plugins.
func List(dir string) ([]Entry, error) {
	data, err := os.ReadFile(filepath.Join(dir, LockFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read plugin lock file: %w", err)
	}
	var lf lockFile
	if err := json.Unmarshal(data, &lf); err != nil {
		return nil, fmt.Errorf("read plugin lock file %s: %w", filepath.Join(dir, LockFile), err)
	}
	for _, e := range lf.Plugins {
		if err := checkEntryPath(e); err != nil {
			return nil, fmt.Errorf("read plugin lock file %s: %w", filepath.Join(dir, LockFile), err)
		}
	}
	slices.SortFunc(lf.Plugins, func(a, b Entry) int { return cmp.Compare(a.Name, b.Name) })
	return lf.Plugins, nil
}

// checkEntryPath refuses a binary path that could leave the plugin
// directory: absolute, or climbing out with "..". Whoever can write the
// lock file could otherwise point the server at any binary whose checksum
// they also write.
func checkEntryPath(e Entry) error {
	if !filepath.IsLocal(e.Path) {
		return fmt.Errorf("plugin %q: binary path %q must be relative to the plugin directory, without \"..\"", e.Name, e.Path)
	}
	return nil
}

func writeLock(dir string, entries []Entry) error {
	slices.SortFunc(entries, func(a, b Entry) int { return cmp.Compare(a.Name, b.Name) })
	data, err := json.MarshalIndent(lockFile{Plugins: entries}, "", "  ")
	if err != nil {
		return fmt.Errorf("write plugin lock file: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".lock-*")
	if err != nil {
		return fmt.Errorf("write plugin lock file: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("write plugin lock file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write plugin lock file: %w", err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, LockFile)); err != nil {
		return fmt.Errorf("write plugin lock file: %w", err)
	}
	return nil
}

// Install copies a plugin binary into dir and records it in the lock file,
// replacing an entry of the same name. src is a local path or an http(s)
// URL; a URL needs sum (the hex SHA-256 of the binary), a path may have
// one, and a binary that does not match it is refused. A path that is a
// directory holds the plugin's main package in a Go module: it is built
// first with the local toolchain (`go build -trimpath`), and the binary
// it builds is installed. The plugin is
// started once to describe it: its name, version, backends, declared meshes,
// input and output kinds, and protocol;
// a plugin that speaks no protocol this host supports is refused
// ([ErrUnsupportedProtocol]).
func Install(dir, src, sum string) (Entry, error) {
	return InstallContext(context.Background(), dir, src, sum, slog.New(slog.DiscardHandler))
}

// InstallContext is Install with a context and a logger for the plugin's
// output while it is described; a nil logger discards it.
func InstallContext(ctx context.Context, dir, src, sum string, logger *slog.Logger) (Entry, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	isURL := strings.HasPrefix(src, "http://") || strings.HasPrefix(src, "https://")
	if st, err := os.Stat(src); err == nil && st.IsDir() && !isURL {
		built, err := buildPlugin(ctx, src)
		if err != nil {
			return Entry{}, fmt.Errorf("install %s: %w", src, err)
		}
		defer os.RemoveAll(filepath.Dir(built))
		return InstallContext(ctx, dir, built, sum, logger)
	}
	if isURL && sum == "" {
		return Entry{}, fmt.Errorf("install %s: a URL needs the binary's sha256", src)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Entry{}, fmt.Errorf("install %s: %w", src, err)
	}
	tmp, err := os.CreateTemp(dir, ".install-*")
	if err != nil {
		return Entry{}, fmt.Errorf("install %s: %w", src, err)
	}
	tmpPath := tmp.Name()
	defer os.Remove(tmpPath)
	h := sha256.New()
	if isURL {
		err = download(ctx, src, io.MultiWriter(tmp, h))
	} else {
		err = copyFile(src, io.MultiWriter(tmp, h))
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return Entry{}, fmt.Errorf("install %s: %w", src, err)
	}
	got := hex.EncodeToString(h.Sum(nil))
	if sum != "" && !strings.EqualFold(sum, got) {
		return Entry{}, fmt.Errorf("install %s: %w: got sha256 %s, want %s", src, ErrChecksum, got, sum)
	}
	return commitBinary(ctx, dir, src, tmpPath, got, logger, nil)
}

// commitBinary makes the verified binary at tmpPath, a temporary file in
// dir whose SHA-256 is sum, the installed plugin: it starts it once to
// describe it, lets check compare the description and complete the entry,
// then renames the file into place and records it in the lock file. Until
// the rename nothing in dir changes but the temporary file, which the
// caller removes.
func commitBinary(ctx context.Context, dir, src, tmpPath, sum string, logger *slog.Logger, check func(*Entry) error) (Entry, error) {
	if err := os.Chmod(tmpPath, 0o755); err != nil {
		return Entry{}, fmt.Errorf("install %s: %w", src, err)
	}
	opts := DefaultOptions()
	proc, err := launch(ctx, filepath.Base(src), tmpPath, sum, opts, logger)
	if err != nil {
		return Entry{}, fmt.Errorf("install %s: %w", src, err)
	}
	proc.kill()
	d := proc.desc
	if strings.ContainsAny(d.GetName(), `/\ `) || d.GetName() == "." || d.GetName() == ".." {
		return Entry{}, fmt.Errorf("install %s: the plugin's name %q is not a file name", src, d.GetName())
	}
	e := Entry{
		Name: d.GetName(), Version: d.GetVersion(), Protocol: proc.version, Backends: proc.backends(),
		Meshes: sortedSet(d.GetMeshes()), InputKinds: sortedSet(d.GetInputKinds()), OutputKinds: sortedSet(d.GetOutputKinds()),
		SHA256: sum, Path: BinaryPrefix + d.GetName(), Installed: time.Now().UTC().Truncate(time.Second),
	}
	if check != nil {
		if err := check(&e); err != nil {
			return Entry{}, fmt.Errorf("install %s: %w", src, err)
		}
	}
	if err := os.Rename(tmpPath, filepath.Join(dir, e.Path)); err != nil {
		return Entry{}, fmt.Errorf("install %s: %w", src, err)
	}
	entries, err := List(dir)
	if err != nil {
		return Entry{}, fmt.Errorf("install %s: %w", src, err)
	}
	entries = slices.DeleteFunc(entries, func(o Entry) bool { return o.Name == e.Name })
	if err := writeLock(dir, append(entries, e)); err != nil {
		return Entry{}, fmt.Errorf("install %s: %w", src, err)
	}
	return e, nil
}

// buildPlugin builds the main package in the directory src into a new
// temporary directory and returns the binary's path.
func buildPlugin(ctx context.Context, src string) (string, error) {
	tmp, err := os.MkdirTemp("", "meshrelay-plugin-build-*")
	if err != nil {
		return "", err
	}
	abs, err := filepath.Abs(src)
	if err != nil {
		os.RemoveAll(tmp)
		return "", err
	}
	bin := filepath.Join(tmp, filepath.Base(abs))
	if err := goCommand(ctx, src, "build", "-trimpath", "-o", bin, "."); err != nil {
		os.RemoveAll(tmp)
		return "", fmt.Errorf("build: %w", err)
	}
	return bin, nil
}

func copyFile(src string, w io.Writer) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}

func download(ctx context.Context, url string, w io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("download: %s", resp.Status)
	}
	_, err = io.Copy(w, resp.Body)
	return err
}

// Verify recomputes the SHA-256 of every installed plugin and returns an
// error (wrapping [ErrChecksum] for a mismatch) for each one that is missing
// or changed.
func Verify(dir string) error {
	entries, err := List(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		path := e.Path
		if !filepath.IsAbs(path) {
			path = filepath.Join(dir, path)
		}
		errs = append(errs, checkSum(e.Name, path, e.SHA256))
	}
	return errors.Join(errs...)
}

// Remove deletes a plugin's binary and its lock file entry.
func Remove(dir, name string) error {
	entries, err := List(dir)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(entries, func(e Entry) bool { return e.Name == name })
	if i < 0 {
		return fmt.Errorf("remove plugin %q: not installed in %s", name, dir)
	}
	path := entries[i].Path
	if !filepath.IsAbs(path) {
		path = filepath.Join(dir, path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove plugin %q: %w", name, err)
	}
	return writeLock(dir, slices.Delete(entries, i, i+1))
}
