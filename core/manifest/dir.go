package manifest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
	"sigs.k8s.io/yaml"

	"github.com/meshrelay/meshrelay/api/snapshot"
)

// DefaultResync is the shortest time a watched [Dir] goes without reading
// its directory when no change is notified, in case a notification was lost
// (a full kernel queue, a network file system, a file reached through a
// symbolic link from outside the tree).
const DefaultResync = 30 * time.Second

// DefaultDebounce is how long a watched [Dir] waits after the first change
// it is told of before it reads, so that a burst of changes becomes one read.
const DefaultDebounce = 100 * time.Millisecond

// DefaultPollInterval is how often [Dir] reads a directory it cannot watch
// (and the least interval of its safety-net resync when it can).
const DefaultPollInterval = time.Second

// MaxFileSize is the largest file [Dir] reads, in bytes; a larger one is
// logged and skipped like a malformed one.
const MaxFileSize = 32 << 20

// MaxFiles is the most manifest files [Dir] reads below its directory. A
// tree with more is an error naming the first file over the limit; Run logs
// it and keeps its last snapshot.
const MaxFiles = 10_000

// Options configures [Dir].
type Options struct {
	// Interval is how often a directory that cannot be watched is read,
	// and the least interval of the resync of a watched one;
	// DefaultPollInterval when zero.
	Interval time.Duration
	// Logger receives the reader's logs; slog.Default() when nil.
	Logger *slog.Logger
	// Object turns each decoded object into a resource and says whether
	// the snapshot keeps it; an error skips the object with a log line.
	// Nil: [snapshot.FromObject] of [snapshot.Normalize], every object
	// kept. Objects not kept still reach Assemble.
	Object func(obj map[string]any) (res snapshot.Resource, keep bool, err error)
	// Assemble builds the snapshot at version from the kept resources and
	// all of them (for what a caller derives from objects it leaves out).
	// Nil: the kept resources.
	Assemble func(version uint64, kept, all []snapshot.Resource) (*snapshot.Snapshot, error)
}

func (o *Options) setDefaults() {
	if o.Interval <= 0 {
		o.Interval = DefaultPollInterval
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Object == nil {
		o.Object = func(obj map[string]any) (snapshot.Resource, bool, error) {
			r, err := snapshot.FromObject(snapshot.Normalize(obj))
			return r, true, err
		}
	}
	if o.Assemble == nil {
		o.Assemble = func(version uint64, kept, _ []snapshot.Resource) (*snapshot.Snapshot, error) {
			s, err := snapshot.New(version, kept)
			if err != nil {
				return nil, fmt.Errorf("build snapshot: %w", err)
			}
			return s, nil
		}
	}
}

// Validate reports whether the options can be used.
func (o Options) Validate() error {
	if o.Interval < 0 {
		return fmt.Errorf("poll interval %v is negative", o.Interval)
	}
	return nil
}

// Dir reads a directory tree of Kubernetes manifests (YAML or JSON) into
// snapshots, once or watching it. Make one with NewDir.
type Dir struct {
	path string
	opts Options
	log  *slog.Logger

	// files caches what each file held when last read, by path.
	files map[string]dirFile

	// watch follows the directories read while Run watches them; nil when
	// not watching.
	watch *dirWatch

	// Set by NewDir; tests change them.
	newWatcher  func() (*fsnotify.Watcher, error)
	debounce    time.Duration // from the first notified change to the read
	resync      time.Duration // between reads of a watched directory
	maxFileSize int64
	maxFiles    int
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

// NewDir returns a reader of the directory at path and every directory
// below it. Files ending in .yaml, .yml or .json are read; each may hold
// several documents separated by "---" lines, and a document of a kind
// ending in "List" stands for its items. Files and directories whose names
// start with "." are left out, and symbolic links to directories are not
// followed (those to files are, as in a Kubernetes ConfigMap volume).
//
// Run watches the directories it reads for changes (inotify, kqueue, …) and
// reads again [DefaultDebounce] after the first change it is told of, and
// in any case every opts.Interval or [DefaultResync], whichever is
// longer. Where the directory cannot be watched — it does not exist yet, it
// is not a directory, or the system refuses a watch (for example at the
// inotify watch limit) — Run reads it every opts.Interval instead.
func NewDir(path string, opts Options) *Dir {
	opts.setDefaults()
	return &Dir{
		path:        path,
		opts:        opts,
		log:         opts.Logger.With("dir", path),
		files:       map[string]dirFile{},
		newWatcher:  fsnotify.NewWatcher,
		debounce:    DefaultDebounce,
		resync:      max(opts.Interval, DefaultResync),
		maxFileSize: MaxFileSize,
		maxFiles:    MaxFiles,
	}
}

// Run reads the directory, publishes its snapshot, and then reads it again
// on each change (see [NewDir] for when), publishing when the meaning of
// what it holds changed. Malformed files and documents are logged and
// skipped. A directory that does not exist is an empty cluster until it is
// created. Run returns nil when ctx ends.
func (d *Dir) Run(ctx context.Context, publish func(*snapshot.Snapshot)) error {
	if w, err := d.newWatcher(); err != nil {
		d.log.Warn("cannot watch directory, polling it", "interval", d.opts.Interval, "err", err)
	} else {
		d.watch = newDirWatch(w)
	}
	defer d.stopWatching()

	var (
		last       *snapshot.Snapshot
		version    uint64
		timer      = time.NewTimer(0) // the next read; the first at once
		debouncing bool
	)
	defer timer.Stop()
	for {
		var (
			events <-chan fsnotify.Event
			errs   <-chan error
		)
		if d.watch != nil {
			events, errs = d.watch.w.Events, d.watch.w.Errors
		}
		changed := false
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-events:
			if !ok {
				d.log.Warn("directory watch ended, polling it", "interval", d.opts.Interval)
				d.stopWatching()
			}
			// Chmod alone (touch, chmod) changes no content.
			changed = ev.Op&^fsnotify.Chmod != 0 || !ok
		case err, ok := <-errs:
			if !ok {
				d.log.Warn("directory watch ended, polling it", "interval", d.opts.Interval)
				d.stopWatching()
			} else {
				d.log.Warn("directory watch", "err", err)
			}
			// Notifications may have been lost: read to catch up.
			changed = true
		case <-timer.C:
			debouncing = false
			last, version = d.reread(last, version, publish)
			timer.Reset(d.nextRead())
		}
		if changed && !debouncing {
			// Read once the burst this change starts is likely over, but
			// no later than that however long it goes on.
			debouncing = true
			timer.Reset(d.debounce)
		}
	}
}

// reread reads the directory and publishes its snapshot when its meaning
// changed since last, at version+1; it returns the last snapshot published
// and its version.
func (d *Dir) reread(last *snapshot.Snapshot, version uint64, publish func(*snapshot.Snapshot)) (*snapshot.Snapshot, uint64) {
	s, err := d.read(version + 1)
	switch {
	case err != nil:
		d.log.Error("read directory", "err", err)
	case last == nil || !s.Equal(last):
		version++
		last = s
		d.log.Debug("discovered", "version", version, "resources", s.Len(), "hash", s.Hash().Short())
		publish(s)
	}
	return last, version
}

// nextRead returns when to read the directory next, the watch aside: after
// the resync interval while it is watched, else after the polling
// interval. It stops a watch that failed.
func (d *Dir) nextRead() time.Duration {
	if d.watch != nil && d.watch.err != nil {
		d.log.Warn("cannot watch directory, polling it", "interval", d.opts.Interval, "err", d.watch.err)
		d.stopWatching()
	}
	if d.watching() {
		return d.resync
	}
	return d.opts.Interval
}

// watching reports whether changes to the directory itself are notified.
func (d *Dir) watching() bool {
	return d.watch != nil && d.watch.watched[d.path]
}

func (d *Dir) stopWatching() {
	if d.watch != nil {
		d.watch.w.Close()
		d.watch = nil
	}
}

// dirWatch keeps a watch on each directory the last read walked.
type dirWatch struct {
	w *fsnotify.Watcher
	// watched and visited hold the directories watched after the last walk
	// and during the current one.
	watched, visited map[string]bool
	// err is the first failure to watch a directory; Run then polls.
	err error
}

func newDirWatch(w *fsnotify.Watcher) *dirWatch {
	return &dirWatch{w: w, watched: map[string]bool{}, visited: map[string]bool{}}
}

// add watches a directory the walk is about to list, so that no change
// after the listing goes unnoticed. It watches again a directory watched
// before, since it may be a new one under the same name.
func (w *dirWatch) add(dir string) {
	if w.err != nil {
		return
	}
	if err := w.w.Add(filepath.Clean(dir)); err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
			return // the walk cannot list it either and logs why
		}
		w.err = fmt.Errorf("watch %s: %w", dir, err)
		return
	}
	w.visited[dir] = true
}

// done ends a complete walk: directories no longer there are unwatched.
func (w *dirWatch) done() {
	for dir := range w.watched {
		if !w.visited[dir] {
			_ = w.w.Remove(filepath.Clean(dir)) // fails if the system dropped it already
		}
	}
	w.watched, w.visited = w.visited, map[string]bool{}
}

// abort ends an incomplete walk, keeping every watch.
func (w *dirWatch) abort() {
	for dir := range w.visited {
		w.watched[dir] = true
	}
	clear(w.visited)
}

// Snapshot reads the directory once and returns its snapshot at version 1.
func (d *Dir) Snapshot() (*snapshot.Snapshot, error) {
	return d.read(1)
}

// read builds the directory's snapshot, parsing only files whose content
// changed since the last read, and watching each directory it lists when
// Run watches.
func (d *Dir) read(version uint64) (*snapshot.Snapshot, error) {
	paths, err := d.list()
	if err != nil {
		return nil, err
	}
	all, kept := d.objects(paths)
	return d.opts.Assemble(version, kept, all)
}

// list returns the manifest files below the directory, sorted, and
// watches each directory it lists when Run watches.
func (d *Dir) list() ([]string, error) {
	l := &listing{d: d}
	err := filepath.WalkDir(d.path, l.visit)
	if d.watch != nil {
		if err != nil || l.tooMany != "" {
			d.watch.abort()
		} else {
			d.watch.done()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("walk %s: %w", d.path, err)
	}
	if l.tooMany != "" {
		return nil, fmt.Errorf("walk %s: more than %d manifest files, the most read from one directory; %s is the first over the limit", d.path, d.maxFiles, l.tooMany)
	}
	slices.Sort(l.paths)
	return l.paths, nil
}

// listing is one walk of a Dir: the manifest files it found, and the first
// one over the limit.
type listing struct {
	d       *Dir
	paths   []string
	tooMany string
}

// visit is the walk's function: it skips hidden files and directories
// (the root aside) and what cannot be read, watches directories and
// collects YAML and JSON files, up to the limit.
func (l *listing) visit(path string, e fs.DirEntry, err error) error {
	d := l.d
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
		if d.watch != nil {
			d.watch.add(path)
		}
		return nil
	}
	switch strings.ToLower(filepath.Ext(path)) {
	case ".yaml", ".yml", ".json":
		if !strings.HasPrefix(e.Name(), ".") {
			if len(l.paths) == d.maxFiles {
				l.tooMany = path
				return fs.SkipAll
			}
			l.paths = append(l.paths, path)
		}
	}
	return nil
}

// objects returns the objects of the files at paths, all of them and
// those the Object option keeps, the first of each ID only. It parses
// only files whose content changed since the last read, and forgets the
// files no longer listed.
func (d *Dir) objects(paths []string) (all, kept []snapshot.Resource) {
	seen := map[string]bool{}
	where := map[snapshot.ID]string{}
	for _, path := range paths {
		data, err := d.readFile(path)
		if err != nil {
			d.log.Warn("skip file", "file", path, "err", err)
			continue
		}
		seen[path] = true
		sum := sha256.Sum256(data)
		df, ok := d.files[path]
		if !ok || df.sum != sum {
			df = dirFile{sum: sum, objects: d.parse(path, data)}
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
	return all, kept
}

// readFile reads one manifest file of at most maxFileSize bytes. It does
// not open what is not a regular file, so that a named pipe cannot block it.
func (d *Dir) readFile(path string) ([]byte, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("not a regular file (%v)", info.Mode().Type())
	}
	if info.Size() > d.maxFileSize {
		return nil, fmt.Errorf("%d bytes, over the limit of %d", info.Size(), d.maxFileSize)
	}
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, d.maxFileSize+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > d.maxFileSize {
		return nil, fmt.Errorf("over the limit of %d bytes", d.maxFileSize)
	}
	return data, nil
}

// parse decodes the objects in one file, logging and skipping documents
// that are not Kubernetes objects.
func (d *Dir) parse(path string, data []byte) []dirObject {
	var out []dirObject
	for i, doc := range SplitDocuments(data) {
		objs, err := DecodeDocument(doc)
		if err != nil {
			d.log.Warn("skip malformed document", "file", path, "document", i, "err", err)
			continue
		}
		for _, obj := range objs {
			res, keep, err := d.opts.Object(obj)
			if err != nil {
				d.log.Warn("skip malformed object", "file", path, "document", i, "err", err)
				continue
			}
			out = append(out, dirObject{res: res, kept: keep})
		}
	}
	return out
}

// SplitDocuments splits a YAML stream at "---" lines.
func SplitDocuments(data []byte) [][]byte {
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

// DecodeDocument decodes one YAML or JSON document into its objects: none
// for an empty document, the items of a List, or the object itself.
func DecodeDocument(doc []byte) ([]map[string]any, error) {
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
