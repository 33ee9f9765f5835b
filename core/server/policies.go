package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/meshrelay/meshrelay/api/meta"
	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/api/snapshot"
	"github.com/meshrelay/meshrelay/core/manifest"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// policyKinds maps the policy kinds to their resources.
var policyKinds = map[string]schema.GroupVersionResource{
	policyv1alpha1.KindTrafficPolicy:      policyv1alpha1.SchemeGroupVersion.WithResource("trafficpolicies"),
	policyv1alpha1.KindAccessPolicy:       policyv1alpha1.SchemeGroupVersion.WithResource("accesspolicies"),
	policyv1alpha1.KindVirtualDestination: policyv1alpha1.SchemeGroupVersion.WithResource("virtualdestinations"),
	policyv1alpha1.KindMeshTrust:          policyv1alpha1.SchemeGroupVersion.WithResource("meshtrusts"),
	policyv1alpha1.KindRolloutStrategy:    policyv1alpha1.SchemeGroupVersion.WithResource("rolloutstrategies"),
}

// DirPolicies reads policies from a watched directory of YAML.
type DirPolicies struct {
	dir *manifest.Dir
}

// NewDirPolicies returns a policy source over a directory. Files that do
// not parse are logged and skipped; the rest count.
func NewDirPolicies(path string, logger *slog.Logger) *DirPolicies {
	return &DirPolicies{dir: manifest.NewDir(path, manifest.Options{Logger: logger})}
}

// Run publishes the directory's policies each time they change.
func (d *DirPolicies) Run(ctx context.Context, publish func(*snapshot.Snapshot)) error {
	return d.dir.Run(ctx, func(s *snapshot.Snapshot) { publish(onlyPolicies(s)) })
}

// onlyPolicies keeps the policy.meshrelay.io resources of a snapshot.
func onlyPolicies(s *snapshot.Snapshot) *snapshot.Snapshot {
	return filterSnapshot(s, func(r snapshot.Resource) bool { return r.ID.Group == policyv1alpha1.GroupName })
}

// filterSnapshot keeps the resources of a snapshot that keep accepts.
func filterSnapshot(s *snapshot.Snapshot, keep func(snapshot.Resource) bool) *snapshot.Snapshot {
	var rs []snapshot.Resource
	for r := range s.All() {
		if keep(r) {
			rs = append(rs, r)
		}
	}
	out, _ := snapshot.New(s.Version(), rs) // a subset of a valid snapshot is valid
	return out
}

// KubePolicies reads policies from the management cluster with informers
// and writes their status back.
type KubePolicies struct {
	client dynamic.Interface
	log    *slog.Logger

	mu       sync.Mutex
	informer map[string]cache.SharedIndexInformer
	written  map[string][]byte // the status last written, as JSON
}

// NewKubePolicies returns a policy source over the management cluster.
func NewKubePolicies(cfg *rest.Config, logger *slog.Logger) (*KubePolicies, error) {
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kube policy source: %w", err)
	}
	return &KubePolicies{client: client, log: logger, informer: map[string]cache.SharedIndexInformer{}, written: map[string][]byte{}}, nil
}

// Run watches the policy kinds and publishes them each time they change.
func (k *KubePolicies) Run(ctx context.Context, publish func(*snapshot.Snapshot)) error {
	factory := dynamicinformer.NewDynamicSharedInformerFactory(k.client, 10*time.Minute)
	changed := make(chan struct{}, 1)
	notify := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { notify() },
		UpdateFunc: func(any, any) { notify() },
		DeleteFunc: func(any) { notify() },
	}
	k.mu.Lock()
	for kind, gvr := range policyKinds {
		inf := factory.ForResource(gvr).Informer()
		if _, err := inf.AddEventHandler(handler); err != nil {
			k.mu.Unlock()
			return fmt.Errorf("watch %s: %w", gvr.Resource, err)
		}
		k.informer[kind] = inf
	}
	k.mu.Unlock()
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	for gvr, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok && ctx.Err() == nil {
			return fmt.Errorf("sync %s: is the policy CRD installed?", gvr.Resource)
		}
	}
	var last snapshot.Hash
	var version uint64
	for {
		if s := k.snapshot(version + 1); s.Hash() != last {
			version++
			last = s.Hash()
			publish(s)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
	}
}

func (k *KubePolicies) snapshot(version uint64) *snapshot.Snapshot {
	k.mu.Lock()
	defer k.mu.Unlock()
	var rs []snapshot.Resource
	for _, inf := range k.informer {
		for _, obj := range inf.GetStore().List() {
			u, ok := obj.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			r, err := snapshot.FromObject(u.Object)
			if err != nil {
				k.log.Warn("skip policy", "name", u.GetName(), "error", err)
				continue
			}
			rs = append(rs, r)
		}
	}
	s, err := snapshot.New(version, rs)
	if err != nil {
		k.log.Warn("policies", "error", err)
		return snapshot.Empty
	}
	return s
}

// WriteStatus writes a policy's status subresource when it changed.
func (k *KubePolicies) WriteStatus(ctx context.Context, ref meta.PolicyRef, st policyv1alpha1.PolicyStatus) error {
	return k.WriteStatusWith(ctx, ref, st, nil)
}

// WriteStatusWith writes a policy's status with fields of its kind's own
// (a MeshTrust's phase, roots and meshes) next to the shared ones.
func (k *KubePolicies) WriteStatusWith(ctx context.Context, ref meta.PolicyRef, st policyv1alpha1.PolicyStatus, extra map[string]any) error {
	gvr, ok := policyKinds[ref.Kind]
	if !ok {
		return nil
	}
	key := ref.Key()
	k.mu.Lock()
	inf := k.informer[ref.Kind]
	k.mu.Unlock()
	if inf == nil {
		return nil
	}
	obj, exists, err := inf.GetStore().GetByKey(ref.Namespace + "/" + ref.Name)
	if err != nil || !exists {
		return err
	}
	u := obj.(*unstructured.Unstructured).DeepCopy()
	st.ObservedGeneration = u.GetGeneration()
	cond := metav1.Condition{Type: "Accepted", Status: metav1.ConditionTrue, Reason: string(st.State), ObservedGeneration: u.GetGeneration(), LastTransitionTime: metav1.Now()}
	if st.State != policyv1alpha1.StateAccepted {
		cond.Status = metav1.ConditionFalse
	}
	st.Conditions = []metav1.Condition{cond}
	var cur policyv1alpha1.PolicyStatus
	if data, err := json.Marshal(u.Object["status"]); err == nil && json.Unmarshal(data, &cur) == nil {
		if len(cur.Conditions) == 1 && cur.Conditions[0].Status == cond.Status && cur.Conditions[0].Reason == cond.Reason {
			st.Conditions[0].LastTransitionTime = cur.Conditions[0].LastTransitionTime
		}
	}
	status, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&st)
	if err != nil {
		return fmt.Errorf("encode status: %w", err)
	}
	for f, v := range extra {
		status[f] = v
	}
	want, err := json.Marshal(status)
	if err != nil {
		return fmt.Errorf("encode status: %w", err)
	}
	k.mu.Lock()
	prev := k.written[key]
	k.mu.Unlock()
	if have, _ := json.Marshal(u.Object["status"]); bytes.Equal(prev, want) || bytes.Equal(have, want) {
		k.remember(key, want)
		return nil
	}
	u.Object["status"] = status
	if _, err := k.client.Resource(gvr).Namespace(ref.Namespace).UpdateStatus(ctx, u, metav1.UpdateOptions{FieldManager: "meshrelay-server"}); err != nil {
		return fmt.Errorf("update status of %s: %w", key, err)
	}
	k.remember(key, want)
	return nil
}

// ReadSecret reads a Secret of the management cluster.
func (k *KubePolicies) ReadSecret(ctx context.Context, namespace, name string) (map[string][]byte, error) {
	u, err := k.client.Resource(schema.GroupVersionResource{Version: "v1", Resource: "secrets"}).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	raw, _, _ := unstructured.NestedStringMap(u.Object, "data")
	out := make(map[string][]byte, len(raw))
	for key, v := range raw {
		data, err := base64.StdEncoding.DecodeString(v)
		if err != nil {
			return nil, fmt.Errorf("Secret %s/%s key %s: %w", namespace, name, key, err)
		}
		out[key] = data
	}
	return out, nil
}

func (k *KubePolicies) remember(key string, st []byte) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.written[key] = st
}
