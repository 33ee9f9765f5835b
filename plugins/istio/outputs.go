package istio

import (
	"cmp"
	"maps"
	"slices"

	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/sdk"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// object is an emitted Istio resource: a typed istio.io/client-go object.
type object interface {
	metav1.Object
	runtime.Object
}

// outputKey identifies an object in one cluster's output.
type outputKey struct {
	Cluster, APIVersion, Kind, Namespace, Name string
}

func keyOf(cluster string, obj object) outputKey {
	apiVersion, kind := obj.GetObjectKind().GroupVersionKind().ToAPIVersionAndKind()
	return outputKey{Cluster: cluster, APIVersion: apiVersion, Kind: kind, Namespace: obj.GetNamespace(), Name: obj.GetName()}
}

func (k outputKey) compare(o outputKey) int {
	return cmp.Or(cmp.Compare(k.Cluster, o.Cluster), cmp.Compare(k.APIVersion, o.APIVersion), cmp.Compare(k.Kind, o.Kind),
		cmp.Compare(k.Namespace, o.Namespace), cmp.Compare(k.Name, o.Name))
}

// entry is one object to emit with the policies it derives from.
type entry struct {
	obj     object
	parents []policyv1alpha1.Policy
}

// outputs collects a target's objects so that each is emitted once and two
// policies never fight over one object name.
type outputs struct {
	entries map[outputKey]*entry
	diags   []sdk.Diagnostic
}

func newOutputs() *outputs { return &outputs{entries: map[outputKey]*entry{}} }

// staged are the objects of one policy, added all together or not at all.
type staged struct {
	policy  policyv1alpha1.Policy
	objects []stagedObject
	diags   []sdk.Diagnostic
}

type stagedObject struct {
	cluster string
	obj     object
}

func newStaged(p policyv1alpha1.Policy) *staged { return &staged{policy: p} }

// add stages obj for cluster.
func (s *staged) add(cluster string, obj object) {
	s.objects = append(s.objects, stagedObject{cluster: cluster, obj: obj})
}

// errorf records an error diagnostic on the policy; a policy with errors
// emits nothing.
func (s *staged) errorf(cluster, path, format string, args ...any) {
	d := sdk.Errorf(s.policy, path, format, args...)
	d.Cluster = cluster
	s.diags = append(s.diags, d)
}

// warnf records a warning diagnostic on the policy.
func (s *staged) warnf(cluster, path, format string, args ...any) {
	d := sdk.Warningf(s.policy, path, format, args...)
	d.Cluster = cluster
	s.diags = append(s.diags, d)
}

func (s *staged) failed() bool {
	return slices.ContainsFunc(s.diags, func(d sdk.Diagnostic) bool { return d.Severity == sdk.SeverityError })
}

// keys returns the output keys of the staged objects, in order.
func (s *staged) keys() []outputKey {
	keys := make([]outputKey, len(s.objects))
	for i, so := range s.objects {
		keys[i] = keyOf(so.cluster, so.obj)
	}
	return keys
}

// commit adds a policy's staged objects unless the policy has errors or one
// of its objects takes a name another policy already emitted, in which case
// it adds none and reports why. It reports whether the objects were added.
func (o *outputs) commit(s *staged) bool {
	o.diags = append(o.diags, s.diags...)
	if s.failed() {
		return false
	}
	keys := s.keys()
	if d, ok := claim(s.policy, keys, o.owner); !ok {
		o.diags = append(o.diags, d)
		return false
	}
	for i, so := range s.objects {
		o.entries[keys[i]] = &entry{obj: so.obj, parents: []policyv1alpha1.Policy{s.policy}}
	}
	return true
}

// commitPlanned commits a policy whose fate the fleet-wide plan decided:
// when the plan refused it, only its diagnostics are added.
func (o *outputs) commitPlanned(s *staged, accepted bool) bool {
	if !accepted {
		o.diags = append(o.diags, s.diags...)
		return false
	}
	return o.commit(s)
}

// owner returns the policy that owns the object of key k, if any.
func (o *outputs) owner(k outputKey) (policyv1alpha1.Policy, bool) {
	e, ok := o.entries[k]
	if !ok {
		return nil, false
	}
	return e.parents[0], true
}

// diagnose adds diagnostics.
func (o *outputs) diagnose(ds ...sdk.Diagnostic) { o.diags = append(o.diags, ds...) }

// claim checks that policy p may take the names of keys: none is owned
// already nor appears twice. Otherwise it returns the error diagnostic on
// the first key in conflict.
func claim(p policyv1alpha1.Policy, keys []outputKey, owner func(outputKey) (policyv1alpha1.Policy, bool)) (sdk.Diagnostic, bool) {
	seen := map[outputKey]bool{}
	for _, k := range keys {
		holder, taken := owner(k)
		if taken || seen[k] {
			if !taken {
				holder = p
			}
			d := sdk.Errorf(p, "metadata.name", "%s %s/%s in cluster %q is already generated for %s; rename one of the policies",
				k.Kind, k.Namespace, k.Name, k.Cluster, sdk.RefOf(holder))
			d.Cluster = k.Cluster
			return d, false
		}
		seen[k] = true
	}
	return sdk.Diagnostic{}, true
}

// claims are the object names that policies took, fleet-wide: what the
// plan decides name conflicts with.
type claims map[outputKey]policyv1alpha1.Policy

// take gives p the names of keys unless one of them is taken, in which
// case it gives none and returns the error diagnostic.
func (c claims) take(p policyv1alpha1.Policy, keys []outputKey) (sdk.Diagnostic, bool) {
	d, ok := claim(p, keys, func(k outputKey) (policyv1alpha1.Policy, bool) {
		holder, taken := c[k]
		return holder, taken
	})
	if ok {
		for _, k := range keys {
			c[k] = p
		}
	}
	return d, ok
}

// putShared adds an object that several policies need, such as the
// ServiceEntry importing a remote Service; parents are all of them. An
// object whose name a policy already took is reported on the first parent.
func (o *outputs) putShared(cluster string, obj object, parents []policyv1alpha1.Policy) {
	k := keyOf(cluster, obj)
	if e, ok := o.entries[k]; ok {
		d := sdk.Errorf(parents[0], "metadata.name", "%s %s/%s in cluster %q is already generated for %s",
			k.Kind, k.Namespace, k.Name, k.Cluster, sdk.RefOf(e.parents[0]))
		d.Cluster = cluster
		o.diags = append(o.diags, d)
		return
	}
	o.entries[k] = &entry{obj: obj, parents: slices.Clone(parents)}
}

// emit hands every object to resp in a stable order, through specs.
// Parents keep the order in which policies were translated, so the first,
// which names the policy label, is the one that owns the object.
func (o *outputs) emit(resp *sdk.Response, specs *specCache) {
	keys := slices.SortedFunc(maps.Keys(o.entries), outputKey.compare)
	for _, k := range keys {
		e := o.entries[k]
		specs.emit(resp, e.obj, e.parents)
	}
	resp.DiagnoseFleet(o.diags...)
}

// keyFor is the output key of an object of type tm, named namespace/name, in cluster.
func keyFor(cluster string, tm metav1.TypeMeta, namespace, name string) outputKey {
	return outputKey{Cluster: cluster, APIVersion: tm.APIVersion, Kind: tm.Kind, Namespace: namespace, Name: name}
}

func typeMetaOf(apiVersion, kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: apiVersion, Kind: kind}
}
