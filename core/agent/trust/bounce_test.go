package trust

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/meshrelay/meshrelay/core/pki"
	"github.com/meshrelay/meshrelay/internal/testenv"
	relayv1 "github.com/meshrelay/meshrelay/proto/relay/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// localCA plays the server's Trust service for tests of the agent side:
// one plan, and CSRs signed by a real mesh root.
type localCA struct {
	root *pki.CA
	plan *relayv1.TrustPlan
}

func newLocalCA(t *testing.T, perMinute int32) *localCA {
	t.Helper()
	root, err := pki.GenerateMeshRoot("test mesh root", 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return &localCA{root: root, plan: &relayv1.TrustPlan{
		Policy: "meshrelay/fleet", Namespace: "istio-system", Phase: "Active",
		TrustBundle: pki.CertificatesPEM(root.Certificate()), SigningRoot: pki.Fingerprint(root.Certificate()),
		RenewBeforeSeconds: 3600, BouncePerMinute: perMinute,
	}}
}

func (l *localCA) Report(context.Context, *relayv1.TrustReport) (*relayv1.TrustPlan, error) {
	return l.plan, nil
}

func (l *localCA) Sign(_ context.Context, r *relayv1.TrustSignRequest) (*relayv1.TrustSignResponse, error) {
	cert, chain, _, err := l.root.SignIntermediateCSR(r.GetCsr(), "east", []string{"cluster.local"}, 10*time.Hour)
	return &relayv1.TrustSignResponse{CaCert: cert, CertChain: chain, TrustBundle: l.plan.GetTrustBundle()}, err
}

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) add(d time.Duration) { c.mu.Lock(); defer c.mu.Unlock(); c.now = c.now.Add(d) }

// Bouncing restarts istiod first, waits for its rollout, then exactly the
// workloads whose sidecars predate the chain, at most the configured
// number per minute, holding back one whose PodDisruptionBudget allows no
// disruption until it does.
func TestBounceRestartsStaleWorkloadsAtRate(t *testing.T) {
	k := testenv.StartKube(t)
	cs, err := kubernetes.NewForConfig(k.Config())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, ns := range []string{"istio-system", "app"} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Pods exist before the chain: the clock runs an hour ahead of the API server's.
	deploy(t, cs, "istio-system", "istiod", map[string]string{"app": "istiod"}, podPlain)
	deploy(t, cs, "app", "a", map[string]string{"app": "a"}, podSidecar)
	deploy(t, cs, "app", "b", map[string]string{"app": "b"}, podInjected)
	deploy(t, cs, "app", "c", map[string]string{"app": "c"}, podPlain) // no sidecar: not in the mesh
	deploy(t, cs, "app", "d", map[string]string{"app": "d"}, nil)      // no pods
	deploy(t, cs, "app", "f", map[string]string{"app": "f"}, podSidecar)
	statefulSet(t, cs, "app", "e", map[string]string{"app": "e"})
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "f", Namespace: "app"},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "f"}}},
	}
	pdb, err = cs.PolicyV1().PodDisruptionBudgets("app").Create(ctx, pdb, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	clk := &clock{now: time.Now().Add(time.Hour)}
	m := New(Options{Cluster: "east", Now: clk.Now}, newLocalCA(t, 2), KubeSecrets{Client: cs}, cs, nil)
	step := func() {
		t.Helper()
		if err := m.Step(ctx); err != nil {
			t.Fatal(err)
		}
	}
	step()
	if got := restarted(t, cs); !slices.Equal(got, []string{"istio-system/istiod"}) {
		t.Fatalf("first step restarted %v, want istiod alone", got)
	}
	if b, p := m.bounce.progress(); b != 0 || p != 4 {
		t.Fatalf("progress while istiod rolls out = %d bounced, %d pending; want 0, 4", b, p)
	}
	step()
	if got := restarted(t, cs); len(got) != 1 {
		t.Fatalf("workloads restarted before istiod's rollout completed: %v", got)
	}
	rolledOut(t, cs, "istio-system", "istiod")
	step()
	if got, want := restarted(t, cs), []string{"app/a", "app/b", "istio-system/istiod"}; !slices.Equal(got, want) {
		t.Fatalf("after istiod's rollout restarted %v, want %v (two a minute)", got, want)
	}
	step()
	if got := restarted(t, cs); len(got) != 3 {
		t.Fatalf("restarted %v within the same minute, beyond the rate of 2", got)
	}
	clk.add(61 * time.Second)
	step()
	if got, want := restarted(t, cs), []string{"app/a", "app/b", "app/e", "istio-system/istiod"}; !slices.Equal(got, want) {
		t.Fatalf("a minute later restarted %v, want %v (f held back by its PodDisruptionBudget)", got, want)
	}
	if b, p := m.bounce.progress(); b != 3 || p != 1 {
		t.Fatalf("progress = %d bounced, %d pending; want 3, 1", b, p)
	}
	pdb.Status = policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 1, ObservedGeneration: pdb.Generation}
	if _, err := cs.PolicyV1().PodDisruptionBudgets("app").UpdateStatus(ctx, pdb, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	step()
	if got, want := restarted(t, cs), []string{"app/a", "app/b", "app/e", "app/f", "istio-system/istiod"}; !slices.Equal(got, want) {
		t.Fatalf("restarted %v, want %v", got, want)
	}
	if b, p := m.bounce.progress(); b != 4 || p != 0 {
		t.Fatalf("progress = %d bounced, %d pending; want 4, 0", b, p)
	}
}

// Pod templates: with an istio-proxy container, with Istio's injection
// annotation, or plain.
var (
	podSidecar  = &corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}, {Name: "istio-proxy", Image: "proxy"}}}
	podInjected = &corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}
	podPlain    = &corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}
)

// deploy creates a Deployment and, unless pod is nil, one Pod of it.
func deploy(t *testing.T, cs kubernetes.Interface, ns, name string, labels map[string]string, pod *corev1.PodSpec) {
	t.Helper()
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: *podPlain},
		},
	}
	if _, err := cs.AppsV1().Deployments(ns).Create(context.Background(), d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if pod != nil {
		createPod(t, cs, ns, name, labels, pod, pod == podInjected)
	}
}

func statefulSet(t *testing.T, cs kubernetes.Interface, ns, name string, labels map[string]string) {
	t.Helper()
	s := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.StatefulSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: *podPlain},
		},
	}
	if _, err := cs.AppsV1().StatefulSets(ns).Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createPod(t, cs, ns, name, labels, podSidecar, false)
}

func createPod(t *testing.T, cs kubernetes.Interface, ns, name string, labels map[string]string, spec *corev1.PodSpec, injected bool) {
	t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name + "-0", Namespace: ns, Labels: labels}, Spec: *spec}
	if injected {
		p.Annotations = map[string]string{"sidecar.istio.io/status": `{"containers":["istio-proxy"]}`}
	}
	if _, err := cs.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// rolledOut sets istiod's status as the Deployment controller would once
// its rollout completed.
func rolledOut(t *testing.T, cs kubernetes.Interface, ns, name string) {
	t.Helper()
	d, err := cs.AppsV1().Deployments(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: 1, UpdatedReplicas: 1, AvailableReplicas: 1, ReadyReplicas: 1}
	if _, err := cs.AppsV1().Deployments(ns).UpdateStatus(context.Background(), d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// restarted lists the workloads whose pod template was restarted.
func restarted(t *testing.T, cs kubernetes.Interface) []string {
	t.Helper()
	var out []string
	ds, err := cs.AppsV1().Deployments("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds.Items {
		if d.Spec.Template.Annotations[annRestartedAt] != "" {
			out = append(out, d.Namespace+"/"+d.Name)
		}
	}
	ss, err := cs.AppsV1().StatefulSets("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range ss.Items {
		if s.Spec.Template.Annotations[annRestartedAt] != "" {
			out = append(out, s.Namespace+"/"+s.Name)
		}
	}
	slices.Sort(out)
	return out
}
