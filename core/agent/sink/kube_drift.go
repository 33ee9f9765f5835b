package sink

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/meshrelay/meshrelay/api/snapshot"
)

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
