package sink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/cache"

	meshmeta "github.com/meshrelay/meshrelay/api/meta"
	"github.com/meshrelay/meshrelay/api/snapshot"
	xdsapi "github.com/meshrelay/meshrelay/api/xds"
)

// Ownership labels and annotations. ManagedByLabel and ManagedByValue are
// the ones the SDK stamps on every emitted object (api/meta).
const (
	ManagedByLabel = meshmeta.ManagedByLabel
	ManagedByValue = meshmeta.ManagedByValue
	// BackendLabel names the backend whose desired state an object belongs
	// to; pruning one backend never touches another's objects.
	BackendLabel = "meshrelay.io/backend"
	// ServerAnnotation names the server that decided the object.
	ServerAnnotation = "meshrelay.io/server"
	// PatchAnnotation "true" on a desired object marks a patch of an object
	// the agent does not own, such as a user's Service annotated for
	// Cilium global services: only the fields in the patch are applied,
	// the object must already exist, and pruning releases those fields
	// instead of deleting the object.
	PatchAnnotation = "meshrelay.io/patch"
	// PatchedByLabel names the backend whose patch an object carries.
	PatchedByLabel = "meshrelay.io/patched-by"
	// DefaultFieldManager is the agent's server-side apply field manager.
	DefaultFieldManager = "meshrelay-agent"
	// DefaultRetryInterval is how often failed resources are retried.
	DefaultRetryInterval = 5 * time.Second
)

// ErrNoKind is wrapped by per-resource errors for kinds the cluster does not
// serve, usually because their CRD is not installed. Such resources are
// applied by Run once the kind appears.
var ErrNoKind = errors.New("kind not served by the cluster")

// ErrNotOwned is wrapped by per-resource errors for objects that exist but
// are not managed by meshrelay (or belong to another backend); they are left
// untouched.
var ErrNotOwned = errors.New("object not owned by meshrelay")

// Kube applies desired resources to a cluster. Apply may be called from
// several goroutines; Run, once, corrects drift and retries failures.
type Kube struct {
	dyn    dynamic.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
	opts   KubeOptions
	log    *slog.Logger
	drift  *prometheus.CounterVec

	kindsChanged chan struct{}

	mu       sync.Mutex
	backends map[string]*backendState
	// kinds are the resources applied so far, with their kinds, for Run to
	// watch.
	kinds    map[schema.GroupVersionResource]schema.GroupVersionKind
	watchers map[schema.GroupVersionResource]*watcher
}

// backendState is what the sink remembers of one backend.
type backendState struct {
	desired map[snapshot.ID]snapshot.Resource
	// failed are desired resources whose last apply failed.
	failed map[snapshot.ID]bool
	// unstable are desired resources the API server rewrites on apply (a
	// normalized quantity, say), by desired hash: they cannot be compared,
	// so only their deletion counts as drift.
	unstable map[snapshot.ID]snapshot.Hash
	// prune is the last Apply's prune flag; prunePending says its prune did
	// not complete.
	prune, prunePending bool
	// kinds are the resources ever applied for this backend, where pruning
	// looks.
	kinds map[schema.GroupVersionResource]bool
	// declared are the kinds the backend's plugins declare they emit,
	// where pruning looks too.
	declared []snapshot.GroupKind
}

// watcher watches owned objects of one resource.
type watcher struct {
	gvk      schema.GroupVersionKind
	informer cache.SharedIndexInformer
}

var _ interface {
	Apply(context.Context, string, *snapshot.Snapshot, bool) (map[snapshot.ID]error, error)
} = (*Kube)(nil)

// NewKube returns a sink applying to the cluster at cfg.
func NewKube(cfg *rest.Config, opts KubeOptions) (*Kube, error) {
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("kube sink: %w", err)
	}
	opts.setDefaults()
	cfg = rest.CopyConfig(cfg)
	if cfg.UserAgent == "" {
		cfg.UserAgent = "meshrelay-agent"
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kube sink: create client: %w", err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kube sink: create discovery client: %w", err)
	}
	drift := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "meshrelay_agent_drift_corrections_total",
		Help: "Owned objects re-applied because someone else changed or deleted them.",
	}, []string{"backend"})
	if opts.Registerer != nil {
		if err := opts.Registerer.Register(drift); err != nil {
			return nil, fmt.Errorf("kube sink: register metrics: %w", err)
		}
	}
	return &Kube{
		dyn:          dyn,
		mapper:       restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc)),
		opts:         opts,
		log:          opts.Logger,
		drift:        drift,
		kindsChanged: make(chan struct{}, 1),
		backends:     map[string]*backendState{},
		kinds:        map[schema.GroupVersionResource]schema.GroupVersionKind{},
		watchers:     map[schema.GroupVersionResource]*watcher{},
	}, nil
}

// TakesGroup reports whether the sink takes resources of group: every
// group but that of the xDS wrappers (api/xds.Group), which no cluster
// serves; the agent's xDS server serves them.
func (k *Kube) TakesGroup(group string) bool { return group != xdsapi.Group }

// backend returns backend's state, making it. k.mu must be held.
func (k *Kube) backend(name string) *backendState {
	st, ok := k.backends[name]
	if !ok {
		st = &backendState{
			failed:   map[snapshot.ID]bool{},
			unstable: map[snapshot.ID]snapshot.Hash{},
			kinds:    map[schema.GroupVersionResource]bool{},
		}
		k.backends[name] = st
	}
	return st
}

// mapping finds the resource serving id's kind. *reset says whether the
// discovery cache may be reset and retried once on a miss; it is cleared
// when used.
func (k *Kube) mapping(id snapshot.ID, reset *bool) (*meta.RESTMapping, error) {
	gk := schema.GroupKind{Group: id.Group, Kind: id.Kind}
	m, err := k.mapper.RESTMapping(gk, id.Version)
	if meta.IsNoMatchError(err) && *reset {
		*reset = false
		k.mapper.Reset()
		m, err = k.mapper.RESTMapping(gk, id.Version)
	}
	if meta.IsNoMatchError(err) {
		return nil, fmt.Errorf("no kind %s in the cluster (CRD missing?): %w", gvkString(id), ErrNoKind)
	}
	if err != nil {
		return nil, fmt.Errorf("look up kind %s: %w", gvkString(id), err)
	}
	return m, nil
}

func gvkString(id snapshot.ID) string {
	return id.APIVersion() + "/" + id.Kind
}

// resource returns the client for obj's resource in its namespace.
func (k *Kube) resource(m *meta.RESTMapping, namespace string) (dynamic.ResourceInterface, error) {
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		if namespace == "" {
			return nil, fmt.Errorf("%s is namespaced but has no namespace", m.GroupVersionKind.Kind)
		}
		return k.dyn.Resource(m.Resource).Namespace(namespace), nil
	}
	return k.dyn.Resource(m.Resource), nil
}

// noteKind records that backend applies m's resource, for pruning and for
// Run's drift watch.
func (k *Kube) noteKind(backend string, m *meta.RESTMapping) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.backend(backend).kinds[m.Resource] = true
	if _, ok := k.kinds[m.Resource]; ok {
		return
	}
	k.kinds[m.Resource] = m.GroupVersionKind
	select {
	case k.kindsChanged <- struct{}{}:
	default:
	}
}

// cached returns the watched object, when Run watches its resource and the
// watch has synced. A synced watch without the object means none exists
// that meshrelay owns, so the caller must still look for an unowned one.
func (k *Kube) cached(gvr schema.GroupVersionResource, namespace, name string) (*unstructured.Unstructured, bool) {
	k.mu.Lock()
	w, ok := k.watchers[gvr]
	k.mu.Unlock()
	if !ok || !w.informer.HasSynced() {
		return nil, false
	}
	key := name
	if namespace != "" {
		key = namespace + "/" + name
	}
	o, exists, err := w.informer.GetStore().GetByKey(key)
	if err != nil || !exists {
		return nil, false
	}
	u, ok := o.(*unstructured.Unstructured)
	return u, ok
}
