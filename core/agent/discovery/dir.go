package discovery

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/meshrelay/meshrelay/core/snapshot"
)

// Dir discovers a "cluster" kept as a directory of YAML or JSON files, for
// development, demos and tests. Make one with NewDir.
type Dir struct {
	path string
	opts DirOptions
	log  *slog.Logger

	// files caches what each file held when last read, by path.
	files map[string]dirFile
}

// dirFile is one file's objects, keyed by the hash of its content.
type dirFile struct {
	sum     [sha256.Size]byte
	objects []dirObject
}

type dirObject struct {
	res  snapshot.Resource
	kept bool
}

// NewDir returns a source reading the directory at path and every directory
// below it. Files ending in .yaml, .yml or .json are read; each may hold
// several documents separated by "---" lines, and a document of a kind
// ending in "List" stands for its items.
func NewDir(path string, opts DirOptions) *Dir {
	opts.setDefaults()
	return &Dir{path: path, opts: opts, log: opts.Logger.With("dir", path), files: map[string]dirFile{}}
}

// Run reads the directory, publishes its snapshot, and then reads it again
// every poll interval, publishing when the meaning of what it holds changed.
// Malformed files and documents are logged and skipped. A directory that
// does not exist is an empty cluster until it is created. Run returns an
// error only for invalid options, and nil when ctx ends.
func (d *Dir) Run(ctx context.Context, publish func(*snapshot.Snapshot)) error {
	f, err := d.opts.Filter.compile()
	if err != nil {
		return fmt.Errorf("dir discovery %s: %w", d.path, err)
	}
	var (
		last    *snapshot.Snapshot
		version uint64
	)
	ticker := time.NewTicker(d.opts.Interval)
	defer ticker.Stop()
	for {
		s, err := d.read(f, version+1)
		if err != nil {
			d.log.Error("read directory", "err", err)
		} else if last == nil || !s.Equal(last) {
			version++
			last = s
			d.log.Debug("discovered", "version", version, "resources", s.Len(), "hash", s.Hash().Short())
			publish(s)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// Snapshot reads the directory once and returns its snapshot at version 1.
func (d *Dir) Snapshot() (*snapshot.Snapshot, error) {
	f, err := d.opts.Filter.compile()
	if err != nil {
		return nil, fmt.Errorf("dir discovery %s: %w", d.path, err)
	}
	return d.read(f, 1)
}

// read builds the directory's snapshot, parsing only files whose content
// changed since the last read.
func (d *Dir) read(f filter, version uint64) (*snapshot.Snapshot, error) {
	var paths []string
	err := filepath.WalkDir(d.path, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			if path == d.path && errors.Is(err, fs.ErrNotExist) {
				return fs.SkipAll
			}
			d.log.Warn("skip path", "path", path, "err", err)
			if e != nil && e.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if e.IsDir() {
			if path != d.path && strings.HasPrefix(e.Name(), ".") {
				return fs.SkipDir
			}
			return nil
		}
		switch strings.ToLower(filepath.Ext(path)) {
		case ".yaml", ".yml", ".json":
			if !strings.HasPrefix(e.Name(), ".") {
				paths = append(paths, path)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("walk %s: %w", d.path, err)
	}
	slices.Sort(paths)

	seen := map[string]bool{}
	where := map[snapshot.ID]string{}
	var all, kept []snapshot.Resource
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			d.log.Warn("skip file", "file", path, "err", err)
			continue
		}
		seen[path] = true
		sum := sha256.Sum256(data)
		df, ok := d.files[path]
		if !ok || df.sum != sum {
			df = dirFile{sum: sum, objects: d.parse(path, data, f)}
			d.files[path] = df
		}
		for _, o := range df.objects {
			if prev, dup := where[o.res.ID]; dup {
				d.log.Warn("skip duplicate object", "file", path, "id", o.res.ID.String(), "first", prev)
				continue
			}
			where[o.res.ID] = path
			all = append(all, o.res)
			if o.kept {
				kept = append(kept, o.res)
			}
		}
	}
	for path := range d.files {
		if !seen[path] {
			delete(d.files, path)
		}
	}
	return assemble(version, kept, all)
}

// parse decodes the objects in one file, logging and skipping documents
// that are not Kubernetes objects.
func (d *Dir) parse(path string, data []byte, f filter) []dirObject {
	var out []dirObject
	for i, doc := range splitDocuments(data) {
		objs, err := decodeDocument(doc)
		if err != nil {
			d.log.Warn("skip malformed document", "file", path, "document", i, "err", err)
			continue
		}
		for _, obj := range objs {
			res, err := resourceOf(obj)
			if err != nil {
				d.log.Warn("skip malformed object", "file", path, "document", i, "err", err)
				continue
			}
			out = append(out, dirObject{res: res, kept: f.keepsObject(obj)})
		}
	}
	return out
}

// splitDocuments splits a YAML stream at "---" lines.
func splitDocuments(data []byte) [][]byte {
	var (
		docs [][]byte
		cur  bytes.Buffer
	)
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), len(data)+1)
	for sc.Scan() {
		line := sc.Bytes()
		if bytes.HasPrefix(line, []byte("---")) && len(bytes.TrimSpace(bytes.SplitN(line[3:], []byte("#"), 2)[0])) == 0 {
			docs = append(docs, bytes.Clone(cur.Bytes()))
			cur.Reset()
			continue
		}
		cur.Write(line)
		cur.WriteByte('\n')
	}
	docs = append(docs, cur.Bytes())
	return docs
}

// decodeDocument decodes one YAML or JSON document into its objects: none
// for an empty document, the items of a List, or the object itself.
func decodeDocument(doc []byte) ([]map[string]any, error) {
	j, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return nil, fmt.Errorf("decode yaml: %w", err)
	}
	if t := bytes.TrimSpace(j); len(t) == 0 || bytes.Equal(t, []byte("null")) {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil {
		return nil, fmt.Errorf("decode object: %w", err)
	}
	if obj == nil {
		return nil, errors.New("not an object")
	}
	kind, _ := obj["kind"].(string)
	items, isList := obj["items"].([]any)
	if !strings.HasSuffix(kind, "List") || !isList {
		return []map[string]any{obj}, nil
	}
	out := make([]map[string]any, 0, len(items))
	for i, it := range items {
		m, ok := it.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("item %d of %s is not an object", i, kind)
		}
		out = append(out, m)
	}
	return out, nil
}
