package sink

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/meshrelay/meshrelay/api/snapshot"
)

// ownedSelector selects backend's objects.
func ownedSelector(backend string) string {
	return ManagedByLabel + "=" + ManagedByValue + "," + BackendLabel + "=" + backend
}

// DeclareKinds tells the sink the kinds backend's plugins declare they
// emit, replacing those declared before: pruning looks for backend's
// objects of these kinds too, in the version the cluster serves, so that
// objects left before the agent restarted are found. Kinds the cluster
// does not serve are skipped.
func (k *Kube) DeclareKinds(backend string, kinds []snapshot.GroupKind) error {
	if err := checkBackend(backend); err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.backend(backend).declared = slices.Clone(kinds)
	return nil
}

// pruneResources returns the resources where backend's objects may be: the
// ones it applied and those of its declared kinds. pending says a declared
// kind could not be looked up (discovery failed), so the prune must be
// done again.
func (k *Kube) pruneResources(backend string) (gvrs []schema.GroupVersionResource, pending bool) {
	k.mu.Lock()
	st := k.backend(backend)
	set := maps.Clone(st.kinds)
	declared := st.declared
	k.mu.Unlock()
	for _, gk := range declared {
		m, err := k.mapper.RESTMapping(schema.GroupKind{Group: gk.Group, Kind: gk.Kind})
		switch {
		case err == nil:
			set[m.Resource] = true
		case meta.IsNoMatchError(err):
			// Not served: the cluster holds no object of it.
		default:
			k.log.Warn("look up a declared kind to prune", "backend", backend, "kind", gk.String(), "err", err)
			pending = true
		}
	}
	return slices.SortedFunc(maps.Keys(set), func(a, b schema.GroupVersionResource) int {
		return strings.Compare(a.String(), b.String())
	}), pending
}

// prune deletes backend's objects that are not desired, in every resource
// the backend applied and of every declared kind the cluster serves. It
// returns the objects it failed to delete.
func (k *Kube) prune(ctx context.Context, backend string) map[snapshot.ID]error {
	gvrs, pending := k.pruneResources(backend)
	k.mu.Lock()
	st := k.backend(backend)
	desired := st.desired
	k.mu.Unlock()

	wanted := make(map[snapshot.ID]bool, len(desired))
	for id := range desired {
		wanted[unversioned(id)] = true
		// A cluster-scoped object is applied without the namespace a
		// translator may have given it.
		id.Namespace = ""
		wanted[unversioned(id)] = true
	}
	errs := map[snapshot.ID]error{}
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
