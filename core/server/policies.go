package server

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"time"

	policyv1alpha1 "github.com/meshrelay/meshrelay/api/policy/v1alpha1"
	"github.com/meshrelay/meshrelay/core/agent/discovery"
	"github.com/meshrelay/meshrelay/core/snapshot"
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
}

// DirPolicies reads policies from a watched directory of YAML.
type DirPolicies struct {
	dir *discovery.Dir
}

// NewDirPolicies returns a policy source over a directory. Files that do
// not parse are logged and skipped; the rest count.
func NewDirPolicies(path string, logger *slog.Logger) *DirPolicies {
	return &DirPolicies{dir: discovery.NewDir(path, discovery.DirOptions{Logger: logger})}
}

// Run publishes the directory's policies each time they change.
func (d *DirPolicies) Run(ctx context.Context, publish func(*snapshot.Snapshot)) error {
	return d.dir.Run(ctx, func(s *snapshot.Snapshot) { publish(onlyPolicies(s)) })
}

// onlyPolicies keeps the policy.meshrelay.io resources of a snapshot.
func onlyPolicies(s *snapshot.Snapshot) *snapshot.Snapshot {
	var rs []snapshot.Resource
	for r := range s.All() {
		if r.ID.Group == policyv1alpha1.GroupName {
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
	written  map[string]policyv1alpha1.PolicyStatus
}

// NewKubePolicies returns a policy source over the management cluster.
func NewKubePolicies(cfg *rest.Config, logger *slog.Logger) (*KubePolicies, error) {
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kube policy source: %w", err)
	}
	return &KubePolicies{client: client, log: logger, informer: map[string]cache.SharedIndexInformer{}, written: map[string]policyv1alpha1.PolicyStatus{}}, nil
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
func (k *KubePolicies) WriteStatus(ctx context.Context, ref PolicyRef, st policyv1alpha1.PolicyStatus) error {
	gvr, ok := policyKinds[ref.Kind]
	if !ok {
		return nil
	}
	key := ref.key()
	k.mu.Lock()
	prev, written := k.written[key]
	inf := k.informer[ref.Kind]
	k.mu.Unlock()
	if written && reflect.DeepEqual(prev, st) {
		return nil
	}
	if inf == nil {
		return nil
	}
	obj, exists, err := inf.GetStore().GetByKey(ref.Namespace + "/" + ref.Name)
	if err != nil || !exists {
		return err
	}
	u := obj.(*unstructured.Unstructured).DeepCopy()
	st.ObservedGeneration = u.GetGeneration()
	now := metav1.Now()
	cond := metav1.Condition{Type: "Accepted", Status: metav1.ConditionTrue, Reason: string(st.State), ObservedGeneration: u.GetGeneration(), LastTransitionTime: now}
	if st.State != policyv1alpha1.StateAccepted {
		cond.Status = metav1.ConditionFalse
	}
	st.Conditions = []metav1.Condition{cond}
	if old, ok := u.Object["status"]; ok {
		var cur policyv1alpha1.PolicyStatus
		if data, err := json.Marshal(old); err == nil && json.Unmarshal(data, &cur) == nil {
			if len(cur.Conditions) == 1 && cur.Conditions[0].Status == cond.Status && cur.Conditions[0].Reason == cond.Reason {
				st.Conditions[0].LastTransitionTime = cur.Conditions[0].LastTransitionTime
			}
			if reflect.DeepEqual(cur, st) {
				k.remember(key, st)
				return nil
			}
		}
	}
	status, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&st)
	if err != nil {
		return fmt.Errorf("encode status: %w", err)
	}
	u.Object["status"] = status
	if _, err := k.client.Resource(gvr).Namespace(ref.Namespace).UpdateStatus(ctx, u, metav1.UpdateOptions{FieldManager: "meshrelay-server"}); err != nil {
		return fmt.Errorf("update status of %s: %w", key, err)
	}
	k.remember(key, st)
	return nil
}

func (k *KubePolicies) remember(key string, st policyv1alpha1.PolicyStatus) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.written[key] = st
}
