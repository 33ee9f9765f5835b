package discovery

import (
	"context"
	"fmt"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/manifest"
)

// Dir discovers a "cluster" kept as a directory of YAML or JSON files, for
// development, demos and tests: the manifest reader of core/manifest with
// this package's filter, normalization ([Normalize]) and derived resources
// ([Compute]). Make one with NewDir.
type Dir struct {
	path string
	// err is the filter's, returned by Run and Snapshot.
	err    error
	reader *manifest.Dir
}

// NewDir returns a source reading the directory at path and every directory
// below it, as [manifest.NewDir] describes: which files it reads, how it
// watches them, its limits. Objects the filter leaves out, and those read
// only for what Compute derives from them, are not in the snapshot.
func NewDir(path string, opts DirOptions) *Dir {
	f, err := opts.Filter.compile()
	return &Dir{path: path, err: err, reader: manifest.NewDir(path, manifest.Options{
		Interval: opts.Interval,
		Logger:   opts.Logger,
		Object: func(obj map[string]any) (snapshot.Resource, bool, error) {
			res, err := resourceOf(obj)
			return res, err == nil && f.keepsObject(obj) && !derivedOnly(res.ID), err
		},
		Assemble: assemble,
	})}
}

// Run reads the directory, publishes its snapshot, and then reads it again
// on each change, publishing when the meaning of what it holds changed
// ([manifest.Dir.Run]). It returns an error only for invalid options, and
// nil when ctx ends.
func (d *Dir) Run(ctx context.Context, publish func(*snapshot.Snapshot)) error {
	if d.err != nil {
		return fmt.Errorf("dir discovery %s: %w", d.path, d.err)
	}
	return d.reader.Run(ctx, publish)
}

// Snapshot reads the directory once and returns its snapshot at version 1.
func (d *Dir) Snapshot() (*snapshot.Snapshot, error) {
	if d.err != nil {
		return nil, fmt.Errorf("dir discovery %s: %w", d.path, d.err)
	}
	return d.reader.Snapshot()
}
