package sink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/meshrelay/meshrelay/api/snapshot"
)

// Ownership labels and annotations. ManagedByLabel and ManagedByValue are
// the ones the SDK stamps on every emitted object.
const (
	ManagedByLabel = "app.kubernetes.io/managed-by"
	ManagedByValue = "meshrelay"
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

// DefaultPruneKinds are the kinds the translators emit. Prune looks for
// owned objects of these kinds too, not only of kinds applied since the sink
// started, so objects left by an agent before its restart are found.
var DefaultPruneKinds = []schema.GroupVersionKind{
	{Group: "networking.istio.io", Version: "v1", Kind: "VirtualService"},
	{Group: "networking.istio.io", Version: "v1", Kind: "DestinationRule"},
	{Group: "networking.istio.io", Version: "v1", Kind: "ServiceEntry"},
	{Group: "networking.istio.io", Version: "v1", Kind: "Gateway"},
	{Group: "networking.istio.io", Version: "v1", Kind: "Sidecar"},
	{Group: "networking.istio.io", Version: "v1alpha3", Kind: "EnvoyFilter"},
	{Group: "security.istio.io", Version: "v1", Kind: "AuthorizationPolicy"},
	{Group: "security.istio.io", Version: "v1", Kind: "PeerAuthentication"},
	{Group: "security.istio.io", Version: "v1", Kind: "RequestAuthentication"},
	{Group: "cilium.io", Version: "v2", Kind: "CiliumNetworkPolicy"},
	{Group: "cilium.io", Version: "v2", Kind: "CiliumClusterwideNetworkPolicy"},
	{Group: "cilium.io", Version: "v2", Kind: "CiliumEnvoyConfig"},
	{Group: "cilium.io", Version: "v2", Kind: "CiliumClusterwideEnvoyConfig"},
}

// ErrNoKind is wrapped by per-resource errors for kinds the cluster does not
// serve, usually because their CRD is not installed. Such resources are
// applied by Run once the kind appears.
var ErrNoKind = errors.New("kind not served by the cluster")

// ErrNotOwned is wrapped by per-resource errors for objects that exist but
// are not managed by meshrelay (or belong to another backend); they are left
// untouched.
var ErrNotOwned = errors.New("object not owned by meshrelay")

// KubeOptions configures [Kube].
type KubeOptions struct {
	// ServerID is stamped on every applied object as the meshrelay.io/server
	// annotation; nothing is stamped when empty.
	ServerID string
	// FieldManager is the server-side apply field manager;
	// DefaultFieldManager when empty.
	FieldManager string
	// RetryInterval is how often Run retries resources that failed and
	// looks again for missing kinds; DefaultRetryInterval when zero.
	RetryInterval time.Duration
	// Registerer receives the sink's metrics; they are not registered when
	// nil.
	Registerer prometheus.Registerer
	// PruneKinds are kinds searched for objects to prune beside those
	// applied since the sink started; DefaultPruneKinds when nil. Kinds the
	// cluster does not serve are skipped.
	PruneKinds []schema.GroupVersionKind
	// Report, when set, is called from Run with the results of resources
	// retried or re-applied after drift, so that the caller can update the
	// status it reported for Apply. A nil error means success.
	Report func(backend string, results map[snapshot.ID]error)
	// Logger receives the sink's logs; slog.Default() when nil.
	Logger *slog.Logger
}

func (o *KubeOptions) setDefaults() {
	if o.FieldManager == "" {
		o.FieldManager = DefaultFieldManager
	}
	if o.RetryInterval <= 0 {
		o.RetryInterval = DefaultRetryInterval
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.PruneKinds == nil {
		o.PruneKinds = slices.Clone(DefaultPruneKinds)
	}
}

// Validate reports whether the options can be used.
func (o KubeOptions) Validate() error {
	if o.RetryInterval < 0 {
		return fmt.Errorf("retry interval %v is negative", o.RetryInterval)
	}
	return nil
}

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

// Apply makes backend's desired resources real: each is server-side
// applied unless it already is, labelled as owned by meshrelay and backend.
// When prune is true, objects owned by backend and absent from desired are
// deleted; when false nothing is deleted. Objects that exist without the
// managed-by label are not taken over: their resources fail with
// ErrNotOwned. Resources of kinds the cluster does not serve fail with
// ErrNoKind and are applied by Run when the kind appears.
//
// The map holds the resources that failed, including objects that could not
// be pruned; the error is set only when nothing could be attempted (no
// backend, no snapshot, ctx done).
func (k *Kube) Apply(ctx context.Context, backend string, desired *snapshot.Snapshot, prune bool) (map[snapshot.ID]error, error) {
	if err := checkBackend(backend); err != nil {
		return nil, err
	}
	if desired == nil {
		return nil, fmt.Errorf("apply %s: no desired snapshot", backend)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("apply %s: %w", backend, err)
	}
	k.mu.Lock()
	st := k.backend(backend)
	st.desired = make(map[snapshot.ID]snapshot.Resource, desired.Len())
	for r := range desired.All() {
		st.desired[r.ID] = r
	}
	st.prune = prune
	st.failed = map[snapshot.ID]bool{}
	k.mu.Unlock()

	errs := map[snapshot.ID]error{}
	reset := true
	for r := range desired.All() {
		if err := ctx.Err(); err != nil {
			errs[r.ID] = err
			continue
		}
		err := k.applyOne(ctx, backend, r, &reset, false)
		if err != nil {
			errs[r.ID] = err
		}
		k.mu.Lock()
		if err != nil {
			st.failed[r.ID] = true
		}
		k.mu.Unlock()
	}
	if prune {
		maps.Copy(errs, k.prune(ctx, backend))
	}
	if len(errs) > 0 {
		k.log.Debug("applied with errors", "backend", backend, "resources", desired.Len(), "errors", len(errs))
	}
	return errs, nil
}

func checkBackend(backend string) error {
	if backend == "" {
		return errors.New("apply: no backend")
	}
	if msgs := validation.IsValidLabelValue(backend); len(msgs) > 0 {
		return fmt.Errorf("apply: backend %q is not a valid label value: %v", backend, msgs)
	}
	return nil
}

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

// applyOne applies one desired resource. Unless force is set, an object
// already as desired (by the watch cache) is left alone.
func (k *Kube) applyOne(ctx context.Context, backend string, r snapshot.Resource, reset *bool, force bool) error {
	m, err := k.mapping(r.ID, reset)
	if err != nil {
		return err
	}
	k.noteKind(backend, m)
	if m.Scope.Name() != meta.RESTScopeNameNamespace {
		r.ID.Namespace = ""
	}
	ri, err := k.resource(m, r.ID.Namespace)
	if err != nil {
		return err
	}
	obj, err := k.stamp(backend, r)
	if err != nil {
		return err
	}
	live, cached := k.cached(m.Resource, r.ID.Namespace, r.ID.Name)
	if !cached {
		live, err = ri.Get(ctx, r.ID.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			live, err = nil, nil
		case err != nil:
			return fmt.Errorf("get %s: %w", r.ID, err)
		}
	}
	patch := isPatch(obj)
	if patch && live == nil {
		return fmt.Errorf("apply patch %s: the object to patch does not exist", r.ID)
	}
	if live != nil {
		if patch {
			if err := patchable(live, backend); err != nil {
				return fmt.Errorf("apply patch %s: %w", r.ID, err)
			}
		} else if err := owned(live, backend); err != nil {
			return fmt.Errorf("apply %s: %w", r.ID, err)
		}
		if cached && !force && !k.isUnstable(backend, r) && matches(obj.Object, live.Object) {
			return nil
		}
	}
	out, err := ri.Apply(ctx, r.ID.Name, obj, metav1.ApplyOptions{FieldManager: k.opts.FieldManager, Force: true})
	if err != nil {
		return fmt.Errorf("apply %s: %w", r.ID, err)
	}
	k.mu.Lock()
	st := k.backend(backend)
	if matches(obj.Object, out.Object) {
		delete(st.unstable, r.ID)
	} else {
		st.unstable[r.ID] = r.Hash
	}
	k.mu.Unlock()
	return nil
}

// owned reports whether live may be written for backend: it carries the
// managed-by label, and no other backend's label.
func owned(live *unstructured.Unstructured, backend string) error {
	lbls := live.GetLabels()
	if lbls[ManagedByLabel] != ManagedByValue {
		return fmt.Errorf("%s/%s exists without %s=%s, not taking it over: %w",
			live.GetKind(), live.GetName(), ManagedByLabel, ManagedByValue, ErrNotOwned)
	}
	if b, ok := lbls[BackendLabel]; ok && b != backend {
		return fmt.Errorf("%s/%s belongs to backend %q: %w", live.GetKind(), live.GetName(), b, ErrNotOwned)
	}
	return nil
}

// isPatch reports whether a stamped object is a patch of an object the
// agent does not own.
func isPatch(obj *unstructured.Unstructured) bool {
	return obj.GetAnnotations()[PatchAnnotation] == "true"
}

// patchable reports whether live may take backend's patch: no other
// backend patches it.
func patchable(live *unstructured.Unstructured, backend string) error {
	if b, ok := live.GetLabels()[PatchedByLabel]; ok && b != backend {
		return fmt.Errorf("%s/%s is patched by backend %q: %w", live.GetKind(), live.GetName(), b, ErrNotOwned)
	}
	return nil
}

func (k *Kube) isUnstable(backend string, r snapshot.Resource) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	h, ok := k.backend(backend).unstable[r.ID]
	return ok && h == r.Hash
}

// stamp returns the object to apply for r: its body with the ownership
// labels and the server annotation.
func (k *Kube) stamp(backend string, r snapshot.Resource) (*unstructured.Unstructured, error) {
	obj, err := r.Object()
	if err != nil {
		return nil, err
	}
	// Numbers decode as json.Number; the apply body is re-encoded as JSON,
	// so they pass through unchanged, but the comparison needs plain values.
	obj, err = plain(obj)
	if err != nil {
		return nil, fmt.Errorf("decode %s: %w", r.ID, err)
	}
	u := &unstructured.Unstructured{Object: obj}
	u.SetManagedFields(nil)
	u.SetResourceVersion("")
	lbls := u.GetLabels()
	if lbls == nil {
		lbls = map[string]string{}
	}
	if u.GetAnnotations()[PatchAnnotation] == "true" {
		// A patch never claims the object: pruning must not find it as owned.
		delete(lbls, ManagedByLabel)
		lbls[PatchedByLabel] = backend
	} else {
		lbls[ManagedByLabel] = ManagedByValue
		lbls[BackendLabel] = backend
	}
	u.SetLabels(lbls)
	if k.opts.ServerID != "" {
		ann := u.GetAnnotations()
		if ann == nil {
			ann = map[string]string{}
		}
		ann[ServerAnnotation] = k.opts.ServerID
		u.SetAnnotations(ann)
	}
	if u.GetNamespace() != r.ID.Namespace {
		u.SetNamespace(r.ID.Namespace)
	}
	return u, nil
}

// plain re-decodes obj the way the API machinery decodes objects (int64 and
// float64 numbers), so desired and live objects compare equal.
func plain(obj map[string]any) (map[string]any, error) {
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(b); err != nil {
		// Objects without apiVersion or kind cannot be applied anyway.
		return nil, err
	}
	return u.Object, nil
}

// matches reports whether live holds everything desired says: every field
// of desired equal in live (live may hold more, such as defaults), lists
// element by element, and of metadata only labels and annotations.
func matches(desired, live map[string]any) bool {
	for key, dv := range desired {
		switch key {
		case "status":
			continue
		case "metadata":
			dm, _ := dv.(map[string]any)
			lm, _ := live["metadata"].(map[string]any)
			for _, f := range []string{"labels", "annotations"} {
				if d, ok := dm[f]; ok && !subset(d, lm[f]) {
					return false
				}
			}
			continue
		}
		if !subset(dv, live[key]) {
			return false
		}
	}
	return true
}

func subset(d, l any) bool {
	switch d := d.(type) {
	case map[string]any:
		lm, ok := l.(map[string]any)
		if !ok {
			return len(d) == 0 && l == nil
		}
		for k, v := range d {
			lv, present := lm[k]
			if v == nil {
				if present && lv != nil {
					return false
				}
				continue
			}
			if !present || !subset(v, lv) {
				return false
			}
		}
		return true
	case []any:
		ls, ok := l.([]any)
		if !ok {
			return len(d) == 0 && l == nil
		}
		if len(d) != len(ls) {
			return false
		}
		for i := range d {
			if !subset(d[i], ls[i]) {
				return false
			}
		}
		return true
	case int64:
		switch l := l.(type) {
		case int64:
			return d == l
		case float64:
			return float64(d) == l
		}
		return false
	case float64:
		switch l := l.(type) {
		case int64:
			return d == float64(l)
		case float64:
			return d == l
		}
		return false
	default:
		return d == l
	}
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

// ownedSelector selects backend's objects.
func ownedSelector(backend string) string {
	return ManagedByLabel + "=" + ManagedByValue + "," + BackendLabel + "=" + backend
}

// prune deletes backend's objects that are not desired, in every resource
// the backend applied and of every PruneKinds kind the cluster serves. It
// returns the objects it failed to delete.
func (k *Kube) prune(ctx context.Context, backend string) map[snapshot.ID]error {
	k.mu.Lock()
	st := k.backend(backend)
	set := maps.Clone(st.kinds)
	desired := st.desired
	k.mu.Unlock()
	for _, gvk := range k.opts.PruneKinds {
		m, err := k.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err == nil {
			set[m.Resource] = true
		}
	}
	gvrs := slices.SortedFunc(maps.Keys(set), func(a, b schema.GroupVersionResource) int {
		return strings.Compare(a.String(), b.String())
	})

	wanted := make(map[snapshot.ID]bool, len(desired))
	for id := range desired {
		wanted[unversioned(id)] = true
		// A cluster-scoped object is applied without the namespace a
		// translator may have given it.
		id.Namespace = ""
		wanted[unversioned(id)] = true
	}
	errs := map[snapshot.ID]error{}
	pending := false
	for _, gvr := range gvrs {
		for id, err := range k.releasePatches(ctx, backend, gvr, wanted) {
			errs[id] = err
			pending = true
		}
		list, err := k.dyn.Resource(gvr).List(ctx, metav1.ListOptions{LabelSelector: ownedSelector(backend)})
		if err != nil {
			k.log.Warn("list owned objects to prune", "backend", backend, "resource", gvr.String(), "err", err)
			pending = true
			continue
		}
		for _, item := range list.Items {
			gvk := item.GroupVersionKind()
			id := snapshot.ID{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind, Namespace: item.GetNamespace(), Name: item.GetName()}
			// The same object may be listed in another version than the
			// desired one: compare without versions.
			if wanted[unversioned(id)] {
				continue
			}
			if item.GetDeletionTimestamp() != nil {
				continue
			}
			ri := k.dyn.Resource(gvr).Namespace(item.GetNamespace())
			uid := item.GetUID()
			err := ri.Delete(ctx, item.GetName(), metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				errs[id] = fmt.Errorf("prune %s: %w", id, err)
				pending = true
				continue
			}
			k.log.Info("pruned", "backend", backend, "id", id.String())
		}
	}
	k.mu.Lock()
	st.prunePending = pending
	k.mu.Unlock()
	return errs
}

// releasePatches removes backend's patches that are no longer desired from
// the objects of one resource: an apply of nothing but the object's
// identity with the same field manager gives up every field the patch set,
// and the object itself stays.
func (k *Kube) releasePatches(ctx context.Context, backend string, gvr schema.GroupVersionResource, wanted map[snapshot.ID]bool) map[snapshot.ID]error {
	errs := map[snapshot.ID]error{}
	list, err := k.dyn.Resource(gvr).List(ctx, metav1.ListOptions{LabelSelector: PatchedByLabel + "=" + backend})
	if err != nil {
		k.log.Warn("list patched objects to release", "backend", backend, "resource", gvr.String(), "err", err)
		return errs
	}
	for _, item := range list.Items {
		gvk := item.GroupVersionKind()
		id := snapshot.ID{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind, Namespace: item.GetNamespace(), Name: item.GetName()}
		if wanted[unversioned(id)] {
			continue
		}
		empty := &unstructured.Unstructured{}
		empty.SetAPIVersion(item.GetAPIVersion())
		empty.SetKind(item.GetKind())
		empty.SetName(item.GetName())
		empty.SetNamespace(item.GetNamespace())
		ri := k.dyn.Resource(gvr).Namespace(item.GetNamespace())
		if _, err := ri.Apply(ctx, item.GetName(), empty, metav1.ApplyOptions{FieldManager: k.opts.FieldManager, Force: true}); err != nil && !apierrors.IsNotFound(err) {
			errs[id] = fmt.Errorf("release patch %s: %w", id, err)
			continue
		}
		k.log.Info("released patch", "backend", backend, "id", id.String())
	}
	return errs
}

// unversioned returns id without its version.
func unversioned(id snapshot.ID) snapshot.ID {
	id.Version = ""
	return id
}

// driftKey names one watched object.
type driftKey struct {
	gvr             schema.GroupVersionResource
	namespace, name string
}

// Run watches the owned objects of every kind applied so far, re-applying
// those someone else changed or deleted while they are desired, and every
// retry interval applies again the resources that failed (a missing CRD
// installed since, say) and finishes prunes that failed. It returns nil when
// ctx ends. Apply works without Run, without these corrections.
func (k *Kube) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[driftKey]())
	var wg sync.WaitGroup
	defer func() {
		queue.ShutDown()
		cancel()
		wg.Wait()
		k.mu.Lock()
		k.watchers = map[schema.GroupVersionResource]*watcher{}
		k.mu.Unlock()
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for k.correct(ctx, queue) {
		}
	}()

	ticker := time.NewTicker(k.opts.RetryInterval)
	defer ticker.Stop()
	for {
		k.watchNewKinds(ctx, &wg, queue)
		select {
		case <-ctx.Done():
			return nil
		case <-k.kindsChanged:
		case <-ticker.C:
			k.retry(ctx)
		}
	}
}

// watchNewKinds starts a watch of owned objects for each kind applied and
// not yet watched.
func (k *Kube) watchNewKinds(ctx context.Context, wg *sync.WaitGroup, queue workqueue.TypedRateLimitingInterface[driftKey]) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for gvr, gvk := range k.kinds {
		if _, ok := k.watchers[gvr]; ok {
			continue
		}
		inf := dynamicinformer.NewFilteredDynamicInformer(k.dyn, gvr, metav1.NamespaceAll, 0, cache.Indexers{},
			func(o *metav1.ListOptions) { o.LabelSelector = ManagedByLabel + "=" + ManagedByValue }).Informer()
		_ = inf.SetTransform(func(o any) (any, error) {
			if u, ok := o.(*unstructured.Unstructured); ok {
				u.SetManagedFields(nil)
			}
			return o, nil
		})
		enqueue := func(o any) {
			key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(o)
			if err != nil {
				return
			}
			ns, name, err := cache.SplitMetaNamespaceKey(key)
			if err != nil {
				return
			}
			queue.Add(driftKey{gvr: gvr, namespace: ns, name: name})
		}
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			UpdateFunc: func(_, o any) { enqueue(o) },
			DeleteFunc: enqueue,
		}); err != nil {
			k.log.Error("watch owned objects", "resource", gvr.String(), "err", err)
			continue
		}
		k.watchers[gvr] = &watcher{gvk: gvk, informer: inf}
		wg.Add(1)
		go func() {
			defer wg.Done()
			inf.RunWithContext(ctx)
		}()
		k.log.Debug("watching owned objects", "resource", gvr.String())
	}
}

// correct handles one queued object: if it is desired and no longer as
// desired, it is applied again.
func (k *Kube) correct(ctx context.Context, queue workqueue.TypedRateLimitingInterface[driftKey]) bool {
	key, shutdown := queue.Get()
	if shutdown {
		return false
	}
	defer queue.Done(key)
	k.mu.Lock()
	w := k.watchers[key.gvr]
	k.mu.Unlock()
	if w == nil {
		queue.Forget(key)
		return true
	}
	id := snapshot.ID{Group: w.gvk.Group, Version: w.gvk.Version, Kind: w.gvk.Kind, Namespace: key.namespace, Name: key.name}
	backend, r, ok := k.desiredFor(id)
	if !ok {
		queue.Forget(key)
		return true
	}
	drifted, err := k.drifted(ctx, key, backend, r)
	if err != nil {
		k.log.Warn("check drift", "id", id.String(), "err", err)
		queue.AddRateLimited(key)
		return true
	}
	if !drifted {
		queue.Forget(key)
		return true
	}
	reset := true
	err = k.applyOne(ctx, backend, r, &reset, true)
	if err != nil && !errors.Is(err, ErrNotOwned) {
		k.log.Warn("correct drift", "backend", backend, "id", id.String(), "err", err)
		queue.AddRateLimited(key)
	} else {
		queue.Forget(key)
	}
	if err == nil {
		k.drift.WithLabelValues(backend).Inc()
		k.log.Info("corrected drift", "backend", backend, "id", id.String())
	}
	k.mu.Lock()
	st := k.backend(backend)
	if err != nil {
		st.failed[r.ID] = true
	} else {
		delete(st.failed, r.ID)
	}
	k.mu.Unlock()
	if k.opts.Report != nil {
		k.opts.Report(backend, map[snapshot.ID]error{r.ID: err})
	}
	return true
}

// desiredFor finds the backend desiring id.
func (k *Kube) desiredFor(id snapshot.ID) (string, snapshot.Resource, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	names := slices.Sorted(maps.Keys(k.backends))
	for _, b := range names {
		if r, ok := k.backends[b].desired[id]; ok {
			return b, r, true
		}
	}
	return "", snapshot.Resource{}, false
}

// drifted reads the object from the API server, not the watch cache, which
// may still hold the sink's previous write, and reports whether it is gone
// or differs from r.
func (k *Kube) drifted(ctx context.Context, key driftKey, backend string, r snapshot.Resource) (bool, error) {
	k.mu.Lock()
	w := k.watchers[key.gvr]
	k.mu.Unlock()
	var ri dynamic.ResourceInterface = k.dyn.Resource(key.gvr)
	if key.namespace != "" {
		ri = k.dyn.Resource(key.gvr).Namespace(key.namespace)
	}
	live, err := ri.Get(ctx, key.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	if live.GetLabels()[ManagedByLabel] != ManagedByValue || w == nil {
		// Someone removed the label: the object is no longer ours to fix.
		return false, nil
	}
	if k.isUnstable(backend, r) {
		return false, nil
	}
	obj, err := k.stamp(backend, r)
	if err != nil {
		return false, err
	}
	return !matches(obj.Object, live.Object), nil
}

// retry applies again every backend's failed resources, and prunes again
// where a prune did not complete.
func (k *Kube) retry(ctx context.Context) {
	type work struct {
		backend   string
		resources []snapshot.Resource
		prune     bool
	}
	var todo []work
	k.mu.Lock()
	for name, st := range k.backends {
		w := work{backend: name, prune: st.prune && st.prunePending}
		for id := range st.failed {
			if r, ok := st.desired[id]; ok {
				w.resources = append(w.resources, r)
			}
		}
		if len(w.resources) > 0 || w.prune {
			todo = append(todo, w)
		}
	}
	k.mu.Unlock()
	reset := true
	for _, w := range todo {
		results := map[snapshot.ID]error{}
		for _, r := range w.resources {
			err := k.applyOne(ctx, w.backend, r, &reset, false)
			results[r.ID] = err
			k.mu.Lock()
			st := k.backend(w.backend)
			if err == nil && st.desired[r.ID].Hash == r.Hash {
				delete(st.failed, r.ID)
			}
			k.mu.Unlock()
			if err == nil {
				k.log.Info("applied after retry", "backend", w.backend, "id", r.ID.String())
			}
		}
		if w.prune {
			maps.Copy(results, k.prune(ctx, w.backend))
		}
		if k.opts.Report != nil && len(results) > 0 {
			k.opts.Report(w.backend, results)
		}
	}
}

// AddFlags registers the options' flags on fs.
func (o *KubeOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.FieldManager, "sink-field-manager", DefaultFieldManager, "server-side apply field manager")
	fs.DurationVar(&o.RetryInterval, "sink-retry-interval", DefaultRetryInterval,
		"how often resources that failed to apply (such as kinds whose CRD is missing) are retried")
}
