package discovery

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	discoveryv1alpha1 "github.com/meshrelay/meshrelay/api/discovery/v1alpha1"
	"github.com/meshrelay/meshrelay/api/snapshot"
)

// builtinResources are the Kubernetes resources every Kube source watches.
var builtinResources = []schema.GroupVersionResource{
	{Version: "v1", Resource: "services"},
	{Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"},
	{Group: "apps", Version: "v1", Resource: "deployments"},
	{Group: "apps", Version: "v1", Resource: "statefulsets"},
	{Group: "apps", Version: "v1", Resource: "daemonsets"},
	{Group: "apps", Version: "v1", Resource: "replicasets"},
	{Version: "v1", Resource: "serviceaccounts"},
	{Version: "v1", Resource: "namespaces"},
	{Version: "v1", Resource: "nodes"},
}

// configMapResource identifies ConfigMaps, which are watched only by name.
var configMapResource = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

// watchKey names one informer: a resource, and for an object watched by
// name (a detector's ConfigMap) that name, as a field selector narrows
// the list and watch to it. RBAC can then grant such objects by name,
// and a field selector names one object only, hence an informer each.
type watchKey struct {
	gvr  schema.GroupVersionResource
	name string
}

// derivedWatches are the objects watched only for what Compute derives
// from them (see derivedOnly): the detectors' ConfigMaps, by name. They
// are never inputs.
func derivedWatches() []watchKey {
	var out []watchKey
	for _, d := range detectors {
		for _, name := range d.configMaps {
			out = append(out, watchKey{gvr: configMapResource, name: name})
		}
	}
	return out
}

// crdResource identifies CustomResourceDefinitions.
var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// Kube discovers a cluster through its API server. Make one with NewKube;
// Run may be called once.
type Kube struct {
	client dynamic.Interface
	opts   KubeOptions
	filter filter
	log    *slog.Logger

	dirty chan struct{}

	mu        sync.Mutex
	informers map[watchKey]*watched
	// kinds are the declared kinds whose custom resources are discovered;
	// nil until known.
	kinds map[snapshot.GroupKind]bool
	// runCtx is Run's context while it runs, for informers that
	// DeclareInputKinds starts.
	runCtx context.Context

	// crdMu serializes following CRDs: their informer's handler and
	// DeclareInputKinds.
	crdMu sync.Mutex
	// crdVersion maps a custom resource's group and plural to the version
	// watched, so that a CRD's change of preferred version restarts it.
	crdVersion map[schema.GroupResource]string
}

// watched is one running informer.
type watched struct {
	informer cache.SharedIndexInformer
	// handled reports whether the handler has seen every object of the
	// first list, so that the CRD handler has started the informers of the
	// CRDs that existed.
	handled func() bool
	cancel  context.CancelFunc
	done    chan struct{}
}

// NewKube returns a source watching the cluster at cfg.
func NewKube(cfg *rest.Config, opts KubeOptions) (*Kube, error) {
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("kube discovery: %w", err)
	}
	opts.setDefaults()
	f, err := opts.Filter.compile()
	if err != nil {
		return nil, fmt.Errorf("kube discovery: %w", err)
	}
	cfg = rest.CopyConfig(cfg)
	if cfg.UserAgent == "" {
		cfg.UserAgent = "meshrelay-agent"
	}
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kube discovery: create client: %w", err)
	}
	k := &Kube{
		client:     client,
		opts:       opts,
		filter:     f,
		log:        opts.Logger,
		dirty:      make(chan struct{}, 1),
		informers:  map[watchKey]*watched{},
		crdVersion: map[schema.GroupResource]string{},
	}
	if opts.InputKinds != nil {
		kinds, _ := snapshot.ParseGroupKinds(opts.InputKinds) // Validate parsed them
		k.kinds = kindSet(kinds)
	}
	return k, nil
}

func kindSet(kinds []snapshot.GroupKind) map[snapshot.GroupKind]bool {
	set := make(map[snapshot.GroupKind]bool, len(kinds))
	for _, gk := range kinds {
		set[gk] = true
	}
	return set
}

// DeclareInputKinds replaces the kinds whose custom resources the source
// discovers (see KubeOptions.InputKinds): it starts watching those of the
// new kinds whose CRDs exist, and stops watching, and leaves out of the
// snapshot, the kinds no longer declared. The first call lets the source
// publish.
func (k *Kube) DeclareInputKinds(kinds []snapshot.GroupKind) error {
	if len(kinds) > snapshot.MaxKinds {
		return fmt.Errorf("kube discovery: %d input kinds, more than %d", len(kinds), snapshot.MaxKinds)
	}
	k.mu.Lock()
	k.kinds = kindSet(kinds)
	ctx := k.runCtx
	k.mu.Unlock()
	if ctx != nil {
		k.followCRDs(ctx)
	}
	k.markDirty()
	return nil
}

// knowsKinds reports whether the source was told its kinds.
func (k *Kube) knowsKinds() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.kinds != nil
}

// item is what the informers keep of an object: its name for the store's
// key, its normalized resource, and whether the filter keeps it. Keeping
// only this, not the object, bounds the memory a large cluster costs.
type item struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	res  snapshot.Resource
	kept bool
}

func (i *item) DeepCopyObject() runtime.Object { c := *i; return &c }

// Run watches the cluster and publishes a snapshot once it knows its input
// kinds and every informer has synced, then again after each change of
// meaning, coalesced over the debounce window. It returns nil when ctx
// ends.
func (k *Kube) Run(ctx context.Context, publish func(*snapshot.Snapshot)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer func() {
		cancel()
		k.stopAll()
	}()
	k.mu.Lock()
	k.runCtx = ctx
	k.mu.Unlock()
	for _, gvr := range builtinResources {
		k.start(ctx, watchKey{gvr: gvr}, k.objectHandler())
	}
	for _, key := range derivedWatches() {
		k.start(ctx, key, k.objectHandler())
	}
	k.start(ctx, watchKey{gvr: crdResource}, k.crdHandler(ctx))
	k.markDirty()

	var (
		last    *snapshot.Snapshot
		version uint64
		timer   = time.NewTimer(0)
	)
	<-timer.C
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-k.dirty:
		}
		timer.Reset(k.opts.Debounce)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-timer.C:
		}
		if !k.knowsKinds() {
			// A snapshot without the custom resources would make the fleet
			// translate, and agents prune, from a partial view.
			k.log.Debug("waiting for the input kinds before publishing")
			continue
		}
		if !k.synced() {
			k.markDirtyLater(ctx)
			continue
		}
		s, err := k.build(version + 1)
		if err != nil {
			// Two objects with one ID cannot come from one API server.
			k.log.Error("build snapshot", "err", err)
			continue
		}
		if last != nil && s.Equal(last) {
			continue
		}
		version++
		last = s
		k.log.Debug("discovered", "version", version, "resources", s.Len(), "hash", s.Hash().Short())
		publish(s)
	}
}

// markDirty asks Run's loop for a new snapshot.
func (k *Kube) markDirty() {
	select {
	case k.dirty <- struct{}{}:
	default:
	}
}

// markDirtyLater marks the source dirty again once informers may have
// synced, without blocking the loop.
func (k *Kube) markDirtyLater(ctx context.Context) {
	go func() {
		select {
		case <-ctx.Done():
		case <-time.After(k.opts.Debounce):
			k.markDirty()
		}
	}()
}

// synced reports whether every running informer has listed its objects
// and handled them.
func (k *Kube) synced() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, w := range k.informers {
		if !w.informer.HasSynced() || !w.handled() {
			return false
		}
	}
	return true
}

// build collects every informer's items into a snapshot.
func (k *Kube) build(version uint64) (*snapshot.Snapshot, error) {
	k.mu.Lock()
	var all, kept []snapshot.Resource
	for key, w := range k.informers {
		if key.gvr == crdResource {
			continue
		}
		for _, o := range w.informer.GetStore().List() {
			it, ok := o.(*item)
			if !ok {
				continue
			}
			all = append(all, it.res)
			if it.kept {
				kept = append(kept, it.res)
			}
		}
	}
	k.mu.Unlock()
	return assemble(version, kept, all)
}

// start runs an informer for key unless one runs.
func (k *Kube) start(ctx context.Context, key watchKey, h cache.ResourceEventHandler) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.informers[key]; ok || ctx.Err() != nil {
		return
	}
	gvr := key.gvr
	var narrow dynamicinformer.TweakListOptionsFunc
	if key.name != "" {
		sel := fields.OneTermEqualSelector("metadata.name", key.name).String()
		narrow = func(o *metav1.ListOptions) { o.FieldSelector = sel }
	}
	inf := dynamicinformer.NewFilteredDynamicInformer(k.client, gvr, metav1.NamespaceAll, 0, cache.Indexers{}, narrow).Informer()
	log := k.log.With("resource", gvr.String())
	if key.name != "" {
		log = log.With("name", key.name)
	}
	if gvr != crdResource {
		if err := inf.SetTransform(k.transform(log)); err != nil {
			log.Error("set informer transform", "err", err)
			return
		}
	} else if err := inf.SetTransform(trimCRD); err != nil {
		log.Error("set informer transform", "err", err)
		return
	}
	reg, err := inf.AddEventHandler(h)
	if err != nil {
		log.Error("add informer handler", "err", err)
		return
	}
	_ = inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		if apierrors.IsForbidden(err) {
			// Publishing without this kind would translate from a partial view.
			log.Error("the agent may not list or watch this resource; grant it get, list and watch (the chart's rbac.extraRules); "+
				"nothing is published until it is listed", "err", err)
			return
		}
		log.Warn("watch failed, retrying", "err", err)
	})
	ictx, cancel := context.WithCancel(ctx)
	w := &watched{informer: inf, handled: reg.HasSynced, cancel: cancel, done: make(chan struct{})}
	k.informers[key] = w
	go func() {
		defer close(w.done)
		inf.RunWithContext(ictx)
	}()
	log.Debug("watching")
}

// stop ends the informer for a custom resource, dropping its objects.
func (k *Kube) stop(gvr schema.GroupVersionResource) {
	k.mu.Lock()
	w, ok := k.informers[watchKey{gvr: gvr}]
	delete(k.informers, watchKey{gvr: gvr})
	k.mu.Unlock()
	if !ok {
		return
	}
	w.cancel()
	<-w.done
	k.log.Debug("stopped watching", "resource", gvr.String())
	k.markDirty()
}

func (k *Kube) stopAll() {
	k.mu.Lock()
	ws := make([]*watched, 0, len(k.informers))
	for _, w := range k.informers {
		ws = append(ws, w)
	}
	k.informers = map[watchKey]*watched{}
	k.mu.Unlock()
	for _, w := range ws {
		w.cancel()
		<-w.done
	}
}

// transform turns a listed or watched object into an item. Objects that
// cannot be identified are kept as unidentified items, which build skips.
func (k *Kube) transform(log *slog.Logger) cache.TransformFunc {
	return func(o any) (any, error) {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			return o, nil
		}
		it := &item{ObjectMeta: metav1.ObjectMeta{
			Name: u.GetName(), Namespace: u.GetNamespace(), ResourceVersion: u.GetResourceVersion(),
		}}
		res, err := resourceOf(u.Object)
		if err != nil {
			log.Warn("skip object", "namespace", u.GetNamespace(), "name", u.GetName(), "err", err)
			return it, nil
		}
		it.res = res
		it.kept = k.filter.keepsObject(u.Object) && !derivedOnly(res.ID)
		return it, nil
	}
}

// objectHandler marks the source dirty when an object's meaning changes.
func (k *Kube) objectHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { k.markDirty() },
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(*item)
			n, ok2 := newObj.(*item)
			if ok1 && ok2 && o.res.Hash == n.res.Hash && o.res.ID == n.res.ID && o.kept == n.kept {
				return
			}
			k.markDirty()
		},
		DeleteFunc: func(any) { k.markDirty() },
	}
}

// crd is what the CRD informer keeps of a CustomResourceDefinition.
type crd struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	group, kind, plural, version string
	established                  bool
}

func (c *crd) DeepCopyObject() runtime.Object { x := *c; return &x }

// trimCRD keeps a CRD's group, kind, plural, preferred served version and
// whether it is established.
func trimCRD(o any) (any, error) {
	u, ok := o.(*unstructured.Unstructured)
	if !ok {
		return o, nil
	}
	c := &crd{ObjectMeta: metav1.ObjectMeta{Name: u.GetName(), ResourceVersion: u.GetResourceVersion()}}
	c.group, _, _ = unstructured.NestedString(u.Object, "spec", "group")
	c.kind, _, _ = unstructured.NestedString(u.Object, "spec", "names", "kind")
	c.plural, _, _ = unstructured.NestedString(u.Object, "spec", "names", "plural")
	versions, _, _ := unstructured.NestedSlice(u.Object, "spec", "versions")
	var served []string
	for _, v := range versions {
		m, _ := v.(map[string]any)
		name, _ := m["name"].(string)
		if ok, _ := m["served"].(bool); ok && name != "" {
			served = append(served, name)
		}
	}
	slices.SortFunc(served, func(a, b string) int { return version.CompareKubeAwareVersionStrings(a, b) })
	if len(served) > 0 {
		c.version = served[len(served)-1]
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, cond := range conds {
		m, _ := cond.(map[string]any)
		if m["type"] == "Established" && m["status"] == "True" {
			c.established = true
		}
	}
	return c, nil
}

// crdHandler starts and stops informers for the custom resources of the
// declared kinds as their CRDs come, change and go.
func (k *Kube) crdHandler(ctx context.Context) cache.ResourceEventHandler {
	follow := func(o any) {
		if c, ok := o.(*crd); ok {
			k.crdMu.Lock()
			defer k.crdMu.Unlock()
			k.followCRD(ctx, c)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    follow,
		UpdateFunc: func(_, o any) { follow(o) },
		DeleteFunc: func(o any) {
			if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = t.Obj
			}
			c, ok := o.(*crd)
			if !ok {
				return
			}
			k.crdMu.Lock()
			defer k.crdMu.Unlock()
			k.unfollow(schema.GroupResource{Group: c.group, Resource: c.plural})
		},
	}
}

// followCRDs follows every known CRD again, after the kinds changed.
func (k *Kube) followCRDs(ctx context.Context) {
	k.crdMu.Lock()
	defer k.crdMu.Unlock()
	k.mu.Lock()
	w := k.informers[watchKey{gvr: crdResource}]
	k.mu.Unlock()
	if w == nil {
		return
	}
	for _, o := range w.informer.GetStore().List() {
		if c, ok := o.(*crd); ok {
			k.followCRD(ctx, c)
		}
	}
}

// followCRD watches a CRD's custom resources in the version it serves
// while its kind is declared and it is established, and stops watching
// them otherwise. The discovery.meshrelay.io kinds are never watched: the
// source computes them. Callers hold crdMu.
func (k *Kube) followCRD(ctx context.Context, c *crd) {
	if c.plural == "" {
		return
	}
	gr := schema.GroupResource{Group: c.group, Resource: c.plural}
	k.mu.Lock()
	declared := k.kinds[snapshot.GroupKind{Group: c.group, Kind: c.kind}]
	k.mu.Unlock()
	want := ""
	if declared && c.established && c.group != discoveryv1alpha1.Group {
		want = c.version
	}
	if cur, has := k.crdVersion[gr]; has && cur == want {
		return
	}
	k.unfollow(gr)
	if want == "" {
		return
	}
	k.crdVersion[gr] = want
	k.start(ctx, watchKey{gvr: gr.WithVersion(want)}, k.objectHandler())
	k.markDirty()
}

// unfollow stops watching a custom resource. Callers hold crdMu.
func (k *Kube) unfollow(gr schema.GroupResource) {
	if cur, has := k.crdVersion[gr]; has {
		delete(k.crdVersion, gr)
		k.stop(gr.WithVersion(cur))
	}
}
