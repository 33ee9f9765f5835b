package sink

import (
	"context"
	"errors"
	"fmt"
	"maps"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/meshrelay/meshrelay/api/snapshot"
)

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
