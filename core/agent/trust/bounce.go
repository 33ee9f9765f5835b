package trust

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// annRestartedAt is the pod template annotation of kubectl rollout restart.
const annRestartedAt = "kubectl.kubernetes.io/restartedAt"

// workload is a Deployment, StatefulSet or DaemonSet.
type workload struct {
	kind, namespace, name string
	selector              *metav1.LabelSelector
	template              *corev1.PodTemplateSpec
	rolledOut             bool
}

func (w workload) key() string { return w.namespace + "/" + strings.ToLower(w.kind) + "/" + w.name }

// bouncer restarts the workloads whose proxies carry an old chain.
type bouncer struct {
	kube kubernetes.Interface
	now  func() time.Time

	chain    string      // the chain the counts are for
	done     bool        // nothing is left to restart for chain
	restarts []time.Time // workload restarts, for the rate
	bounced  int32
	pending  int32
	pods     map[string][]corev1.Pod // this step's pods by namespace
}

func (b *bouncer) progress() (bounced, pending int32) { return b.bounced, b.pending }

// step restarts istiod when its pods predate the chain, then, once its
// rollout is complete, the stale workloads at the plan's rate.
func (b *bouncer) step(ctx context.Context, plan *relayv1.TrustPlan, secret *corev1.Secret) error {
	if secret == nil || plan.GetBouncePerMinute() <= 0 {
		b.pending = 0
		return nil
	}
	chain := secret.Annotations[AnnChain]
	since, err := time.Parse(time.RFC3339, secret.Annotations[AnnChainSince])
	if err != nil || chain == "" {
		return fmt.Errorf("Secret %s/%s lacks its chain annotations", secret.Namespace, secret.Name)
	}
	if chain != b.chain {
		b.chain, b.bounced, b.done = chain, 0, false
	}
	if b.done {
		return nil // pods created from now on get the chain from istiod
	}
	all, err := b.workloads(ctx)
	if err != nil {
		return err
	}
	if err := b.listPods(ctx); err != nil {
		return err
	}
	istiod, others := splitIstiod(all, plan.GetNamespace())
	ready, since, err := b.istiod(ctx, istiod, chain, since)
	if err != nil {
		return err
	}
	stale, err := b.stale(ctx, others, chain, since)
	if err != nil {
		return err
	}
	b.pending = int32(len(stale))
	if !ready {
		return nil
	}
	defer func() { b.done = b.pending == 0 }()
	for _, w := range stale {
		if !b.allowed(int(plan.GetBouncePerMinute())) {
			break
		}
		blocked, err := b.blockedByPDB(ctx, w)
		if err != nil {
			return err
		}
		if blocked {
			continue
		}
		if err := b.restart(ctx, w, chain); err != nil {
			return err
		}
		b.restarts = append(b.restarts, b.now())
		b.bounced++
		b.pending--
	}
	return nil
}

// istiod restarts istiod when its pods predate the chain and reports
// whether its rollout is complete, and since which time proxies get the
// new chain from it.
func (b *bouncer) istiod(ctx context.Context, istiod []workload, chain string, since time.Time) (bool, time.Time, error) {
	ready := true
	for _, w := range istiod {
		if w.template.Annotations[AnnChain] == chain {
			if at, err := time.Parse(time.RFC3339, w.template.Annotations[annRestartedAt]); err == nil && at.After(since) {
				since = at
			}
			ready = ready && w.rolledOut
			continue
		}
		old, err := b.podsBefore(ctx, w, since, false)
		if err != nil || !old {
			ready = ready && w.rolledOut
			continue
		}
		if err := b.restart(ctx, w, chain); err != nil {
			return false, since, err
		}
		ready = false
	}
	return ready, since, nil
}

// stale returns the workloads with a sidecar pod created before since
// whose template does not carry chain.
func (b *bouncer) stale(ctx context.Context, ws []workload, chain string, since time.Time) ([]workload, error) {
	var out []workload
	for _, w := range ws {
		if w.template.Annotations[AnnChain] == chain {
			continue
		}
		old, err := b.podsBefore(ctx, w, since, true)
		if err != nil {
			return nil, err
		}
		if old {
			out = append(out, w)
		}
	}
	return out, nil
}

// listPods reads every pod of the cluster once for the step.
func (b *bouncer) listPods(ctx context.Context) error {
	pods, err := b.kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list pods: %w", err)
	}
	b.pods = map[string][]corev1.Pod{}
	for _, p := range pods.Items {
		b.pods[p.Namespace] = append(b.pods[p.Namespace], p)
	}
	return nil
}

// podsBefore reports whether a pod of w (with a sidecar, if sidecar) was
// created before t.
func (b *bouncer) podsBefore(_ context.Context, w workload, t time.Time, sidecar bool) (bool, error) {
	sel, err := metav1.LabelSelectorAsSelector(w.selector)
	if err != nil || sel.Empty() {
		return false, nil
	}
	for _, p := range b.pods[w.namespace] {
		if sel.Matches(labels.Set(p.Labels)) && p.CreationTimestamp.Time.Before(t) && (!sidecar || hasSidecar(&p)) {
			return true, nil
		}
	}
	return false, nil
}

// hasSidecar reports whether Istio injected a proxy into the pod.
func hasSidecar(p *corev1.Pod) bool {
	if _, ok := p.Annotations["sidecar.istio.io/status"]; ok {
		return true
	}
	for _, c := range slices.Concat(p.Spec.Containers, p.Spec.InitContainers) {
		if c.Name == "istio-proxy" {
			return true
		}
	}
	return false
}

// allowed reports whether the rate lets one more workload restart now.
func (b *bouncer) allowed(perMinute int) bool {
	now := b.now()
	b.restarts = slices.DeleteFunc(b.restarts, func(t time.Time) bool { return now.Sub(t) >= time.Minute })
	return len(b.restarts) < perMinute
}

// blockedByPDB reports whether a PodDisruptionBudget covering w's pods
// allows no disruption now.
func (b *bouncer) blockedByPDB(ctx context.Context, w workload) (bool, error) {
	pdbs, err := b.kube.PolicyV1().PodDisruptionBudgets(w.namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, fmt.Errorf("list PodDisruptionBudgets in %s: %w", w.namespace, err)
	}
	for _, p := range pdbs.Items {
		sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
		if err != nil || sel.Empty() || !sel.Matches(labels.Set(w.template.Labels)) {
			continue
		}
		if p.Status.DisruptionsAllowed < 1 {
			return true, nil
		}
	}
	return false, nil
}

// restart is kubectl rollout restart, recording the chain in the template.
func (b *bouncer) restart(ctx context.Context, w workload, chain string) error {
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{"metadata": map[string]any{
		"annotations": map[string]string{annRestartedAt: b.now().UTC().Format(time.RFC3339), AnnChain: chain},
	}}}})
	apps := b.kube.AppsV1()
	var err error
	opts := metav1.PatchOptions{FieldManager: "meshrelay-agent"}
	switch w.kind {
	case "Deployment":
		_, err = apps.Deployments(w.namespace).Patch(ctx, w.name, types.StrategicMergePatchType, patch, opts)
	case "StatefulSet":
		_, err = apps.StatefulSets(w.namespace).Patch(ctx, w.name, types.StrategicMergePatchType, patch, opts)
	case "DaemonSet":
		_, err = apps.DaemonSets(w.namespace).Patch(ctx, w.name, types.StrategicMergePatchType, patch, opts)
	}
	if err != nil {
		return fmt.Errorf("restart %s: %w", w.key(), err)
	}
	return nil
}

// workloads lists the cluster's Deployments, StatefulSets and DaemonSets,
// sorted.
func (b *bouncer) workloads(ctx context.Context) ([]workload, error) {
	apps := b.kube.AppsV1()
	var out []workload
	ds, err := apps.Deployments("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list Deployments: %w", err)
	}
	for _, d := range ds.Items {
		out = append(out, workload{kind: "Deployment", namespace: d.Namespace, name: d.Name, selector: d.Spec.Selector, template: &d.Spec.Template, rolledOut: deploymentRolledOut(&d)})
	}
	ss, err := apps.StatefulSets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list StatefulSets: %w", err)
	}
	for _, s := range ss.Items {
		out = append(out, workload{kind: "StatefulSet", namespace: s.Namespace, name: s.Name, selector: s.Spec.Selector, template: &s.Spec.Template})
	}
	dss, err := apps.DaemonSets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list DaemonSets: %w", err)
	}
	for _, d := range dss.Items {
		out = append(out, workload{kind: "DaemonSet", namespace: d.Namespace, name: d.Name, selector: d.Spec.Selector, template: &d.Spec.Template})
	}
	slices.SortFunc(out, func(a, b workload) int { return strings.Compare(a.key(), b.key()) })
	return out, nil
}

// deploymentRolledOut is kubectl rollout status: the controller saw the
// latest template and every replica runs it and is available.
func deploymentRolledOut(d *appsv1.Deployment) bool {
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	s := d.Status
	return s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == want && s.AvailableReplicas >= want && s.Replicas == want
}

// splitIstiod separates istiod (app=istiod in the mesh namespace) from the
// other workloads.
func splitIstiod(all []workload, namespace string) (istiod, others []workload) {
	for _, w := range all {
		if w.kind == "Deployment" && w.namespace == namespace && w.template.Labels["app"] == "istiod" {
			istiod = append(istiod, w)
		} else {
			others = append(others, w)
		}
	}
	return istiod, others
}
