package discovery

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/manifest"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/labels"
)

// DefaultDebounce is how long a source waits after a change before it builds
// a snapshot, so that a burst of changes becomes one snapshot.
const DefaultDebounce = manifest.DefaultDebounce

// DefaultPollInterval is how often [Dir] reads a directory it cannot watch
// (and the least interval of its safety-net resync when it can).
const DefaultPollInterval = manifest.DefaultPollInterval

// Filter selects the objects that go into a snapshot. Objects left out are
// still used to compute internal resources (an istiod in an excluded
// istio-system still makes a Mesh).
type Filter struct {
	// IncludeNamespaces, when not empty, keeps only namespaced objects (and
	// Namespaces) in these namespaces.
	IncludeNamespaces []string
	// ExcludeNamespaces leaves out namespaced objects (and Namespaces) in
	// these namespaces.
	ExcludeNamespaces []string
	// ExcludeSelector is a label selector; objects whose labels match it are
	// left out. Empty selects nothing.
	ExcludeSelector string
}

// filter is a parsed Filter.
type filter struct {
	include, exclude map[string]bool
	selector         labels.Selector
}

func (f Filter) compile() (filter, error) {
	c := filter{}
	if len(f.IncludeNamespaces) > 0 {
		c.include = map[string]bool{}
		for _, ns := range f.IncludeNamespaces {
			c.include[ns] = true
		}
	}
	if len(f.ExcludeNamespaces) > 0 {
		c.exclude = map[string]bool{}
		for _, ns := range f.ExcludeNamespaces {
			c.exclude[ns] = true
		}
	}
	if f.ExcludeSelector != "" {
		sel, err := labels.Parse(f.ExcludeSelector)
		if err != nil {
			return filter{}, fmt.Errorf("parse exclude selector %q: %w", f.ExcludeSelector, err)
		}
		c.selector = sel
	}
	return c, nil
}

// Validate reports whether the filter's selector parses.
func (f Filter) Validate() error {
	_, err := f.compile()
	return err
}

// keeps reports whether an object of the given kind, namespace and labels
// goes into the snapshot. Namespaces are filtered by their own name.
func (c filter) keeps(kind, namespace string, lbls map[string]string) bool {
	if namespace != "" {
		if c.include != nil && !c.include[namespace] {
			return false
		}
		if c.exclude[namespace] {
			return false
		}
	}
	if c.selector != nil && !c.selector.Empty() && c.selector.Matches(labels.Set(lbls)) {
		return false
	}
	return true
}

// keepsObject applies keeps to a decoded object.
func (c filter) keepsObject(obj map[string]any) bool {
	kind, _ := obj["kind"].(string)
	meta, _ := obj["metadata"].(map[string]any)
	ns, _ := meta["namespace"].(string)
	if kind == "Namespace" {
		ns, _ = meta["name"].(string)
	}
	var lbls map[string]string
	if m, ok := meta["labels"].(map[string]any); ok {
		lbls = make(map[string]string, len(m))
		for k, v := range m {
			s, _ := v.(string)
			lbls[k] = s
		}
	}
	return c.keeps(kind, ns, lbls)
}

// KubeOptions configures [Kube].
type KubeOptions struct {
	Filter
	// Debounce is how long to wait after a change before building a
	// snapshot; DefaultDebounce when zero.
	Debounce time.Duration
	// InputKinds are the kinds, "group/Kind", whose custom resources are
	// discovered once their CRDs exist, known up front: as if declared with
	// [Kube.DeclareInputKinds]. Nil means not known yet: the source
	// publishes nothing until they are declared. Kinds that no CRD defines
	// (built-in kinds) change nothing: the built-in resources are always
	// discovered.
	InputKinds []string
	// Logger receives the source's logs; slog.Default() when nil.
	Logger *slog.Logger
}

func (o *KubeOptions) setDefaults() {
	if o.Debounce <= 0 {
		o.Debounce = DefaultDebounce
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Validate reports whether the options can be used.
func (o KubeOptions) Validate() error {
	if o.Debounce < 0 {
		return fmt.Errorf("debounce %v is negative", o.Debounce)
	}
	if _, err := snapshot.ParseGroupKinds(o.InputKinds); err != nil {
		return fmt.Errorf("input kinds: %w", err)
	}
	return o.Filter.Validate()
}

// DirOptions configures [Dir].
type DirOptions struct {
	Filter
	// Interval is how often a directory that cannot be watched is read,
	// and the least interval of the resync of a watched one;
	// DefaultPollInterval when zero.
	Interval time.Duration
	// Logger receives the source's logs; slog.Default() when nil.
	Logger *slog.Logger
}

// Validate reports whether the options can be used.
func (o DirOptions) Validate() error {
	if o.Interval < 0 {
		return fmt.Errorf("poll interval %v is negative", o.Interval)
	}
	return o.Filter.Validate()
}

// AddFlags registers the filter's flags on fs.
func (f *Filter) AddFlags(fs *pflag.FlagSet) {
	fs.StringSliceVar(&f.IncludeNamespaces, "discovery-include-namespaces", f.IncludeNamespaces,
		"discover only these namespaces (default all)")
	fs.StringSliceVar(&f.ExcludeNamespaces, "discovery-exclude-namespaces", f.ExcludeNamespaces,
		"leave these namespaces out of discovery")
	fs.StringVar(&f.ExcludeSelector, "discovery-exclude-selector", f.ExcludeSelector,
		"label selector of objects to leave out of discovery")
}

// AddFlags registers the options' flags on fs.
func (o *KubeOptions) AddFlags(fs *pflag.FlagSet) {
	o.Filter.AddFlags(fs)
	fs.DurationVar(&o.Debounce, "discovery-debounce", DefaultDebounce,
		"how long to gather changes before publishing a snapshot")
}
